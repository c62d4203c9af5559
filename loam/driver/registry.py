"""The front ends that read a model into IR and the targets that print a module, in one place.

`loam build` (`loam.driver.pipeline`), `loam-opt` (its `-f` front ends and `-t` targets) and `loam-translate`
(its `--import-NAME` and `--emit-NAME` translations) all read these two tables, so a front end or a
backend added here is reachable from every tool at once.

- A front end reads a file into graph-dialect IR: `onnx` (`.onnx`), `onnxtext` (`.onnxtext`) and
  `stablehlo` (the `.mlir` text JAX prints).
- A target prints the module of a kernel-dialect program: `python` (numpy) and `wgsl` (WebGPU through wgpu).

`read_model` reads any model the build takes (a file by its suffix, Loam's own IR, or a ModelProto)
through the front ends; `loam.build` and `loam.driver.draft.draft_layout` both start there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from xdsl.dialects.builtin import ModuleOp

from loam.core.errors import ModelError
from loam.frontends.context import parse_ir

if TYPE_CHECKING:
    import onnx


@dataclass(frozen=True)
class FrontEnd:
    """Reads a model file of one kind (by `suffix`) into graph-dialect IR."""

    name: str
    suffix: str
    description: str
    read: Callable[[Path], ModuleOp]


@dataclass(frozen=True)
class Target:
    """Prints the module of a kernel-dialect program for one backend."""

    name: str
    backend: str
    description: str
    emit: Callable[[ModuleOp], str]


def _read_onnx(path: Path) -> ModuleOp:
    from loam.frontends import onnx_proto

    return onnx_proto.read_model(path)


def _read_stablehlo(path: Path) -> ModuleOp:
    from loam.frontends.stablehlo import read_stablehlo

    return read_stablehlo(path)


def _emit_python(module: ModuleOp) -> str:
    from loam.backends.numpy_module import emit_python

    return emit_python(module)


def _emit_wgsl(module: ModuleOp) -> str:
    from loam.backends.wgsl_module import wgsl_module

    return wgsl_module(module)[0]


FRONT_ENDS: dict[str, FrontEnd] = {
    f.name: f
    for f in (
        FrontEnd("onnx", ".onnx", "an ONNX model (protobuf)", _read_onnx),
        FrontEnd("onnxtext", ".onnxtext", "an ONNX model in ONNX's textual form", _read_onnx),
        FrontEnd("stablehlo", ".mlir", "StableHLO text, as JAX prints it (pretty or generic)", _read_stablehlo),
    )
}
"""Every front end by name."""

TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target("python", "numpy", "the numpy module of a kernel-dialect program", _emit_python),
        Target(
            "wgsl",
            "wgsl",
            "the WGSL module (WebGPU compute shaders through wgpu) of a kernel-dialect program",
            _emit_wgsl,
        ),
    )
}
"""Every target by name; `backend` is the name `loam build --backend` gives it."""


def read_model(model: str | Path | onnx.ModelProto) -> ModuleOp:
    """Graph-dialect IR of a model: a path (.onnx, .onnxtext, or .mlir holding either graph-dialect
    IR, as `loam-translate --import-onnx` writes it, or StableHLO, as JAX prints it) or an in-memory
    ModelProto."""
    import onnx

    from loam.frontends.onnx_proto import import_model

    if isinstance(model, onnx.ModelProto):
        return import_model(model, source="<model>")
    path = Path(model)
    if path.suffix == ".mlir":
        from loam.frontends.stablehlo import import_stablehlo, mlir_kind

        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise ModelError(f"{path}: cannot read the file ({err})") from None
        kind = mlir_kind(text)
        if kind == "stablehlo":
            return import_stablehlo(text, str(path))
        if kind is None:
            raise ModelError(
                f"{path}: neither Loam graph IR (graph.* ops) nor StableHLO (func.func with stablehlo.* ops)"
            )
        return parse_ir(text, str(path))
    front_end = next((f for f in FRONT_ENDS.values() if f.suffix == path.suffix), None)
    if front_end is None:
        raise ModelError(f"{path}: expected a .onnx, .onnxtext or .mlir file")
    return front_end.read(path)
