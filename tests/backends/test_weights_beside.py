"""A model whose ONNX file carries more than `INLINE_LIMIT` bytes of initializers is built into a module
plus a safetensors file beside it, which `Weights.embedded()` memory-maps; the file must be the one
written with the module.  Smaller models, and `inline_weights`, keep the bytes literal in the source."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from safetensors.numpy import load_file

from loam.backends.module_text import INLINE_LIMIT
from loam.core.layout import LayoutRule
from loam.driver.options import Options
from loam.driver.pipeline import BuildResult, beside_path, build
from loam.testing import import_module_file, run_onnxruntime
from loam.tools import loam_main

HIDDEN = 640  # fc2's weight alone is 640 x 640 x 4 bytes = 1.6 MiB
X = np.random.default_rng(5).standard_normal((3, 8)).astype(np.float32)
AXES = {
    "x": ("Batch", "In"),
    "fc1.weight": ("In", "Hidden"),
    "fc1.bias": ("Hidden",),
    "fc2.weight": ("Hidden", "Mid"),
    "head.weight": ("Mid", "Out"),
    "y": ("Batch", "Out"),
}
LAYOUT = Options(layout=tuple(LayoutRule(name, axes) for name, axes in AXES.items()))
LAYOUT_FLAGS = [arg for name, axes in AXES.items() for arg in ("--layout", f"{name}={','.join(axes)}")]


def mlp(seed: int, hidden: int = HIDDEN) -> onnx.ModelProto:
    """x [3, 8] -> Gemm -> Relu -> MatMul with an f16 weight (cast) -> y [3, 4], initializers inside."""
    rng = np.random.default_rng(seed)
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, hidden)).astype(np.float32), "fc1.weight"),
        numpy_helper.from_array(rng.standard_normal(hidden).astype(np.float32), "fc1.bias"),
        numpy_helper.from_array((rng.standard_normal((hidden, hidden)) / 30).astype(np.float32), "fc2.weight"),
        numpy_helper.from_array(rng.standard_normal((hidden, 4)).astype(np.float16), "head.weight"),
    ]
    nodes = [
        helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h"], name="fc1"),
        helper.make_node("Relu", ["h"], ["a"], name="act"),
        helper.make_node("MatMul", ["a", "fc2.weight"], ["g"], name="fc2"),
        helper.make_node("Cast", ["head.weight"], ["hw"], name="widen", to=TensorProto.FLOAT),
        helper.make_node("MatMul", ["g", "hw"], ["y"], name="head"),
    ]
    graph = helper.make_graph(
        nodes,
        "carried",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def mapped(array: np.ndarray) -> bool:
    """Whether `array` views a memory map (following its chain of bases)."""
    base: object = array
    while base is not None:
        if isinstance(base, np.memmap):
            return True
        base = getattr(base, "base", None) if isinstance(base, np.ndarray) else getattr(base, "obj", None)
    return False


@pytest.fixture(scope="module")
def built() -> BuildResult:
    return build(mlp(1), options=LAYOUT)


def test_carried_weights_past_the_limit_go_beside_the_module(built: BuildResult, tmp_path: Path) -> None:
    assert built.weights is not None and len(built.weights) > INLINE_LIMIT
    assert "_WEIGHT_BYTES = b" not in built.source and "_BESIDE_DIGEST = '" in built.source
    want = run_onnxruntime(mlp(1), {"x": X})[0]
    # In the building process the module reads the same bytes from memory ...
    np.testing.assert_allclose(built.module.forward(built.module.Weights.embedded(), X), want, rtol=1e-4, atol=1e-4)
    # ... and, written out, from the safetensors file beside it: memory-mapped, never copied.
    written = built.write(tmp_path / "carried.py")
    assert written == [tmp_path / "carried.py", tmp_path / "carried.safetensors"]
    module = import_module_file(written[0])
    weights = module.Weights.embedded()
    assert mapped(weights.fc2_weight) and not weights.fc2_weight.flags.writeable
    np.testing.assert_allclose(module.forward(weights, X), want, rtol=1e-4, atol=1e-4)
    # The file is an ordinary safetensors checkpoint, holding each initializer as ONNX stores it.
    stored = load_file(str(written[1]))
    assert stored["head.weight"].dtype == np.float16
    for init in mlp(1).graph.initializer:
        np.testing.assert_array_equal(stored[init.name], numpy_helper.to_array(init))


def test_a_weights_file_from_another_build_is_refused(built: BuildResult, tmp_path: Path) -> None:
    written = built.write(tmp_path / "carried.py")
    other = build(mlp(2), options=LAYOUT)  # the same names, dtypes and shapes; other numbers
    assert other.weights is not None
    written[1].write_bytes(other.weights)
    module = import_module_file(written[0])
    with pytest.raises(module.LoadError, match="from another build"):
        module.Weights.embedded()


def test_a_missing_weights_file_is_a_load_error_naming_it(built: BuildResult, tmp_path: Path) -> None:
    path = tmp_path / "alone.py"
    path.write_text(built.source, encoding="utf-8")
    module = import_module_file(path)
    with pytest.raises(module.LoadError, match=r"alone\.safetensors.*cannot be mapped"):
        module.Weights.embedded()


def test_inline_weights_and_small_models_keep_the_literal() -> None:
    inline = build(mlp(1), options=LAYOUT.merged(inline_weights=True))
    assert inline.weights is None and "_WEIGHT_BYTES = b" in inline.source and "_BESIDE" not in inline.source
    small = build(mlp(1, hidden=16), options=LAYOUT)
    assert small.weights is None and "_WEIGHT_BYTES = b" in small.source
    beside = build(mlp(1), options=LAYOUT).module
    np.testing.assert_array_equal(
        inline.module.forward(inline.module.Weights.embedded(), X), beside.forward(beside.Weights.embedded(), X)
    )


def run_build(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as info:
        loam_main.main(["build", *argv, *LAYOUT_FLAGS, "--no-cache"])
    code = info.value.code
    return (code if isinstance(code, int) else 1), capsys.readouterr().err


def test_loam_build_writes_both_and_refuses_what_it_cannot_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "model.onnx"
    onnx.save(mlp(1), str(model))
    code, err = run_build([str(model), "-o", str(tmp_path / "m.py")], capsys)
    assert code == 0, err
    assert f"wrote {tmp_path / 'm.py'} and its weights {tmp_path / 'm.safetensors'}" in err
    module = import_module_file(tmp_path / "m.py")
    np.testing.assert_allclose(
        module.forward(module.Weights.embedded(), X), run_onnxruntime(mlp(1), {"x": X})[0], rtol=1e-4, atol=1e-4
    )
    # To stdout there is nowhere to put the weights: said, not half-done.
    code, err = run_build([str(model), "-o", "-"], capsys)
    assert code != 0 and "give -o FILE.py" in err and "--inline-weights" in err
    # A module whose weights file would overwrite one of the build's inputs is refused before building.
    checkpoint = tmp_path / "ckpt.safetensors"
    checkpoint.write_bytes(beside_path(tmp_path / "m.py").read_bytes())
    before = checkpoint.read_bytes()
    code, err = run_build([str(model), "--checkpoint", str(checkpoint), "-o", str(tmp_path / "ckpt.py")], capsys)
    assert code != 0 and "one of this build's inputs" in err
    assert checkpoint.read_bytes() == before
    code, err = run_build([str(model), "-o", str(model)], capsys)
    assert code != 0 and "one of this build's inputs" in err
    assert onnx.load(str(model)).graph.name == "carried"


def test_the_build_cache_keeps_the_weights_file_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LOAM_CACHE_DIR", str(tmp_path / "cache"))
    model = tmp_path / "model.onnx"
    onnx.save(mlp(1), str(model))

    def cached_build(out: str) -> str:
        with pytest.raises(SystemExit) as info:
            loam_main.main(["build", str(model), *LAYOUT_FLAGS, "-o", str(tmp_path / out)])
        err = capsys.readouterr().err
        assert info.value.code in (0, None), err
        return err

    assert "cache hit" not in cached_build("first.py")
    assert "cache hit" in cached_build("second.py")
    assert (tmp_path / "second.safetensors").read_bytes() == (tmp_path / "first.safetensors").read_bytes()
    # A cached weights file damaged on disk is a miss: the build runs again, never a wrong module.
    (stored,) = (tmp_path / "cache").glob("*.safetensors")
    stored.write_bytes(stored.read_bytes()[:-4] + b"\0\0\0\0")
    assert "cache hit" not in cached_build("third.py")
    assert (tmp_path / "third.safetensors").read_bytes() == (tmp_path / "first.safetensors").read_bytes()


def test_the_wgsl_module_keeps_its_weights_beside_it_too(tmp_path: Path) -> None:
    result = build(mlp(1), options=LAYOUT, backend="wgsl")
    assert result.weights is not None and "_WEIGHT_BYTES = b" not in result.source
    module = import_module_file(result.write(tmp_path / "gpu.py")[0])
    got = module.forward(module.Weights.embedded(), X)
    np.testing.assert_allclose(got, run_onnxruntime(mlp(1), {"x": X})[0], rtol=1e-4, atol=1e-4)
