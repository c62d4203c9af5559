"""`loam-translate`: the translations at the two ends of Loam's pipeline, like `mlir-translate`.

- `--import-onnx MODEL` reads `MODEL.onnx` or `MODEL.onnxtext` and prints graph-dialect IR;
- `--import-stablehlo MODEL.mlir` reads StableHLO text (as JAX prints it) and prints graph-dialect IR;
- `--export-onnx [IR] -o OUT.onnx` reads graph-dialect IR (a file, or stdin) and writes ONNX;
- `--emit-python [IR] [-o OUT.py]` reads kernel-dialect IR and prints the generated numpy module;
  `--emit-wgsl` prints the WGSL module.

Why a separate tool from `loam-opt`: these are not IR-to-IR passes; each one leaves or enters IR.
The translations (`TRANSLATIONS`) come from `loam.driver.registry`'s front ends and targets, the tables
`loam build` and `loam-opt` read too, so a new front end or backend reaches every tool.
Errors follow `loam.tools._cli`: one line and exit 1 for bad input, exit 2 for bad usage.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from io import StringIO
from pathlib import Path

from xdsl.dialects.builtin import ModuleOp
from xdsl.printer import Printer

from loam.core.errors import ModelError, UsageError
from loam.driver.registry import FRONT_ENDS, TARGETS, Target
from loam.frontends.context import parse_ir as parse_ir_text
from loam.tools._cli import CliParser, run_guarded, wants_debug

__all__ = ["TRANSLATIONS", "Translation", "main", "parse_ir"]

PROG = "loam-translate"


@dataclass(frozen=True)
class Translation:
    """One translation: its flag (without `--`), what it reads and writes, and how it runs."""

    flag: str
    help: str
    run: Callable[[Path | None, Path | None], None]


def parse_ir(input_path: Path | None) -> ModuleOp:
    """Parse and verify IR text from a file (None: stdin) with all Loam dialects known."""
    if input_path is None:
        text, name = sys.stdin.read(), "<stdin>"
    else:
        text, name = input_path.read_text(encoding="utf-8"), str(input_path)
    return parse_ir_text(text, name)


def _write_text(text: str, output: Path | None) -> None:
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        output.write_text(text, encoding="utf-8")


def _importer(names: tuple[str, ...]) -> Callable[[Path | None, Path | None], None]:
    """A translation reading a model with one of the front ends `names` (by its suffix) and printing its IR."""

    def run(input_path: Path | None, output: Path | None) -> None:
        front_ends = [FRONT_ENDS[n] for n in names]
        suffixes = " or ".join(sorted({f.suffix for f in front_ends}))
        flag = f"--import-{names[0]}"
        if input_path is None:
            raise UsageError(f"{flag} needs a model file ({suffixes})")
        chosen = next((f for f in front_ends if f.suffix == input_path.suffix), None)
        if chosen is None:
            raise UsageError(f"{input_path}: {flag} reads {suffixes} files, not '{input_path.suffix or 'no suffix'}'")
        if not input_path.is_file():
            raise ModelError(f"{input_path}: no such model file")
        text = StringIO()
        Printer(stream=text).print_op(chosen.read(input_path))
        text.write("\n")
        _write_text(text.getvalue(), output)

    return run


def _export_onnx(input_path: Path | None, output: Path | None) -> None:
    if output is None:
        raise UsageError("--export-onnx writes a binary file: name it with -o OUT.onnx")
    module = parse_ir(input_path)
    import onnx

    from loam.frontends.onnx_export import export_model

    model = export_model(module)
    onnx.save_model(model, str(output))


def _emitter(target: Target) -> Callable[[Path | None, Path | None], None]:
    def run(input_path: Path | None, output: Path | None) -> None:
        _write_text(target.emit(parse_ir(input_path)), output)

    return run


TRANSLATIONS: tuple[Translation, ...] = (
    Translation(
        "import-onnx", "read MODEL (.onnx or .onnxtext) and print graph-dialect IR", _importer(("onnx", "onnxtext"))
    ),
    Translation(
        "import-stablehlo",
        "read StableHLO text (MODEL.mlir, as JAX prints it) and print graph-dialect IR",
        _importer(("stablehlo",)),
    ),
    Translation(
        "export-onnx", "read graph-dialect IR (INPUT or stdin) and write an ONNX model to -o OUT.onnx", _export_onnx
    ),
    *(
        Translation(f"emit-{t.name}", f"read kernel-dialect IR (INPUT or stdin) and print {t.description}", _emitter(t))
        for t in TARGETS.values()
    ),
)
"""The translations: an import per front end, ONNX export, and an emit per target of `loam.driver.registry`."""


def _parser() -> CliParser:
    parser = CliParser(
        prog=PROG,
        description="Translate between ONNX, Loam IR and generated code. Exactly one translation flag is required.",
    )
    group = parser.add_mutually_exclusive_group(required=True)
    for translation in TRANSLATIONS:
        group.add_argument(
            f"--{translation.flag}",
            dest="translation",
            action="store_const",
            const=translation.flag,
            help=translation.help,
        )
    parser.add_argument(
        "input",
        nargs="?",
        type=Path,
        metavar="INPUT",
        help="the file to translate (IR is read from stdin when omitted)",
    )
    parser.add_argument("-o", "--output", type=Path, metavar="OUT", help="write the result here instead of stdout")
    parser.add_argument(
        "--debug", action="store_true", help="show the Python traceback of an error instead of one line"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the `loam-translate` console script."""
    arguments = list(sys.argv[1:] if argv is None else argv)

    def body() -> None:
        args = _parser().parse_args(arguments)
        chosen = next(t for t in TRANSLATIONS if t.flag == args.translation)
        chosen.run(args.input, args.output)

    raise SystemExit(run_guarded(PROG, body, debug=wants_debug(arguments)))


if __name__ == "__main__":
    main()
