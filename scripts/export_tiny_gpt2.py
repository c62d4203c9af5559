"""Export a tiny random GPT-2 to ONNX four ways into tests/models/tiny_gpt2/ (dev-time only; files committed).

Why this script exists: the semantics tests need real exporter output with symbolic extents (dynamic batch,
sequence and past lengths) and a merged decoder that branches with `If`, which is what decoders
exported by the usual tools look like.  The model is tiny (2 layers, 4 heads, hidden 64, vocabulary
1000, context 128; about 180k parameters) so the committed checkpoint stays under a megabyte.

Needs torch and transformers, which are not project dependencies; CI never runs this script.  The
dev-time environment it was last run in (a venv outside the repository):

    python3.11 -m venv /work/gpt2-venv
    /work/gpt2-venv/bin/pip install torch==2.13.0 transformers==4.46.3 onnx==1.23.2 \
        onnxruntime==1.32.0 numpy==2.4.6 safetensors==0.8.0
    /work/gpt2-venv/bin/python scripts/export_tiny_gpt2.py      # about 5 s

transformers 4.46.3 is chosen because its GPT-2 still takes and returns the legacy tuple
`past_key_values` (newer releases wrap it in a Cache object), so the TorchScript exporter
(`torch.onnx.export(..., dynamo=False)`, opset 17, constant folding on) traces plain tensors.
The model uses eager attention (no SDPA).  Weights: `torch.manual_seed(0)`, GPT2LMHeadModel's
own random init with initializer_range 0.2 (not 0.02: see INIT_RANGE), then every LayerNorm
scale/shift and every bias is redrawn at random too (GPT-2 inits them to ones and zeros): so a
compiled module that drops a bias or a LayerNorm scale cannot still match, and the exporter's
deduplication of equal-valued initializers cannot fold, say, all five LayerNorm scales into one
name.  The language-model head stays tied to the token embedding (the exporter folds its
transpose into an initializer of its own, named `lm_head.weight.T` here).

Files written (see the folder's README.md for the oracle's keys):

- `decoder.onnxtext`: (a) no past: input_ids, attention_mask [batch_size, sequence_length] ->
  logits [batch_size, sequence_length, 1000], present.{0,1}.{key,value} [batch_size, 4, sequence_length, 16];
- `decoder_with_past.onnxtext`: (b) with past_key_values.{0,1}.{key,value} [batch_size, 4,
  past_sequence_length, 16] in and attention_mask [batch_size, past_sequence_length + sequence_length];
- `decoder_merged.onnxtext`: (c) one `If` on use_cache_branch (bool[1]): then = (b)'s body,
  else = (a)'s body (which ignores the past inputs); attention_mask is [batch_size, attention_length];
  composed here with onnx.helper (see `merge`), the weights being initializers of the outer graph;
- `decoder_positions.onnxtext`: (d) (b) plus an explicit `position_ids` int64 [batch_size,
  sequence_length] input (after attention_mask, before the past), exported after (a) and (b), which it
  leaves unchanged.  With it a server batches rows at different positions into one call (a "ragged
  cohort"): each row's past left-aligned in one past tensor of the longest row's length, zeros and
  attention_mask 0 after it, the new tokens right-padded (mask 0 there) with position_ids = the row's
  past length + k.  GPT-2's causal mask compares key and query indices along the concatenated
  [past, new] axis, so a real query at k sees keys [0, Pmax + k]: its row's past, the padding (masked
  by attention_mask) and its own span up to k.  `check_ragged` checks exactly that against each row
  run alone, and that an empty past with position_ids = arange is (a) (the prompt through the same
  graph); the script fails loudly otherwise;
- `tiny_gpt2.safetensors`: every float initializer of the four graphs, by its ONNX name (the
  graphs' text points into it as external data, as examples/digits does);
- `expected.npz`: onnxruntime's outputs on fixed prompts (the oracle for Loam's tests).

`decoder_positions.loam.toml` (its drafted layout, like the other three graphs') is not written here:
`loam layout decoder_positions.onnxtext` wrote it.
"""

