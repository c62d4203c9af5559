"""The three command-line tools: argument handling, exit statuses and one-line errors.

`loam build` runs the real pipeline on the shipped MLP example.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from loam.core.errors import AxisError
from loam.core.layout import LayoutRule
from loam.testing import import_module_file
from loam.tools import loam_main, loam_opt, loam_translate

ROOT = Path(__file__).resolve().parents[2]
MLP = ROOT / "examples" / "mlp"


def run(main: Any, argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run a tool's `main(argv)` in-process; return (exit status, stdout, stderr)."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    out, err = capsys.readouterr()
    code = info.value.code
    return (code if isinstance(code, int) else 1), out, err


def assert_one_line_error(err: str, prefix: str, needle: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{prefix}: error: "), err
    assert needle in lines[0], err
    assert "Traceback" not in err


# -- loam build: without the pipeline -------------------------------------------------------------


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "model.onnxtext"
    path.write_text("stand-in; the pipeline is faked in these tests\n", encoding="utf-8")
    return path


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(loam_main.main, ["--version"], capsys)
    assert code == 0
    assert out.startswith("loam ") and "xdsl 0.75" in out


def test_no_command_is_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(loam_main.main, [], capsys)
    assert code == 2
    assert_one_line_error(err, "loam", "required: COMMAND")


def test_missing_model_exits_1_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nowhere.onnx"
    code, _, err = run(loam_main.main, ["build", str(missing), "-o", str(tmp_path / "o.py")], capsys)
    assert code == 1
    assert_one_line_error(err, "loam", f"{missing}: no such model file")


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--dims", "N"], "argument --dims: expected NAME=N"),
        (["--dims", "N=-3"], "argument --dims: expected NAME=N"),
        (["--dims", "=3"], "argument --dims: expected NAME=N"),
        (["--outputs", "a,,b"], "argument --outputs: expected comma-separated output names"),
        (["--layout", "no-equals-sign"], "argument --layout: --layout 'no-equals-sign'"),
        (["--layout", "x=(C)"], "argument --layout:"),
        (["--frobnicate"], "unrecognized arguments: --frobnicate"),
        ([], "required: -o/--output"),
    ],
)
def test_bad_flags_exit_2(
    model: Path, tmp_path: Path, flags: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    output = [] if not flags else ["-o", str(tmp_path / "o.py")]
    code, _, err = run(loam_main.main, ["build", str(model), *output, *flags], capsys)
    assert code == 2
    assert_one_line_error(err, "loam" if "unrecognized" in needle else "loam build", needle)


def test_bad_options_file_exits_1(model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    toml = tmp_path / "opts.toml"
    toml.write_text("bogus = 1\n", encoding="utf-8")
    code, _, err = run(
        loam_main.main, ["build", str(model), "--options", str(toml), "-o", str(tmp_path / "o.py")], capsys
    )
    assert code == 1
    assert_one_line_error(err, "loam", f"{toml}: unknown key 'bogus'")


def test_missing_checkpoint_exits_1(model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    absent = tmp_path / "w.safetensors"
    code, _, err = run(
        loam_main.main, ["build", str(model), "--checkpoint", str(absent), "-o", str(tmp_path / "o.py")], capsys
    )
    assert code == 1
    assert_one_line_error(err, "loam", f"{absent}: no such checkpoint file")


def test_output_folder_must_exist(model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(loam_main.main, ["build", str(model), "-o", str(tmp_path / "no" / "o.py")], capsys)
    assert code == 1
    assert_one_line_error(err, "loam", "does not exist")


def test_console_script_prints_no_traceback(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "loam"
    if not script.exists():
        pytest.skip("the loam console script is not installed next to this interpreter")
    done = subprocess.run(
        [str(script), "build", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "o.py")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert_one_line_error(done.stderr, "loam", "m.onnx: no such model file")


# -- loam build: the real pipeline -----------------------------------------------------------------


def test_build_writes_a_module_matching_onnxruntime(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "mlp_mod.py"
    code, out, err = run(
        loam_main.main,
        [
            "build",
            str(MLP / "mlp.onnxtext"),
            "--options",
            str(MLP / "loam.toml"),
            "--dump-ir",
            str(tmp_path / "ir"),
            "-o",
            str(output),
        ],
        capsys,
    )
    assert code == 0, err
    assert out == ""
    assert "loam: running stage0" in err and f"loam: wrote {output}" in err
    assert sorted(p.name for p in (tmp_path / "ir").iterdir())[-1] == "10-grouped-heads.mlir"
    module = import_module_file(output, "cli_mlp_mod")
    weights = module.Weights.load((MLP / "mlp.safetensors").read_bytes())
    got = module.forward(weights, np.load(MLP / "input.npy"))
    np.testing.assert_allclose(got, np.load(MLP / "expected.npy"), rtol=1e-5, atol=1e-6)


def test_flags_are_merged_over_the_options_file(tmp_path: Path) -> None:
    (tmp_path / "file.safetensors").write_bytes(b"")
    (tmp_path / "flag.safetensors").write_bytes(b"")
    toml = tmp_path / "opts.toml"
    toml.write_text(
        'checkpoint = "file.safetensors"\noutputs = ["a"]\n[dims]\nN = 1\nS = 7\n'
        '[[layout]]\npattern = "x"\naxes = ["Batch", "In"]\n',
        encoding="utf-8",
    )
    args = loam_main.build_parser().parse_args(
        [
            "build",
            "m.onnx",
            "--options",
            str(toml),
            "--checkpoint",
            str(tmp_path / "flag.safetensors"),
            "--dims",
            "N=4",
            "--outputs",
            "y,z",
            "--layout",
            "x=Rows,Cols",
            "--inline-weights",
            "-o",
            "o.py",
        ]
    )
    options = loam_main.options_from_args(args)
    assert dict(options.dims) == {"N": 4, "S": 7}
    assert options.outputs == ("y", "z")
    assert options.inline_weights is True
    assert options.layout == (LayoutRule("x", ("Rows", "Cols")), LayoutRule("x", ("Batch", "In")))
    # flags replace the file's checkpoint list
    assert options.checkpoints == (tmp_path / "flag.safetensors",)


def test_build_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        loam_main.main, ["build", str(MLP / "mlp.onnxtext"), "--options", str(MLP / "loam.toml"), "-o", "-"], capsys
    )
    assert code == 0, err
    assert "def forward(weights" in out and "class Weights" in out
    assert "wrote" not in err


def test_build_error_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = tmp_path / "o.py"
    code, _, err = run(
        loam_main.main,
        [
            "build",
            str(MLP / "mlp.onnxtext"),
            "--options",
            str(MLP / "loam.toml"),
            "--layout",
            "fc2.weight=Wrong,Hidden2",
            "-o",
            str(output),
        ],
        capsys,
    )
    assert code == 1
    # Progress lines come first; the refusal is one line, the last, with no traceback.
    errors = [line for line in err.splitlines() if "error:" in line]
    assert errors == [err.splitlines()[-1]] and "Traceback" not in err
    assert errors[0].startswith(
        f"loam: error: {MLP / 'mlp.onnxtext'}: MatMul node 'fc2.matmul': contracts axis Hidden of the first "
        "operand with axis Wrong of the second"
    )
    assert not output.exists()


def test_internal_error_is_exit_3_and_debug_shows_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A bug inside the compiler is injected where the pipeline reads the model.
    import loam.driver.pipeline

    def broken_reader(model: object) -> ModuleOp:
        raise RuntimeError("a bug")

    monkeypatch.setattr(loam.driver.pipeline, "read_model", broken_reader)
    argv = ["build", str(MLP / "mlp.onnxtext"), "-o", str(tmp_path / "o.py")]
    code, _, err = run(loam_main.main, argv, capsys)
    assert code == 3
    assert "loam: error: internal error: RuntimeError: a bug" in err and "Traceback" not in err
    with pytest.raises(RuntimeError, match="a bug"):
        loam_main.main([*argv, "--debug"])


def test_build_help_explains_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(loam_main.main, ["build", "--help"], capsys)
    assert code == 0
    parser = loam_main.build_parser()
    build = parser._subparsers._group_actions[0].choices["build"]  # type: ignore[union-attr]
    for action in build._actions:
        assert action.help, f"flag {action.option_strings or action.dest} has no help"
        for flag in action.option_strings:
            assert flag in out


# -- loam-translate -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "code", "needle"),
    [
        (
            [],
            2,
            "one of the arguments --import-onnx --import-stablehlo --export-onnx --emit-python --emit-wgsl is required",
        ),
        (["--import-onnx", "--emit-python", "x.mlir"], 2, "not allowed with argument"),
        (["--import-onnx"], 2, "--import-onnx needs a model file"),
        (["--export-onnx", "x.mlir"], 2, "name it with -o OUT.onnx"),
        (["--import-onnx", "model.txt"], 2, "--import-onnx reads .onnx or .onnxtext files, not '.txt'"),
        (["--import-onnx", "absent.onnx"], 1, "absent.onnx: no such model file"),
        (["--emit-python", "absent.mlir"], 1, "'absent.mlir': No such file or directory"),
    ],
)
def test_translate_refusals(
    argv: list[str],
    code: int,
    needle: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    got, _, err = run(loam_translate.main, argv, capsys)
    assert got == code
    assert_one_line_error(err, "loam-translate", needle)


def test_translate_bad_ir_names_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.mlir"
    bad.write_text('builtin.module {\n  %0 = "no_such.op"( : () -> ()\n}\n', encoding="utf-8")
    code, _, err = run(loam_translate.main, ["--emit-python", str(bad)], capsys)
    assert code == 1
    assert err.startswith(f"loam-translate: error: {bad}:2:")
    assert "Traceback" not in err


def test_parse_ir_knows_loam_dialects(tmp_path: Path) -> None:
    path = tmp_path / "m.mlir"
    path.write_text("builtin.module {\n}\n", encoding="utf-8")
    assert isinstance(loam_translate.parse_ir(path), ModuleOp)
    from loam.frontends.context import make_context

    assert {"builtin", "graph", "shape_poly", "tensor_axes", "kernel"} <= set(make_context().registered_dialect_names)


def test_import_then_export_keeps_the_nodes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("loam.frontends.onnx_proto")
    pytest.importorskip("loam.frontends.onnx_export")
    import onnx
    import onnx.parser

    binary = tmp_path / "mlp.onnx"
    onnx.save(onnx.parser.parse_model((MLP / "mlp.onnxtext").read_text(encoding="utf-8")), binary)
    code, ir, err = run(loam_translate.main, ["--import-onnx", str(binary)], capsys)
    assert code == 0, err
    assert "graph.model" in ir and '"Gemm"' in ir
    (tmp_path / "mlp.mlir").write_text(ir, encoding="utf-8")
    code, _, err = run(
        loam_translate.main, ["--export-onnx", str(tmp_path / "mlp.mlir"), "-o", str(tmp_path / "back.onnx")], capsys
    )
    assert code == 0, err
    back = onnx.load(str(tmp_path / "back.onnx"), load_external_data=False)
    assert [n.op_type for n in back.graph.node] == ["Gemm", "Relu", "MatMul", "Add", "Relu", "Gemm"]


# -- loam-opt -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RefusingPass(ModulePass):
    """Refuses every module, as a pass does that finds bad input."""

    name: ClassVar[str] = "test-refuse"
    report: bool = False

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        raise AxisError("tensor 'x' axis 0: no layout rule reaches it")


@dataclass(frozen=True)
class UndocumentedPass(ModulePass):
    name: ClassVar[str] = "test-undocumented"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        return None


def _broken() -> type[ModulePass]:
    raise ImportError("half-written module")


@pytest.fixture
def fake_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = {
        "test-refuse": lambda: RefusingPass,
        "test-undocumented": lambda: UndocumentedPass,
        "test-broken": _broken,
    }
    monkeypatch.setattr(loam_opt, "get_all_passes", lambda: registry)


@pytest.fixture
def empty_mlir(tmp_path: Path) -> Path:
    path = tmp_path / "empty.mlir"
    path.write_text("builtin.module {\n}\n// -----\nbuiltin.module {\n}\n", encoding="utf-8")
    return path


def test_opt_registers_loam_on_top_of_xdsl() -> None:
    opt = loam_opt.LoamOptMain(args=[])
    from loam.dialects import get_all_dialects
    from loam.driver.passes import get_all_passes

    assert set(get_all_passes()) <= set(opt.available_passes)
    assert "canonicalize" in opt.available_passes  # xDSL's passes stay
    assert set(get_all_dialects()) <= set(opt.ctx.registered_dialect_names)
    assert "arith" in opt.ctx.registered_dialect_names
    assert {"onnx", "onnxtext", "mlir"} <= set(opt.available_frontends)


def test_opt_help_lists_passes_with_description_and_options(
    fake_passes: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(loam_opt.main, ["--help"], capsys)
    assert code == 0
    assert "--split-input-file" in out and "--verify-diagnostics" in out
    lines = out.splitlines()
    refuse = next(i for i, line in enumerate(lines) if line.lstrip().startswith("test-refuse"))
    assert "Refuses every module, as a pass does that finds bad input." in lines[refuse]
    assert "option report: bool = false" in lines[refuse + 1]
    assert any("test-undocumented" in line and "(no description)" in line for line in lines)
    assert any("test-broken" in line and "cannot be loaded: ImportError: half-written module" in line for line in lines)


def test_opt_loam_error_is_one_line(fake_passes: None, empty_mlir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(loam_opt.main, [str(empty_mlir), "-p", "test-refuse"], capsys)
    assert code == 1
    assert_one_line_error(err, "loam-opt", "tensor 'x' axis 0: no layout rule reaches it")


def test_opt_verify_diagnostics_prints_loam_errors_per_chunk(
    fake_passes: None, empty_mlir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(
        loam_opt.main, [str(empty_mlir), "-p", "test-refuse", "--split-input-file", "--verify-diagnostics"], capsys
    )
    assert code == 0
    assert out.count("no layout rule reaches it") == 2


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["-p", "no-such-pass"], "Unrecognized passes: ['no-such-pass']"),
        (["-p", "test-refuse{"], "malformed pass pipeline 'test-refuse{'"),
    ],
)
def test_opt_bad_pipeline_is_usage_error(
    fake_passes: None, empty_mlir: Path, argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(loam_opt.main, [str(empty_mlir), *argv], capsys)
    assert code == 2
    assert err.startswith("loam-opt: error: ") and needle in err
    assert "Traceback" not in err


def test_opt_unknown_extension_is_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("hello\n", encoding="utf-8")
    code, _, err = run(loam_opt.main, [str(notes)], capsys)
    assert code == 2
    assert_one_line_error(err, "loam-opt", "Unrecognized file extension 'txt'")


def test_opt_reads_onnx_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("loam.frontends.onnx_proto")
    import onnx
    import onnx.parser

    binary = tmp_path / "mlp.onnx"
    onnx.save(onnx.parser.parse_model((MLP / "mlp.onnxtext").read_text(encoding="utf-8")), binary)
    code, out, err = run(loam_opt.main, [str(binary)], capsys)
    assert code == 0, err
    assert "graph.model" in out
    assert out.count("graph.node") == 6


# -- loam-translate: import | export through the console scripts -----------------------------------


def _pipe_import_export(model: Path, back: Path) -> None:
    bin_dir = Path(sys.executable).parent
    if not (bin_dir / "loam-translate").exists():
        pytest.skip("the loam-translate console script is not installed next to this interpreter")
    imported = subprocess.run(
        [str(bin_dir / "loam-translate"), "--import-onnx", str(model)], capture_output=True, check=True
    )
    subprocess.run(
        [str(bin_dir / "loam-translate"), "--export-onnx", "-o", str(back)],
        input=imported.stdout,
        capture_output=True,
        check=True,
    )


def test_import_export_pipe_keeps_the_model_computing_the_same(tmp_path: Path) -> None:
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((5, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal((5,)).astype(np.float32), "b")
    graph = helper.make_graph(
        [
            helper.make_node("Gemm", ["x", "w", "b"], ["h"], name="g", transB=1, alpha=0.5),
            helper.make_node("Tanh", ["h"], ["y"], name="t"),
        ],
        "pipe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])],
        [w, b],
    )
    original = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(original, tmp_path / "m.onnx")
    _pipe_import_export(tmp_path / "m.onnx", tmp_path / "back.onnx")
    back = onnx.load(tmp_path / "back.onnx")
    onnx.checker.check_model(back, full_check=True)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    run = [
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        for m in (original, back)
    ]
    np.testing.assert_array_equal(run[0], run[1])


def test_text_model_with_external_weights_round_trips_through_the_pipe(tmp_path: Path) -> None:
    import onnx
    import onnxruntime as ort

    # The exported model names mlp.safetensors as its external data, next to it.
    (tmp_path / "mlp.safetensors").write_bytes((MLP / "mlp.safetensors").read_bytes())
    _pipe_import_export(MLP / "mlp.onnxtext", tmp_path / "back.onnx")
    onnx.checker.check_model(str(tmp_path / "back.onnx"), full_check=True)
    session = ort.InferenceSession(str(tmp_path / "back.onnx"), providers=["CPUExecutionProvider"])
    got = session.run(None, {"x": np.load(MLP / "input.npy")})[0]
    np.testing.assert_allclose(got, np.load(MLP / "expected.npy"), rtol=1e-6, atol=0)


def test_a_large_graphs_node_report_counts_kernels_whatever_the_node_names_hold() -> None:
    """Node names with spaces (a branch's relabelling of an input) stay names, not kernel kinds."""
    from loam.tools.loam_main import _REPORT_LINES, _node_report_text

    header = f"{'node':<42}kernels"
    rows = [f"{'relabel attention_mask':<42}kernel.regroup, kernel.regroup", f"{'alias input_ids':<42}kernel.regroup"]
    rows += [f"{f'n{i}':<42}kernel.zip (fused into n0)" for i in range(_REPORT_LINES)]
    text = _node_report_text("\n".join([header, *rows]) + "\n")
    assert text.startswith(f"{_REPORT_LINES + 2} nodes emit code: ")
    assert f"{_REPORT_LINES} kernel.zip" in text and "3 kernel.regroup" in text
    assert "attention_mask" not in text and "input_ids" not in text
