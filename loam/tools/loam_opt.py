"""`loam-opt`: xDSL's opt driver with Loam's dialects, passes and ONNX frontends added.

Why a subclass of `xDSLOptMain`: everything `xdsl-opt` offers (`-p 'a,b{opt=1}'`,
`--split-input-file`, `--verify-diagnostics`, `--print-op-generic`, `-t`, ...) keeps working, and
every Loam pass can be run alone on a `.mlir` file, the way lit tests drive it.  Loam's dialects
and passes are registered lazily from `loam.dialects.get_all_dialects()` and
`loam.driver.passes.get_all_passes()`, so a new pass needs no change here and a broken pass module only
breaks the runs that use it.  The front ends (`.onnx`, `.onnxtext`, and `-f stablehlo` for JAX's
StableHLO text) and the targets (`-t python`, `-t wgsl`) come from `loam.driver.registry`, the tables
`loam build` and `loam-translate` read too.

Errors follow `loam.tools._cli`: a `LoamError` (or an xDSL parse/verify error) prints one line and
exits 1; a malformed pipeline or an unknown input kind exits 2.  Under `--verify-diagnostics` a
`LoamError` is printed like xDSL's own diagnostics and the run goes on with the next chunk, so
lit tests can check a pass's refusals with `--split-input-file`.
"""

from __future__ import annotations

import argparse
import inspect
import io
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import IO, ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass, get_pass_option_infos
from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException
from xdsl.utils.frontend import Frontend
from xdsl.utils.target import Target
from xdsl.xdsl_opt_main import xDSLOptMain

from loam.core.errors import LoamError, UsageError
from loam.driver.passes import get_all_passes
from loam.driver.registry import FRONT_ENDS, TARGETS, FrontEnd
from loam.driver.registry import Target as LoamTarget
from loam.frontends.context import check_lexable, get_all_dialects
from loam.tools._cli import run_guarded, wants_debug

__all__ = ["LoamOptMain", "describe_loam_passes", "frontend_class", "main", "target_class"]

PROG = "loam-opt"


def _loam_version() -> str:
    try:
        return version("loam")
    except PackageNotFoundError:  # running from a checkout that is not installed
        return "unknown"


def _read_input(front_end: FrontEnd, stream: IO[bytes], input_name: str) -> ModuleOp:
    """Read a model given to the driver as a stream with `front_end`.

    The readers take a path (external data and the model's folder matter), so the original file is
    used when the stream came from one; stdin is spilled to a temporary file first.
    """
    path = Path(input_name)
    if path.suffix == front_end.suffix and path.is_file():
        return front_end.read(path)
    with tempfile.TemporaryDirectory(prefix="loam-opt-") as folder:
        spilled = Path(folder) / f"input{front_end.suffix}"
        spilled.write_bytes(stream.read())
        return front_end.read(spilled)


def frontend_class(front_end: FrontEnd) -> type[Frontend]:
    """xDSL's `Frontend` for one of `loam.driver.registry.FRONT_ENDS` (`-f NAME`, or by the file's suffix)."""

    @dataclass(frozen=True)
    class RegisteredFrontend(Frontend):
        name: ClassVar[str] = front_end.name

        def parse(self, ctx: Context, input: IO[bytes], input_name: str) -> ModuleOp:
            return _read_input(front_end, input, input_name)

    RegisteredFrontend.__doc__ = f"Reads {front_end.description} into the graph dialect."
    return RegisteredFrontend


def target_class(target: LoamTarget) -> type[Target]:
    """xDSL's `Target` for one of `loam.driver.registry.TARGETS` (`-t NAME`)."""

    @dataclass(frozen=True)
    class RegisteredTarget(Target):
        name: ClassVar[str] = target.name

        def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
            output.write(target.emit(module))

    RegisteredTarget.__doc__ = f"Prints {target.description}, as `loam build --backend {target.backend}` writes it."
    return RegisteredTarget


def _first_doc_line(cls: type) -> str:
    """The first line of a class's own docstring ('' when it has none: a dataclass without a
    docstring gets a generated signature as `__doc__`, which is not a description)."""
    doc = inspect.getdoc(cls) or ""
    if doc.startswith(f"{cls.__name__}("):
        return ""
    return doc.strip().splitlines()[0].strip() if doc.strip() else ""