from __future__ import annotations

import io
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnx.checker
import onnx.parser
import onnx.printer
import onnxruntime as ort
import safetensors
import torch
import transformers
from onnx import TensorProto, helper, numpy_helper
from onnx.external_data_helper import load_external_data_for_model, set_external_data
from safetensors.numpy import save_file
from safetensors_layout import safetensors_offsets
from transformers import GPT2Config, GPT2LMHeadModel

OUT = Path(__file__).resolve().parent.parent / "tests" / "models" / "tiny_gpt2"
CHECKPOINT = "tiny_gpt2.safetensors"
SEED = 0
# GPT-2's default 0.02 leaves the tied head seeing mostly the current token's own embedding, so
# greedy decoding repeats the last prompt token 20 times; 0.2 gives a varied sequence whose top-1
# logit leads the runner-up by at least 0.018 at every step (far above the tests' tolerance).
INIT_RANGE = 0.2
OPSET = 17
N_LAYER, N_HEAD, N_EMBD, VOCAB, N_POSITIONS = 2, 4, 64, 1000, 128
HEAD = N_EMBD // N_HEAD
# dim_params, spelled the way exporters spell them.
BATCH, SEQ, PAST, TOTAL, ATTN = (
    "batch_size",
    "sequence_length",
    "past_sequence_length",
    "past_sequence_length + sequence_length",
    "attention_length",
)
KV = [f"{i}.{kind}" for i in range(N_LAYER) for kind in ("key", "value")]
PAST_NAMES = [f"past_key_values.{kv}" for kv in KV]
PRESENT_NAMES = [f"present.{kv}" for kv in KV]
OUTPUT_NAMES = ["logits", *PRESENT_NAMES]

POSITION_INPUTS = ["input_ids", "attention_mask", "position_ids", *PAST_NAMES]
# The ragged cohort check_ragged runs through (d): each row's past length and its new span's.
RAGGED_PASTS, RAGGED_SPANS = (5, 0, 9), (1, 4, 2)
RAGGED_ATOL = 1e-4

# The oracle's inputs: a fixed prompt (batch 1, 7 tokens) and a batch-2 case of length 4.
PROMPT = [[464, 23, 318, 257, 991, 286, 13]]
BATCH2 = [[11, 502, 77, 940], [3, 3, 600, 128]]
GREEDY_TOKENS = 20


def build_torch_model() -> GPT2LMHeadModel:
    """The tiny GPT-2 with seeded random weights (LayerNorm and biases included, see the docstring)."""
    torch.manual_seed(SEED)
    config = GPT2Config(
        n_layer=N_LAYER,
        n_head=N_HEAD,
        n_embd=N_EMBD,
        vocab_size=VOCAB,
        n_positions=N_POSITIONS,
        use_cache=True,
        attn_implementation="eager",
        initializer_range=INIT_RANGE,
    )
    model = GPT2LMHeadModel(config)
    assert model.config._attn_implementation == "eager"
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".ln_" in name or name.startswith("transformer.ln_f"):
                param.copy_((1.0 if name.endswith("weight") else 0.0) + 0.1 * torch.randn_like(param))
            elif name.endswith("bias"):
                param.copy_(0.02 * torch.randn_like(param))
    return model.eval()


class DecoderNoPast(GPT2LMHeadModel):
    """(a): the prompt's logits and its keys/values (a subclass, so parameter and node names stay GPT-2's own)."""

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:  # type: ignore[override]
        out = super().forward(input_ids=input_ids, attention_mask=attention_mask, use_cache=True, return_dict=True)
        return (out.logits, *(t for layer in out.past_key_values for t in layer))


class DecoderWithPast(GPT2LMHeadModel):
    """(b): one more step given the past keys/values as flat tensors (legacy tuple cache)."""

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, *past: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:  # type: ignore[override]
        pairs = tuple((past[2 * i], past[2 * i + 1]) for i in range(N_LAYER))
        out = super().forward(
            input_ids=input_ids, attention_mask=attention_mask, past_key_values=pairs, use_cache=True, return_dict=True
        )
        return (out.logits, *(t for layer in out.past_key_values for t in layer))


