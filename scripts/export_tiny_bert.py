"""Export a tiny random BERT encoder to ONNX into tests/models/tiny_bert/ (dev-time only; files committed).

Why this script exists: the `bert` architecture table (loam/driver/architectures.py) is checked against what
torch's exporter really writes for a Hugging Face `BertModel`: three int64 inputs, a padded attention
mask turned into an additive bias, and the Linear weights the exporter stores pre-transposed.  The
model is tiny (2 layers, 4 heads, hidden 64, intermediate 128, vocabulary 1000, 128 positions; about
144k parameters) so the committed files stay under a megabyte.

Needs torch and transformers, which are not project dependencies; CI never runs this script.  The
dev-time environment it was last run in (a venv outside the repository):

    python3.11 -m venv /work/venvs/torch
    /work/venvs/torch/bin/pip install torch==2.13.0 transformers==4.46.3 onnx==1.23.2 \
        onnxruntime==1.32.0 numpy==2.4.6 safetensors==0.8.0
    /work/venvs/torch/bin/python scripts/export_tiny_bert.py      # a few seconds

Model: `torch.manual_seed(0)`, `BertModel` (pooler included) with eager attention and its own random
init at initializer_range 0.2 (see INIT_RANGE), then every LayerNorm scale/shift and every bias is
redrawn at random (BERT inits them to ones and zeros): a compiled module that drops a bias or a
LayerNorm scale cannot still match, and the exporter cannot deduplicate equal-valued initializers
(with the default init it keeps one of the five LayerNorm scales and one zero vector for every shift
and 64-wide bias, the others read through `Identity` nodes).  Export: `torch.onnx.export(...,
dynamo=False)` (TorchScript), opset 17, dynamic batch and sequence; constant folding on for the graph
the tests are about, off for a second one (see the files below).

What the exporter does to the weights (checked below, see `name_by_content`): 27 of the 39 parameters
stay initializers under their own `state_dict()` names (the three embeddings, every LayerNorm, every
bias, and `pooler.dense.weight`, which the pooler's `Gemm` reads with transB=1).  The other 12, each
layer's query/key/value/attention-output/intermediate/output `dense` weights, exist in the graph only
as the exporter's folded transposes, [in, out] initializers it names `onnx::MatMul_<N>`; a numbering
that shifts with any change to the trace, so this script renames each to its parameter's name plus
`.T` (`encoder.layer.0.attention.self.query.weight.T`).  No Hugging Face checkpoint holds those.

Files written (see the folder's README.md for the oracle's keys):

- `hf_model.safetensors`: the model's `state_dict()`, as a Hugging Face checkpoint of `BertModel`
  names it; it holds 27 of the graph's initializers under the same names;
- `tiny_bert.safetensors`: the 12 folded transposes, by their (renamed) ONNX names: what the graph
  reads that no Hugging Face checkpoint supplies.  (Not a full copy of the graph's weights: the two
  files together hold each initializer once, and stay under a megabyte.)
- `encoder.onnxtext`: input_ids, attention_mask, token_type_ids int64 [batch_size, sequence_length]
  -> last_hidden_state [batch_size, sequence_length, 64], pooler_output [batch_size, 64]; its float
  initializers are external data pointing into the two safetensors files above;
- `encoder_unfolded.onnxtext`: the same model exported with constant folding off, where every
  parameter is an initializer under its own name (external data in `hf_model.safetensors`) and the 12
  Linear weights are read through `Transpose` nodes: the graph a Hugging Face checkpoint alone supplies.
  Its outputs equal the folded graph's bit for bit;
- `expected.npz`: onnxruntime's outputs on two fixed input sets (the oracle for Loam's tests).
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
from onnx import TensorProto, numpy_helper
from onnx.external_data_helper import load_external_data_for_model, set_external_data
from safetensors.numpy import save_file
from safetensors_layout import safetensors_offsets
from transformers import BertConfig, BertModel

OUT = Path(__file__).resolve().parent.parent / "tests" / "models" / "tiny_bert"
HF_CHECKPOINT = "hf_model.safetensors"
FOLDED = "tiny_bert.safetensors"
SEED = 0
# BERT's default 0.02 leaves attention nearly uniform: unmasking the padding then moves pooler_output
# by only 3e-3 at most; at 0.2 every output moves by more than 1 (the script prints and checks it).
INIT_RANGE = 0.2
OPSET = 17
LAYERS, HEADS, HIDDEN, FFN, VOCAB, POSITIONS = 2, 4, 64, 128, 1000, 128
BATCH, SEQ = "batch_size", "sequence_length"
INPUT_NAMES = ["input_ids", "attention_mask", "token_type_ids"]
OUTPUT_NAMES = ["last_hidden_state", "pooler_output"]

# The oracle's inputs: two sets of different batch and sequence length, each with a padded row
# (trailing zeros in the attention mask) and both token types.
SETS = {
    "set1": (
        [[101, 7, 512, 33, 102], [101, 999, 4, 102, 0]],
        [[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]],
        [[0, 0, 0, 1, 1], [0, 0, 1, 1, 0]],
    ),
    "set2": (
        [
            [101, 11, 250, 640, 3, 102, 77, 8, 102],
            [101, 5, 102, 64, 102, 0, 0, 0, 0],
            [101, 900, 901, 902, 903, 904, 905, 906, 102],
        ],
        [[1, 1, 1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1, 1]],
        [[0, 0, 0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 1, 1, 0, 0, 0, 0], [0, 0, 0, 0, 1, 1, 1, 1, 1]],
    ),
}


def build_torch_model() -> BertModel:
    """The tiny BERT with seeded random weights (LayerNorm and biases included, see the docstring)."""
    torch.manual_seed(SEED)
    config = BertConfig(
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        hidden_size=HIDDEN,
        intermediate_size=FFN,
        vocab_size=VOCAB,
        max_position_embeddings=POSITIONS,
        initializer_range=INIT_RANGE,
        attn_implementation="eager",
    )
    model = Encoder(config)
    assert model.config._attn_implementation == "eager"
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".LayerNorm." in name:
                param.copy_((1.0 if name.endswith("weight") else 0.0) + 0.1 * torch.randn_like(param))
            elif name.endswith("bias"):
                param.copy_(0.02 * torch.randn_like(param))
    return model.eval()


class Encoder(BertModel):
    """BertModel returning a plain tuple (a subclass, so parameter and node names stay BERT's own)."""

    def forward(  # type: ignore[override]
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        out = super().forward(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, return_dict=True
        )
        return out.last_hidden_state, out.pooler_output


def export(model: Encoder, *, fold: bool) -> onnx.ModelProto:
    """The TorchScript export, with constant folding on (`fold`) or off."""
    # Traced at batch 2, sequence 6 (no extent 1, none equal to a weight's), with a padded row.
    ids = torch.tensor([[101, 20, 30, 40, 50, 102], [101, 60, 70, 102, 0, 0]])
    mask = (ids != 0).to(torch.int64)
    types = torch.tensor([[0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 0, 0]])
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (ids, mask, types),
            buffer,
            dynamo=False,
            opset_version=OPSET,
            do_constant_folding=fold,
            input_names=INPUT_NAMES,
            output_names=OUTPUT_NAMES,
            dynamic_axes={
                **{name: {0: BATCH, 1: SEQ} for name in INPUT_NAMES},
                "last_hidden_state": {0: BATCH, 1: SEQ},
                "pooler_output": {0: BATCH},
            },
        )
    return onnx.load_from_string(buffer.getvalue())


def name_by_content(model: onnx.ModelProto, state: dict[str, np.ndarray]) -> dict[str, str]:
    """Rename every float initializer after the parameter it holds (found by content): the parameter's
    own name, or `<name>.T` for a transpose the exporter folded.  Checks that each parameter is in the
    graph exactly once, and that none is left over; returns {new name: 'same' or 'transposed'}."""
    by_content: dict[tuple[tuple[int, ...], bytes], str] = {}
    for name, array in state.items():
        by_content[(array.shape, array.tobytes())] = name
        if array.ndim == 2:
            transposed = np.ascontiguousarray(array.T)
            by_content.setdefault((transposed.shape, transposed.tobytes()), f"{name}.T")
    renamed: dict[str, str] = {}
    kinds: dict[str, str] = {}
    for init in model.graph.initializer:
        if init.data_type != TensorProto.FLOAT:
            continue
        array = numpy_helper.to_array(init)
        new = by_content.get((array.shape, array.tobytes()))
        if new is None:
            raise SystemExit(f"float initializer {init.name} {list(array.shape)} matches no parameter")
        if new in kinds:
            raise SystemExit(f"initializers {renamed.get(new, new)} and {init.name} both hold {new}")
        if init.name != new:
            print(f"initializer {init.name} is {new}")
        renamed[init.name] = new
        kinds[new] = "transposed" if new.endswith(".T") else "same"
        init.name = new
    params = {name.removesuffix(".T") for name in kinds}
    if params != state.keys():
        raise SystemExit(f"parameters the graph does not hold: {sorted(state.keys() - params)}")
    for node in model.graph.node:
        node.input[:] = [renamed.get(name, name) for name in node.input]
        if node.op_type == "Identity":
            raise SystemExit(f"the exporter deduplicated initializers ({node.name}); redraw them")
    return kinds


def set_dims(info: onnx.ValueInfoProto, dims: list[int | str]) -> None:
    shape = info.type.tensor_type.shape
    del shape.dim[:]
    for dim in dims:
        entry = shape.dim.add()
        if isinstance(dim, str):
            entry.dim_param = dim
        else:
            entry.dim_value = dim


def fix_interface(model: onnx.ModelProto) -> None:
    """Pin the inputs' and outputs' shapes to the readable dim_params (whatever the exporter wrote)."""
    for info in model.graph.input:
        set_dims(info, [BATCH, SEQ])
    for info in model.graph.output:
        set_dims(info, [BATCH, SEQ, HIDDEN] if info.name == "last_hidden_state" else [BATCH, HIDDEN])


HEADERS = {
    "encoder": "A tiny BERT encoder (BertModel), exported with constant folding on",
    "encoder_unfolded": "The same tiny BERT encoder, exported with constant folding off",
}


def write_text(
    name: str, model: onnx.ModelProto, weights: dict[str, np.ndarray], files: dict[str, str]
) -> onnx.ModelProto:
    """Write `name`.onnxtext with each float initializer as external data in the file `files` names
    for it, read it back, check it is the same model, and return the reread model, weights loaded."""
    offsets = {file: safetensors_offsets(OUT / file) for file in set(files.values())}
    external = []
    for init in model.graph.initializer:
        tensor = numpy_helper.from_array(weights[init.name], init.name)
        offset, length = offsets[files[init.name]][init.name]
        assert length == weights[init.name].nbytes, init.name
        set_external_data(tensor, files[init.name], offset=offset, length=length)
        tensor.ClearField("raw_data")
        external.append(tensor)
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    del copy.graph.initializer[:]
    copy.graph.initializer.extend(external)
    text = onnx.printer.to_text(copy)
    path = OUT / f"{name}.onnxtext"
    holders = " and ".join(sorted(set(files.values())))
    path.write_text(
        f"# {HEADERS[name]}; written by scripts/export_tiny_bert.py. Weights: external data in {holders}.\n"
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


def feeds_of(name: str) -> dict[str, np.ndarray]:
    return {key: np.array(value, np.int64) for key, value in zip(INPUT_NAMES, SETS[name], strict=True)}


def oracle(model: Encoder, sess: ort.InferenceSession) -> tuple[dict[str, np.ndarray], float, float]:
    """onnxruntime's outputs on the fixed input sets, each checked against torch; returns (arrays,
    max |onnxruntime - torch|, the smallest max |change| of an output when the mask is all ones)."""
    out: dict[str, np.ndarray] = {}
    diffs: list[float] = []
    mask_effects: list[float] = []
    for name in SETS:
        feeds = feeds_of(name)
        got = sess.run(OUTPUT_NAMES, feeds)
        with torch.no_grad():
            want = model(*(torch.from_numpy(feeds[k]) for k in INPUT_NAMES))
        for output, a, b in zip(OUTPUT_NAMES, got, want, strict=True):
            diffs.append(float(np.abs(a - b.numpy()).max()))
            out[f"{name}.{output}"] = a
        unmasked = sess.run(OUTPUT_NAMES, {**feeds, "attention_mask": np.ones_like(feeds["attention_mask"])})
        mask_effects += [float(np.abs(a - b).max()) for a, b in zip(got, unmasked, strict=True)]
        out.update({f"{name}.{key}": value for key, value in feeds.items()})
    return out, max(diffs), min(mask_effects)


def main() -> int:
    model = build_torch_model()
    state = {name: tensor.detach().numpy() for name, tensor in model.state_dict().items()}
    folded, unfolded = export(model, fold=True), export(model, fold=False)
    kinds = name_by_content(folded, state)
    assert set(name_by_content(unfolded, state).values()) == {"same"}, "the unfolded export transposed a weight"
    for exported in (folded, unfolded):
        fix_interface(exported)
        onnx.checker.check_model(exported, full_check=True)

    weights = {**state, **{i.name: numpy_helper.to_array(i) for i in folded.graph.initializer}}
    files = {name: FOLDED if kind == "transposed" else HF_CHECKPOINT for name, kind in kinds.items()}
    OUT.mkdir(parents=True, exist_ok=True)
    save_file(state, str(OUT / HF_CHECKPOINT))
    save_file({name: weights[name] for name, file in files.items() if file == FOLDED}, str(OUT / FOLDED))

    sess = session(write_text("encoder", folded, weights, files))
    unfolded_sess = session(write_text("encoder_unfolded", unfolded, weights, dict.fromkeys(state, HF_CHECKPOINT)))
    for name in SETS:
        want = session(folded).run(OUTPUT_NAMES, feeds_of(name))
        # The text, read back, computes what the in-memory export does (bit for bit), and the export
        # without folding what the one with it does.
        for got in (sess.run(OUTPUT_NAMES, feeds_of(name)), unfolded_sess.run(OUTPUT_NAMES, feeds_of(name))):
            for a, b in zip(got, want, strict=True):
                np.testing.assert_array_equal(a, b)

    arrays, diff, mask_effect = oracle(model, sess)
    assert diff < 1e-4, f"torch and onnxruntime disagree by {diff}"
    assert mask_effect > 1e-2, f"the padding mask moves an output by only {mask_effect}"
    np.savez_compressed(OUT / "expected.npz", **arrays)
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, onnx {onnx.__version__}, "
        f"onnxruntime {ort.__version__}, safetensors {safetensors.__version__}, numpy {np.__version__}"
    )
    transposed = sorted(n for n, k in kinds.items() if k == "transposed")
    print(f"{len(kinds) - len(transposed)} initializers are parameters under their own names; {len(transposed)} are")
    print("folded transposes:\n  " + "\n  ".join(transposed))
    print(f"max |output| difference torch vs onnxruntime: {diff:.2e}")
    print(f"smallest max |output| change when the padding is unmasked: {mask_effect:.3f}")
    sizes = {p.name: p.stat().st_size for p in sorted(OUT.iterdir())}
    print(f"wrote {sizes} ({sum(sizes.values())} bytes) in {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
