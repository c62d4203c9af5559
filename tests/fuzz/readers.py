"""Every input Loam reads, each as a fuzz target: a seed file and a function that feeds one (mutated) copy
of it through Loam's public entry points.

A target's `run(data, folder)` writes `data` into `folder` under the seed's file name (beside the other
files the build needs, unmutated) and builds, loads or reads it; `outcome` classifies what happened:

- `ok`: it built (or was read), and the module ran, or raised its own `ShapeError` / `LoadError`
  (which `forward` and `Weights.load` raise for bad run-time input);
- `refused`: a `loam.core.errors.LoamError`, or the module's `LoadError` / `ShapeError` at load time;
- `crash`: anything else.  `loam.tools._cli.run_guarded` exits with status 3 ("internal error") for any
  exception that is not a LoamError, an xDSL ParseError / DiagnosticException or an OSError; the Python
  API promises a LoamError for every refusal, so here only a LoamError (or the module's own two errors)
  is a refusal.

`named` says whether a refusal's message names the mutated file: the README promises that it does.
"""

from __future__ import annotations

import functools
import json
import shutil
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import loam
from loam.core.errors import LoamError

ROOT = Path(__file__).resolve().parents[2]
MLP = ROOT / "examples" / "mlp"
JAX_MLP = ROOT / "examples" / "jax_mlp"
MLP_INPUT = MLP / "input.npy"


@dataclass
class Outcome:
    kind: str  # "ok", "refused" or "crash"
    detail: str = ""  # the refusal's message, or the crash's traceback
    named: bool = True  # whether a refusal names the mutated file


class _Refused(Exception):
    """The module's own LoadError / ShapeError where it is a refusal (at load time)."""


def _options(toml: Path, **changes: object) -> loam.Options:
    from dataclasses import replace

    return replace(loam.Options.from_toml(toml), **changes)  # type: ignore[arg-type]


def _run_module(module: object, weights: object) -> None:
    """One forward call; the module's ShapeError is its own answer, not a crash."""
    x = np.load(MLP_INPUT)
    try:
        module.forward(weights, x)  # type: ignore[attr-defined]
    except module.ShapeError:  # type: ignore[attr-defined]
        pass


def _load(module: object, data: object) -> object:
    try:
        return module.Weights.load(data)  # type: ignore[attr-defined]
    except (module.LoadError, module.ShapeError) as err:  # type: ignore[attr-defined]
        raise _Refused(str(err)) from None


# -- the seeds ---------------------------------------------------------------------------------------------------


@functools.cache
def mlp_onnx_bytes() -> bytes:
    """The MLP as an .onnx protobuf that carries its weights."""
    import onnx
    from safetensors.numpy import load_file

    model = onnx.parser.parse_model((MLP / "mlp.onnxtext").read_text(encoding="utf-8"))
    weights = load_file(MLP / "mlp.safetensors")
    for init in model.graph.initializer:
        del init.external_data[:]
        init.data_location = onnx.TensorProto.DEFAULT
        init.raw_data = np.ascontiguousarray(weights[init.name]).tobytes()
    return model.SerializeToString()


@functools.cache
def mlp_ir_bytes() -> bytes:
    """The MLP as Loam's graph IR (what `loam-translate --import-onnx` prints)."""
    import io

    from xdsl.printer import Printer

    from loam.driver.registry import read_model

    out = io.StringIO()
    Printer(stream=out).print_op(read_model(MLP / "mlp.onnxtext"))
    return out.getvalue().encode()


@functools.cache
def mlp_gguf_bytes() -> bytes:
    from safetensors.numpy import load_file

    from tests.checkpoints.gguf_writer import Tensor, gguf_bytes

    weights = load_file(MLP / "mlp.safetensors")
    tensors = {}
    for name, value in weights.items():
        half = name == "fc2.weight"
        raw = value.astype(np.float16 if half else np.float32).tobytes()
        tensors[f"mlp.{name}"] = Tensor("F16" if half else "F32", value.shape, raw)
    return gguf_bytes(tensors, {"general.architecture": "mlp"})


@functools.cache
def tokenizer_gguf_bytes() -> bytes:
    import tempfile

    from tests.tokenizer.gguf_files import tiny, write_tokenizer_gguf

    with tempfile.TemporaryDirectory() as tmp:
        return write_tokenizer_gguf(Path(tmp) / "t.gguf", tiny()).read_bytes()


@functools.cache
def tokenizer_json_bytes() -> bytes:
    import tempfile

    from loam.text.tokenizer import Tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.gguf"
        path.write_bytes(tokenizer_gguf_bytes())
        return Tokenizer.from_gguf(path).engine.to_str().encode()