class DecoderWithPositions(GPT2LMHeadModel):
    """(d): (b) with explicit position_ids [batch, sequence] (GPT-2's own default is past + arange)."""

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor, *past: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:  # type: ignore[override]
        pairs = tuple((past[2 * i], past[2 * i + 1]) for i in range(N_LAYER))
        out = super().forward(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=pairs,
            use_cache=True,
            return_dict=True,
        )
        return (out.logits, *(t for layer in out.past_key_values for t in layer))


def export(module: torch.nn.Module, args: tuple[torch.Tensor, ...], inputs: list[str], axes: dict) -> onnx.ModelProto:
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            args,
            buffer,
            dynamo=False,
            opset_version=OPSET,
            do_constant_folding=True,
            input_names=inputs,
            output_names=OUTPUT_NAMES,
            dynamic_axes=axes,
        )
    return onnx.load_from_string(buffer.getvalue())


def export_both(model: GPT2LMHeadModel) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    state = model.state_dict()
    no_past = DecoderNoPast(model.config).eval()
    no_past.load_state_dict(state)
    with_past = DecoderWithPast(model.config).eval()
    with_past.load_state_dict(state)

    ids = torch.tensor(BATCH2)
    a = export(
        no_past,
        (ids, torch.ones_like(ids)),
        ["input_ids", "attention_mask"],
        {
            "input_ids": {0: BATCH, 1: SEQ},
            "attention_mask": {0: BATCH, 1: SEQ},
            "logits": {0: BATCH, 1: SEQ},
            **{name: {0: BATCH, 2: SEQ} for name in PRESENT_NAMES},
        },
    )
    # Trace (b) with past 3 and a step of 2, so no extent is 1 and none is specialised away.
    past = [torch.randn(2, N_HEAD, 3, HEAD) for _ in KV]
    b = export(
        with_past,
        (ids[:, :2], torch.ones(2, 5, dtype=torch.int64), *past),
        ["input_ids", "attention_mask", *PAST_NAMES],
        {
            "input_ids": {0: BATCH, 1: SEQ},
            "attention_mask": {0: BATCH, 1: TOTAL},
            "logits": {0: BATCH, 1: SEQ},
            **{name: {0: BATCH, 2: PAST} for name in PAST_NAMES},
            **{name: {0: BATCH, 2: TOTAL} for name in PRESENT_NAMES},
        },
    )
    return a, b


def export_positions(model: GPT2LMHeadModel) -> onnx.ModelProto:
    """(d), traced as (b) is (batch 2, past 3, a step of 2) with rows at different positions."""
    with_positions = DecoderWithPositions(model.config).eval()
    with_positions.load_state_dict(model.state_dict())
    ids = torch.tensor(BATCH2)[:, :2]
    past = [torch.randn(2, N_HEAD, 3, HEAD) for _ in KV]
    return export(
        with_positions,
        (ids, torch.ones(2, 5, dtype=torch.int64), torch.tensor([[3, 4], [1, 2]]), *past),
        POSITION_INPUTS,
        {
            "input_ids": {0: BATCH, 1: SEQ},
            "attention_mask": {0: BATCH, 1: TOTAL},
            "position_ids": {0: BATCH, 1: SEQ},
            "logits": {0: BATCH, 1: SEQ},
            **{name: {0: BATCH, 2: PAST} for name in PAST_NAMES},
            **{name: {0: BATCH, 2: TOTAL} for name in PRESENT_NAMES},
        },
    )


def weight_names(model: GPT2LMHeadModel) -> dict[tuple[tuple[int, ...], bytes], str]:
    """Readable names by content: every parameter, and its transpose (the exporter folds the tied
    head's `Transpose(wte)` into a fresh `onnx::MatMul_NNN` initializer)."""
    names: dict[tuple[tuple[int, ...], bytes], str] = {}
    for name, param in model.named_parameters():
        array = param.detach().numpy()
        names.setdefault((array.shape, array.tobytes()), name)
        if array.ndim == 2:
            transposed = np.ascontiguousarray(array.T)
            names.setdefault(
                (transposed.shape, transposed.tobytes()),
                "lm_head.weight.T" if name == "transformer.wte.weight" else f"{name}.T",
            )
    return names