def describe_loam_passes(passes: dict[str, Callable[[], type[ModulePass]]] | None = None) -> str:
    """The `--help` section listing every Loam pass, its one-line description and its options."""
    passes = get_all_passes() if passes is None else passes
    lines = ["Loam passes (run with -p NAME, or -p 'NAME{option=value ...}'):"]
    width = max((len(name) for name in passes), default=0) + 2
    for name, factory in passes.items():
        try:
            pass_class = factory()
        except Exception as exc:  # a pass module being written must not break --help
            lines.append(f"  {name:<{width}}(cannot be loaded: {type(exc).__name__}: {exc})")
            continue
        description = _first_doc_line(pass_class) or "(no description)"
        lines.append(f"  {name:<{width}}{description}")
        for info in get_pass_option_infos(pass_class):
            kind = info.expected_type.strip("'\"")
            shown = info.default_value if info.default_value != "" else '""'
            default = "" if info.default_value is None else f" = {shown}"
            lines.append(f"  {'':<{width}}  option {info.name}: {kind}{default}")
    lines.append("")
    lines.append(
        "Input files: .mlir (IR text), .onnx and .onnxtext (ONNX models, imported to the "
        "graph dialect), and with -f stablehlo the StableHLO text JAX prints; stdin is read as .mlir "
        "unless -f names a frontend. Targets (-t): python (the numpy module), wgsl (the WGSL module)."
    )
    return "\n".join(lines)


class LoamOptMain(xDSLOptMain):
    """`xDSLOptMain` plus Loam's dialects, passes and ONNX frontends (all registered lazily)."""

    version_format: ClassVar[str] = f"{PROG} (loam {_loam_version()}) built on xdsl {{xdsl_version}}"

    def __init__(
        self,
        description: str = "Loam's modular optimizer driver: runs pass pipelines on Loam and xDSL IR.",
        args: Sequence[str] | None = None,
    ) -> None:
        super().__init__(description=description, args=args)

    def register_all_dialects(self) -> None:
        super().register_all_dialects()
        for name, factory in get_all_dialects().items():
            self.ctx.register_dialect(name, factory)

    def register_all_passes(self) -> None:
        super().register_all_passes()
        for name, factory in get_all_passes().items():
            self.register_pass(name, factory)

    def register_all_frontends(self) -> None:
        super().register_all_frontends()
        for name, front_end in FRONT_ENDS.items():
            if name != "stablehlo":  # its .mlir suffix is IR text's: reached with -f stablehlo only
                self.available_frontends[front_end.suffix.removeprefix(".")] = partial(frontend_class, front_end)
            self.available_frontends[name] = partial(frontend_class, front_end)

    def register_all_targets(self) -> None:
        super().register_all_targets()
        for name, target in TARGETS.items():
            # A factory of no arguments (xDSL tells a class factory from a parse function by its signature).
            self.available_targets[name] = partial(target_class, target)

    def register_all_arguments(self, arg_parser: argparse.ArgumentParser) -> None:
        super().register_all_arguments(arg_parser)
        arg_parser.add_argument(
            "--debug", action="store_true", help="show the Python traceback of an error instead of one line"
        )
        arg_parser.formatter_class = argparse.RawDescriptionHelpFormatter
        plain_format_help = arg_parser.format_help

        def format_help() -> str:
            # The pass list imports every Loam pass, so it is built only when help is shown.
            arg_parser.epilog = describe_loam_passes()
            return plain_format_help()

        arg_parser.format_help = format_help  # type: ignore[method-assign]  # this parser's help, built when shown

    def setup_pipeline(self) -> None:
        try:
            super().setup_pipeline()
        except ArgSpecParseError as exc:
            raise UsageError(f"malformed pass pipeline {self.args.passes!r}: {exc}") from None
        except ValueError as exc:
            raise UsageError(f"{exc} (see '{PROG} --help' for Loam's passes)") from None

    def prepare_input(self) -> tuple[list[tuple[IO[bytes], int]], str]:
        try:
            return super().prepare_input()
        except ValueError as exc:
            raise UsageError(
                f"{exc}; known: {', '.join(sorted(self.available_frontends))} (or choose one with -f)"
            ) from None

    def parse_chunk(self, chunk: IO[bytes], file_extension: str, start_offset: int = 0) -> ModuleOp | None:
        try:
            if (self.args.frontend or file_extension) == "mlir":
                chunk = self._lexable(chunk)
            return super().parse_chunk(chunk, file_extension, start_offset)
        except LoamError as exc:
            self._diagnose(exc)
            raise

    def apply_passes(self, prog: ModuleOp) -> None:
        try:
            super().apply_passes(prog)
        except LoamError as exc:
            self._diagnose(exc)
            raise

    def _lexable(self, chunk: IO[bytes]) -> IO[bytes]:
        """The chunk, once `loam.frontends.context.check_lexable` finds nothing in it that would hang xDSL's lexer."""
        data = chunk.read()
        check_lexable(data.decode("utf-8", errors="replace"), self.get_input_name())
        return io.BytesIO(data)

    def _diagnose(self, exc: LoamError) -> None:
        """Under --verify-diagnostics, hand a LoamError to xDSL's per-chunk diagnostic printing."""
        if self.args.verify_diagnostics:
            raise DiagnosticException(str(exc)) from exc


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the `loam-opt` console script."""
    arguments = list(sys.argv[1:] if argv is None else argv)

    def body() -> None:
        LoamOptMain(args=arguments).run()

    raise SystemExit(run_guarded(PROG, body, debug=wants_debug(arguments)))


if __name__ == "__main__":
    main()