INDEX = {
    "metadata": {"total_size": 1808},
    "weight_map": {
        n: "mlp.safetensors" for n in ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias")
    },
}


# -- the targets -----------------------------------------------------------------------------------------------


def _onnx(data: bytes, folder: Path) -> None:
    (folder / "mlp.onnx").write_bytes(data)
    result = loam.build(folder / "mlp.onnx", options=_options(MLP / "loam.toml", checkpoints=()))
    _run_module(result.module, result.module.Weights.embedded())


def _with_mlp_checkpoint(folder: Path) -> Path:
    shutil.copy(MLP / "mlp.safetensors", folder / "mlp.safetensors")
    return folder / "mlp.safetensors"


def _onnxtext(data: bytes, folder: Path) -> None:
    checkpoint = _with_mlp_checkpoint(folder)
    (folder / "mlp.onnxtext").write_bytes(data)
    result = loam.build(folder / "mlp.onnxtext", options=_options(MLP / "loam.toml", checkpoints=(checkpoint,)))
    _run_module(result.module, _load(result.module, checkpoint.read_bytes()))


def _ir(data: bytes, folder: Path) -> None:
    checkpoint = _with_mlp_checkpoint(folder)
    (folder / "mlp.mlir").write_bytes(data)
    result = loam.build(folder / "mlp.mlir", options=_options(MLP / "loam.toml", checkpoints=(checkpoint,)))
    _run_module(result.module, _load(result.module, checkpoint.read_bytes()))


def _stablehlo(name: str) -> Callable[[bytes, Path], None]:
    def run(data: bytes, folder: Path) -> None:
        shutil.copy(JAX_MLP / "mlp.safetensors", folder / "mlp.safetensors")
        (folder / name).write_bytes(data)
        options = _options(JAX_MLP / "loam.toml", checkpoints=(folder / "mlp.safetensors",))
        result = loam.build(folder / name, options=options)
        _run_module(result.module, _load(result.module, (folder / "mlp.safetensors").read_bytes()))

    return run


def _safetensors(data: bytes, folder: Path) -> None:
    (folder / "mlp.safetensors").write_bytes(data)
    shutil.copy(MLP / "mlp.onnxtext", folder / "mlp.onnxtext")
    options = _options(MLP / "loam.toml", checkpoints=(folder / "mlp.safetensors",))
    result = loam.build(folder / "mlp.onnxtext", options=options)
    _run_module(result.module, _load(result.module, data))


@functools.cache
def _mlp_module() -> object:
    return loam.build(MLP / "mlp.onnxtext", options=_options(MLP / "loam.toml")).module


@functools.cache
def _gguf_mlp_module() -> object:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mlp.gguf"
        path.write_bytes(mlp_gguf_bytes())
        return _build_gguf(path).module


def _safetensors_load(data: bytes, folder: Path) -> None:
    module = _mlp_module()
    _run_module(module, _load(module, data))
    (folder / "mlp.safetensors").write_bytes(data)
    try:
        weights = module.Weights.load_file(folder / "mlp.safetensors")  # type: ignore[attr-defined]
    except (module.LoadError, module.ShapeError) as err:  # type: ignore[attr-defined]
        raise _Refused(str(err)) from None
    _run_module(module, weights)


def _index(data: bytes, folder: Path) -> None:
    _with_mlp_checkpoint(folder)
    (folder / "model.safetensors.index.json").write_bytes(data)
    shutil.copy(MLP / "mlp.onnxtext", folder / "mlp.onnxtext")
    options = _options(MLP / "loam.toml", checkpoints=(folder / "model.safetensors.index.json",))
    result = loam.build(folder / "mlp.onnxtext", options=options)
    try:
        weights = result.module.Weights.load_file(folder / "model.safetensors.index.json")
    except (result.module.LoadError, result.module.ShapeError) as err:
        raise _Refused(str(err)) from None
    _run_module(result.module, weights)


def _build_gguf(path: Path) -> loam.BuildResult:
    options = _options(MLP / "loam.toml", checkpoints=(path,), checkpoint_names=(("mlp.*.*", "*.*"),))
    return loam.build(MLP / "mlp.onnxtext", options=options)


def _gguf(data: bytes, folder: Path) -> None:
    (folder / "mlp.gguf").write_bytes(data)
    result = _build_gguf(folder / "mlp.gguf")
    _run_module(result.module, _load(result.module, data))