def rename_initializers(model: onnx.ModelProto, names: dict[tuple[tuple[int, ...], bytes], str]) -> None:
    """Give every float initializer its parameter's name (found by content) and check none is left over."""
    renamed: dict[str, str] = {}
    for init in model.graph.initializer:
        if init.data_type != TensorProto.FLOAT:
            continue
        array = numpy_helper.to_array(init)
        new = names.get((array.shape, array.tobytes()))
        if new is None:
            raise SystemExit(f"float initializer {init.name} {list(array.shape)} matches no parameter")
        renamed[init.name] = new
        init.name = new
    for node in model.graph.node:
        node.input[:] = [renamed.get(name, name) for name in node.input]
    for info in model.graph.value_info:
        info.name = renamed.get(info.name, info.name)


def set_dims(info: onnx.ValueInfoProto, dims: list[int | str]) -> None:
    shape = info.type.tensor_type.shape
    del shape.dim[:]
    for dim in dims:
        entry = shape.dim.add()
        if isinstance(dim, str):
            entry.dim_param = dim
        else:
            entry.dim_value = dim


def fix_interface(model: onnx.ModelProto, with_past: bool) -> None:
    """Pin the inputs' and outputs' shapes to the readable dim_params (whatever the exporter wrote)."""
    total = TOTAL if with_past else SEQ
    for info in model.graph.input:
        if info.name in ("input_ids", "position_ids"):
            set_dims(info, [BATCH, SEQ])
        elif info.name == "attention_mask":
            set_dims(info, [BATCH, total])
        else:
            set_dims(info, [BATCH, N_HEAD, PAST, HEAD])
    for info in model.graph.output:
        set_dims(info, [BATCH, SEQ, VOCAB] if info.name == "logits" else [BATCH, N_HEAD, total, HEAD])


def merge(a: onnx.ModelProto, b: onnx.ModelProto) -> onnx.ModelProto:
    """(c): `If(use_cache_branch)` with then = (b)'s nodes and else = (a)'s nodes; the float weights
    (the same names in both) become initializers of the outer graph, read by both branches.  Like
    optimum's merger, each branch's outputs keep the names of the If's outputs."""
    weights_a = {i.name: i for i in a.graph.initializer}
    weights_b = {i.name: i for i in b.graph.initializer}
    assert weights_a.keys() == weights_b.keys(), weights_a.keys() ^ weights_b.keys()
    for name, init in weights_a.items():
        assert init.data_type == TensorProto.FLOAT, name
        assert np.array_equal(numpy_helper.to_array(init), numpy_helper.to_array(weights_b[name])), name

    def branch(model: onnx.ModelProto, name: str) -> onnx.GraphProto:
        return helper.make_graph(
            list(model.graph.node), name, [], list(model.graph.output), value_info=list(model.graph.value_info)
        )

    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, [BATCH, SEQ]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [BATCH, ATTN]),
        *(helper.make_tensor_value_info(n, TensorProto.FLOAT, [BATCH, N_HEAD, PAST, HEAD]) for n in PAST_NAMES),
        helper.make_tensor_value_info("use_cache_branch", TensorProto.BOOL, [1]),
    ]
    outputs = [
        helper.make_tensor_value_info("logits", TensorProto.FLOAT, [BATCH, SEQ, VOCAB]),
        *(helper.make_tensor_value_info(n, TensorProto.FLOAT, [BATCH, N_HEAD, TOTAL, HEAD]) for n in PRESENT_NAMES),
    ]
    if_node = helper.make_node(
        "If",
        ["use_cache_branch"],
        OUTPUT_NAMES,
        name="use_cache_branch.if",
        then_branch=branch(b, "with_past"),
        else_branch=branch(a, "no_past"),
    )
    graph = helper.make_graph([if_node], "decoder_merged", inputs, outputs, initializer=list(a.graph.initializer))
    return finish(graph, a)


def finish(graph: onnx.GraphProto, like: onnx.ModelProto) -> onnx.ModelProto:
    model = helper.make_model(graph, opset_imports=list(like.opset_import), ir_version=like.ir_version)
    model.producer_name = like.producer_name
    model.producer_version = like.producer_version
    return model


def with_initializers(model: onnx.ModelProto, initializers: list[TensorProto]) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.initializer[:]
    out.graph.initializer.extend(initializers)
    return out


HEADERS = {
    "decoder": "tiny GPT-2, (a) decoder without past",
    "decoder_with_past": "tiny GPT-2, (b) decoder with past_key_values",
    "decoder_merged": "tiny GPT-2, (c) merged decoder: If(use_cache_branch) then (b) else (a)",
    "decoder_positions": "tiny GPT-2, (d) decoder with past_key_values and explicit position_ids",
}


def write_text(name: str, model: onnx.ModelProto, weights: dict[str, np.ndarray]) -> onnx.ModelProto:
    """Write `name`.onnxtext with its float initializers as external data in the checkpoint, read it
    back, check it is the same model, and return the reread model with the weights loaded."""
    offsets = safetensors_offsets(OUT / CHECKPOINT)
    external = []
    for init in model.graph.initializer:
        tensor = numpy_helper.from_array(weights[init.name], init.name)
        offset, length = offsets[init.name]
        assert length == weights[init.name].nbytes, init.name
        set_external_data(tensor, CHECKPOINT, offset=offset, length=length)
        tensor.ClearField("raw_data")
        external.append(tensor)
    text = onnx.printer.to_text(with_initializers(model, external))
    path = OUT / f"{name}.onnxtext"
    path.write_text(
        f"# The {HEADERS[name]}; written by scripts/export_tiny_gpt2.py. Weights: external data in {CHECKPOINT}.\n"
        + text
        + ("" if text.endswith("\n") else "\n"),
        encoding="utf-8",
    )
    reread = onnx.parser.parse_model(path.read_text(encoding="utf-8"))
    load_external_data_for_model(reread, str(OUT))
    onnx.checker.check_model(reread, full_check=True)
    for init in reread.graph.initializer:
        np.testing.assert_array_equal(numpy_helper.to_array(init), weights[init.name])
    return reread


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # as loam.testing runs it
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def run(sess: ort.InferenceSession, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return sess.run(OUTPUT_NAMES, feeds)


def empty_past(batch: int) -> dict[str, np.ndarray]:
    return {n: np.zeros((batch, N_HEAD, 0, HEAD), np.float32) for n in PAST_NAMES}


def past_of(present: list[np.ndarray]) -> dict[str, np.ndarray]:
    return dict(zip(PAST_NAMES, present, strict=True))


def torch_logits(model: GPT2LMHeadModel, ids: np.ndarray, past: list[np.ndarray] | None, total: int) -> np.ndarray:
    pairs = None
    if past is not None:
        tensors = [torch.from_numpy(p) for p in past]
        pairs = tuple((tensors[2 * i], tensors[2 * i + 1]) for i in range(N_LAYER))
    with torch.no_grad():
        out = model(
            input_ids=torch.from_numpy(ids),
            attention_mask=torch.ones(ids.shape[0], total, dtype=torch.int64),
            past_key_values=pairs,
            use_cache=True,
        )
    return out.logits.numpy()


def check_ragged(d: ort.InferenceSession, a: ort.InferenceSession, b: ort.InferenceSession) -> dict[str, float]:
    """What a server batching rows at different positions into one call of (d) relies on; returns the
    largest |difference| of each check (SystemExit when one exceeds RAGGED_ATOL).

    Rows r = 0, 1, 2 have real pasts of RAGGED_PASTS tokens (made by (d) itself from random prompts:
    an empty past and position_ids = arange, which must be (a)'s logits and presents) and new spans of
    RAGGED_SPANS tokens.  Alone, row r is one call: its past, its span, a mask of ones, position_ids =
    p_r + arange(s_r) (also checked against (b), which computes those positions itself).  Together they
    are one call with the pasts gathered into [3, 4, Pmax, 16] (row r's at [0, p_r), zeros after,
    mask 0 there) and the spans right-padded to S = max s_r (token 0, mask 0, position 0 at the pads):
    row r's logits at its real positions must be its lone call's, and its presents at [0, p_r) and
    [Pmax, Pmax + s_r) its lone call's presents at [0, p_r) and [p_r, p_r + s_r)."""
    rng = np.random.default_rng(SEED)
    rows = len(RAGGED_PASTS)
    pmax, span = max(RAGGED_PASTS), max(RAGGED_SPANS)
    diffs: dict[str, float] = {}

    def worst(key: str, got: np.ndarray, want: np.ndarray) -> None:
        assert got.shape == want.shape, (key, got.shape, want.shape)
        diffs[key] = max(diffs.get(key, 0.0), float(np.abs(got - want).max()) if got.size else 0.0)

    def lone(ids: np.ndarray, past: dict[str, np.ndarray], start: int) -> list[np.ndarray]:
        feeds = {
            "input_ids": ids,
            "attention_mask": np.ones((1, start + ids.shape[1]), np.int64),
            "position_ids": np.arange(start, start + ids.shape[1], dtype=np.int64)[None],
        }
        return run(d, {**feeds, **past})

    pasts, alone, spans = [], [], []
    for p, s in zip(RAGGED_PASTS, RAGGED_SPANS, strict=True):
        prefix = rng.integers(1, VOCAB, (1, p), dtype=np.int64)
        past = empty_past(1)
        if p:
            got = lone(prefix, past, 0)
            want = run(a, {"input_ids": prefix, "attention_mask": np.ones_like(prefix)})
            for key, g, w in zip(["prefill.logits", *["prefill.present"] * len(KV)], got, want, strict=True):
                worst(key, g, w)
            past = past_of(got[1:])
        ids = rng.integers(1, VOCAB, (1, s), dtype=np.int64)
        got = lone(ids, past, p)
        feeds = {"input_ids": ids, "attention_mask": np.ones((1, p + s), np.int64), **past}
        for key, g, w in zip(["with_past.logits", *["with_past.present"] * len(KV)], got, run(b, feeds), strict=True):
            worst(key, g, w)
        pasts.append(past)
        alone.append(got)
        spans.append(ids)

    ids = np.zeros((rows, span), np.int64)
    mask = np.zeros((rows, pmax + span), np.int64)
    positions = np.zeros((rows, span), np.int64)
    gathered = {n: np.zeros((rows, N_HEAD, pmax, HEAD), np.float32) for n in PAST_NAMES}
    for r, (p, s) in enumerate(zip(RAGGED_PASTS, RAGGED_SPANS, strict=True)):
        ids[r, :s] = spans[r][0]
        mask[r, :p] = 1
        mask[r, pmax : pmax + s] = 1
        positions[r, :s] = np.arange(p, p + s)
        for n in PAST_NAMES:
            gathered[n][r, :, :p] = pasts[r][n][0]
    logits, *present = run(d, {"input_ids": ids, "attention_mask": mask, "position_ids": positions, **gathered})
    for r, (p, s) in enumerate(zip(RAGGED_PASTS, RAGGED_SPANS, strict=True)):
        lone_logits, *lone_present = alone[r]
        worst("ragged.logits", logits[r, :s], lone_logits[0])
        for got, want in zip(present, lone_present, strict=True):
            worst("ragged.present.past", got[r, :, :p], want[0, :, :p])
            worst("ragged.present.new", got[r, :, pmax : pmax + s], want[0, :, p : p + s])
    bad = {key: diff for key, diff in diffs.items() if not diff <= RAGGED_ATOL}
    if bad:
        raise SystemExit(f"decoder_positions: a ragged cohort is not its rows run alone (atol {RAGGED_ATOL}): {bad}")
    return diffs


def oracle(
    model: GPT2LMHeadModel, a: ort.InferenceSession, b: ort.InferenceSession, c: ort.InferenceSession
) -> tuple[dict[str, np.ndarray], float]:
    """onnxruntime's outputs on the fixed prompts, each checked against torch; returns (arrays, max |diff|)."""
    out: dict[str, np.ndarray] = {}
    diffs: list[float] = []

    def check(got: np.ndarray, ids: np.ndarray, past: list[np.ndarray] | None, total: int) -> None:
        diffs.append(float(np.abs(got - torch_logits(model, ids, past, total)).max()))

    prompt = np.array(PROMPT, np.int64)
    out["prompt_ids"] = prompt
    for length in (4, 7):
        ids = prompt[:, :length]
        logits, *present = run(a, {"input_ids": ids, "attention_mask": np.ones_like(ids)})
        check(logits, ids, None, length)
        out[f"decoder.logits.len{length}"] = logits
    for name, value in zip(PRESENT_NAMES, present, strict=True):
        out[f"decoder.{name}.len7"] = value  # the prompt's keys/values: the past of the first decode step
    batch2 = np.array(BATCH2, np.int64)
    out["batch2_ids"] = batch2
    logits, *_ = run(a, {"input_ids": batch2, "attention_mask": np.ones_like(batch2)})
    check(logits, batch2, None, 4)
    out["decoder.logits.batch2"] = logits

    # Two greedy decode steps after the prompt through (b), fed (a)'s present as the past.
    prompt_logits = out["decoder.logits.len7"]
    step_ids = []
    past = present
    token = int(prompt_logits[0, -1].argmax())
    for step in (1, 2):
        ids = np.array([[token]], np.int64)
        total = prompt.shape[1] + step
        logits, *new_past = run(b, {"input_ids": ids, "attention_mask": np.ones((1, total), np.int64), **past_of(past)})
        check(logits, ids, past, total)
        out[f"decoder_with_past.logits.step{step}"] = logits
        step_ids.append(token)
        past, token = new_past, int(logits[0, -1].argmax())
    out["step_ids"] = np.array(step_ids, np.int64)
    for name, value in zip(PRESENT_NAMES, past, strict=True):
        out[f"decoder_with_past.{name}.step2"] = value  # past 8 + 1 step: [1, 4, 9, 16]

    # The same through (c): the prompt through the else branch with an empty past, then the steps.
    feeds = {"input_ids": prompt, "attention_mask": np.ones_like(prompt), **empty_past(1)}
    logits, *past = run(c, {**feeds, "use_cache_branch": np.array([False])})
    check(logits, prompt, None, prompt.shape[1])
    out["decoder_merged.logits.prompt"] = logits
    for step, token in enumerate(step_ids, 1):
        ids = np.array([[token]], np.int64)
        total = prompt.shape[1] + step
        feeds = {"input_ids": ids, "attention_mask": np.ones((1, total), np.int64), **past_of(past)}
        logits, *new_past = run(c, {**feeds, "use_cache_branch": np.array([True])})
        check(logits, ids, past, total)
        out[f"decoder_merged.logits.step{step}"] = logits
        past = new_past

    out["greedy_ids"] = greedy(a, b, c, prompt, model)
    return out, max(diffs)


def greedy(
    a: ort.InferenceSession,
    b: ort.InferenceSession,
    c: ort.InferenceSession,
    prompt: np.ndarray,
    model: GPT2LMHeadModel,
) -> np.ndarray:
    """The GREEDY_TOKENS tokens greedy decoding picks: the first from the prompt's logits, each later
    one from a decode step fed the previous token; via (a)+(b), via (c) alone, and via torch: all agree."""

    margins: list[float] = []

    def margin(logits: np.ndarray) -> float:
        top2 = np.sort(logits[0, -1])[-2:]
        return float(top2[1] - top2[0])

    def decode(first: ort.InferenceSession, later: ort.InferenceSession, merged: bool) -> list[int]:
        flag = {"use_cache_branch": np.array([False])} if merged else {}
        extra = empty_past(1) if merged else {}
        logits, *past = run(first, {"input_ids": prompt, "attention_mask": np.ones_like(prompt), **extra, **flag})
        margins.append(margin(logits))
        tokens = [int(logits[0, -1].argmax())]
        while len(tokens) < GREEDY_TOKENS:
            total = prompt.shape[1] + len(tokens)
            flag = {"use_cache_branch": np.array([True])} if merged else {}
            feeds = {"input_ids": np.array([[tokens[-1]]], np.int64), "attention_mask": np.ones((1, total), np.int64)}
            logits, *past = run(later, {**feeds, **past_of(past), **flag})
            margins.append(margin(logits))
            tokens.append(int(logits[0, -1].argmax()))
        return tokens

    via_b = decode(a, b, merged=False)
    via_c = decode(c, c, merged=True)
    with torch.no_grad():
        generated = model.generate(
            torch.from_numpy(prompt),
            attention_mask=torch.ones_like(torch.from_numpy(prompt)),
            max_new_tokens=GREEDY_TOKENS,
            do_sample=False,
            pad_token_id=0,
        )
    via_torch = generated[0, prompt.shape[1] :].tolist()
    assert via_b == via_c == via_torch, (via_b, via_c, via_torch)
    # A tie (or near tie) would make the greedy test flaky under a 1e-4 logit error.
    print(f"smallest top-1 over top-2 logit margin along the greedy path: {min(margins):.4f}")
    assert min(margins) > 1e-3, min(margins)
    return np.array(via_b, np.int64)


def main() -> int:
    model = build_torch_model()
    a, b = export_both(model)
    names = weight_names(model)
    for exported, with_past in ((a, False), (b, True)):
        rename_initializers(exported, names)
        fix_interface(exported, with_past)
    c = merge(a, b)
    d = export_positions(model)  # after (a) and (b), so that their trace (and random pasts) stay as they were
    rename_initializers(d, names)
    fix_interface(d, with_past=True)

    weights = {i.name: numpy_helper.to_array(i) for i in a.graph.initializer}
    for exported in (a, b, c, d):
        onnx.checker.check_model(exported, full_check=True)
        assert {i.name for i in exported.graph.initializer} == weights.keys()
    OUT.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(OUT / CHECKPOINT))

    sessions = {}
    graphs = (("decoder", a), ("decoder_with_past", b), ("decoder_merged", c), ("decoder_positions", d))
    for name, exported in graphs:
        reread = write_text(name, exported, weights)
        sessions[name] = session(reread)
        # The text, read back, computes what the in-memory export does (bit for bit).
        ids = np.array(BATCH2, np.int64)
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        if name != "decoder":
            feeds.update(empty_past(2))
        if name == "decoder_positions":
            feeds["position_ids"] = np.broadcast_to(np.arange(ids.shape[1]), ids.shape).copy()
        if name == "decoder_merged":
            feeds["use_cache_branch"] = np.array([False])
        for got, want in zip(run(sessions[name], feeds), run(session(exported), feeds), strict=True):
            np.testing.assert_array_equal(got, want)

    arrays, diff = oracle(model, sessions["decoder"], sessions["decoder_with_past"], sessions["decoder_merged"])
    assert diff < 1e-4, f"torch and onnxruntime disagree by {diff}"
    ragged = check_ragged(sessions["decoder_positions"], sessions["decoder"], sessions["decoder_with_past"])
    np.savez_compressed(OUT / "expected.npz", **arrays)
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, onnx {onnx.__version__}, "
        f"onnxruntime {ort.__version__}, safetensors {safetensors.__version__}, numpy {np.__version__}"
    )
    print(f"max |logit| difference torch vs onnxruntime: {diff:.2e}")
    print("decoder_positions, largest |difference| per check: " + ", ".join(f"{k} {v:.1e}" for k, v in ragged.items()))
    print(f"greedy ids: {arrays['greedy_ids'].tolist()}")
    print(f"wrote {', '.join(sorted(p.name for p in OUT.iterdir()))} in {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