def _gguf_load(data: bytes, folder: Path) -> None:
    module = _gguf_mlp_module()
    _run_module(module, _load(module, data))


def _options_toml(data: bytes, folder: Path) -> None:
    checkpoint = _with_mlp_checkpoint(folder)
    (folder / "loam.toml").write_bytes(data)
    result = loam.build(MLP / "mlp.onnxtext", options=loam.Options.from_toml(folder / "loam.toml"))
    _run_module(result.module, _load(result.module, checkpoint.read_bytes()))


def _use_tokenizer(tok: object) -> None:
    for text in ("ab ab<think>11", "", "b\u00e9a"):
        ids = tok.encode(text)  # type: ignore[attr-defined]
        tok.decode(ids)  # type: ignore[attr-defined]
        tok.decode(ids, skip_special_tokens=True)  # type: ignore[attr-defined]
        stream = tok.decode_stream()  # type: ignore[attr-defined]
        list(stream.feed(ids))
        stream.finish()
    if tok.chat_template is not None:  # type: ignore[attr-defined]
        tok.encode_chat([{"role": "user", "content": "ab"}])  # type: ignore[attr-defined]


def _tokenizer_gguf(data: bytes, folder: Path) -> None:
    from loam.text.tokenizer import Tokenizer

    (folder / "tokenizer.gguf").write_bytes(data)
    _use_tokenizer(Tokenizer.from_gguf(folder / "tokenizer.gguf"))


def _tokenizer_json(data: bytes, folder: Path) -> None:
    from loam.text.tokenizer import Tokenizer

    (folder / "tokenizer.json").write_bytes(data)
    _use_tokenizer(Tokenizer.from_file(folder / "tokenizer.json"))


@dataclass(frozen=True)
class Reader:
    name: str
    file_name: str  # the name the mutated input is written under (and a refusal should name)
    seed: Callable[[], bytes]
    run: Callable[[bytes, Path], None]
    text: bool  # token-level edits too


READERS: dict[str, Reader] = {
    r.name: r
    for r in (
        Reader("onnx", "mlp.onnx", mlp_onnx_bytes, _onnx, False),
        Reader("onnxtext", "mlp.onnxtext", lambda: (MLP / "mlp.onnxtext").read_bytes(), _onnxtext, True),
        Reader("safetensors", "mlp.safetensors", lambda: (MLP / "mlp.safetensors").read_bytes(), _safetensors, False),
        Reader(
            "safetensors-load",
            "mlp.safetensors",
            lambda: (MLP / "mlp.safetensors").read_bytes(),
            _safetensors_load,
            False,
        ),
        Reader("index", "model.safetensors.index.json", lambda: json.dumps(INDEX, indent=1).encode(), _index, True),
        Reader("gguf", "mlp.gguf", mlp_gguf_bytes, _gguf, False),
        Reader("gguf-load", "mlp.gguf", mlp_gguf_bytes, _gguf_load, False),
        Reader("stablehlo", "mlp.mlir", lambda: (JAX_MLP / "mlp.mlir").read_bytes(), _stablehlo("mlp.mlir"), True),
        Reader(
            "stablehlo-generic",
            "mlp.generic.mlir",
            lambda: (JAX_MLP / "mlp.generic.mlir").read_bytes(),
            _stablehlo("mlp.generic.mlir"),
            True,
        ),
        Reader("ir", "mlp.mlir", mlp_ir_bytes, _ir, True),
        Reader("options", "loam.toml", lambda: (MLP / "loam.toml").read_bytes(), _options_toml, True),
        Reader("tokenizer-json", "tokenizer.json", tokenizer_json_bytes, _tokenizer_json, True),
        Reader("tokenizer-gguf", "tokenizer.gguf", tokenizer_gguf_bytes, _tokenizer_gguf, False),
    )
}
"""Every fuzz target by name."""


def outcome(reader: Reader, data: bytes, folder: Path) -> Outcome:
    """Feed `data` through `reader` in `folder` (which it may fill) and classify what happened."""
    try:
        reader.run(data, folder)
    except LoamError as err:
        message = str(err)
        return Outcome("refused", message, _names(message, reader))
    except _Refused as err:
        return Outcome("refused", str(err), True)
    except Exception:
        return Outcome("crash", traceback.format_exc(limit=-8))
    return Outcome("ok")


def _names(message: str, reader: Reader) -> bool:
    # The tokenizer's and the module's refusals name the file as the runner passed it; a build names it too.
    stem = Path(reader.file_name).name
    return stem in message or ("safetensors" in message and "index" in reader.name)
