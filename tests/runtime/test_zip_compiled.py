"""The compiled zip loop (`loam/runtime/kernels/zip_compiled.py`) against its oracle, the numpy expression
function, and a built bias + exact GELU against onnxruntime.

The bound against the numpy function is 0 ulps: every step is a float32 IEEE operation (or `_erf`'s
rational fit, operation by operation) in the numpy function's order, without fastmath, so each
element has the numpy function's bits (NaN where it is NaN).  Against onnxruntime, whose Erf is
another approximation and whose product sums in another order, a built GELU is within 2e-5 (1 +
|y|).  numba is a dev dependency, so here the compiled loop runs; a generated module in a process
where numba cannot be imported must still load and give the numpy function's bits.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

from loam.backends.numpy_kernel_printer import compiled_steps
from loam.dialects.expr import Expr
from loam.runtime.kernels import elementwise
from loam.runtime.kernels.compiled import set_compiled
from loam.runtime.kernels.zip_compiled import (
    STEP_OPS,
    _by_rows,
    _CompiledZips,
    _zip_key,
    _zip_source,
    set_compiled_zips,
    zip_rows,
)
from loam.testing import build_for, run_built

# bias + exact GELU as the BERT export writes it, as the printer gives it to zip_rows (operand 0: the product)
GELU = (("operand", 1), ("operand", 0), ("add", 0, 1), ("const", 1.4142135381698608), ("div", 2, 3), ("erf", 4),
        ("const", 1.0), ("add", 5, 6), ("mul", 2, 7), ("const", 0.5), ("mul", 8, 9))  # fmt: skip


def _numpy_step(op: str) -> object:
    """The function the numpy printer spells step `op` with (`np.add`, `_erf`, ...)."""
    source = elementwise.UNARY_SOURCE.get(op) or elementwise.BINARY_SOURCE[op]
    return getattr(np, source[3:]) if source.startswith("np.") else getattr(elementwise, source)


def _numpy_function(steps: tuple) -> object:
    """An expression function for `steps` as the printer writes one: each step a numpy call, the result
    stored into `out`."""

    def fn(*args: np.ndarray, out: np.ndarray) -> np.ndarray:
        values: list[object] = []
        for step in steps:
            if step[0] == "operand":
                values.append(args[step[1]])
            elif step[0] == "const":
                values.append(np.float32(step[1]))
            else:
                values.append(_numpy_step(step[0])(*(values[i] for i in step[1:])))  # type: ignore[operator]  # a ufunc or a piece
        out[...] = values[-1]
        return out

    return fn


def _same_bits(got: np.ndarray, want: np.ndarray) -> bool:
    """Equal bit for bit where `want` is a number, NaN exactly where it is NaN."""
    nan = np.isnan(want)
    bits, wanted = got.view(np.uint32)[~nan], want.view(np.uint32)[~nan]
    return bool(np.array_equal(nan, np.isnan(got)) and np.array_equal(bits, wanted))


@st.composite
def _gelu_operands(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, bool]:
    """x float32 of rank 1-3 (0 to many rows, odd widths, values past erf's clamp at 4, a NaN or an
    infinity now and then; contiguous, every other element or transposed), a bias along its last axis
    ([N], [1, 1, N], one value, or every other element of a longer row), and whether x is computed in
    place (x is out, as the product's buffer is)."""
    lead = draw(st.lists(st.integers(0, 9), min_size=0, max_size=2))
    width = draw(st.integers(1, 300))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    spread = draw(st.sampled_from([0.1, 1.0, 4.0, 30.0]))
    layout = draw(st.sampled_from(["contiguous", "every-other", "transposed"]))
    if layout == "every-other":
        x = (rng.standard_normal((*lead, 2 * width)) * spread).astype(np.float32)[..., ::2]
    elif layout == "transposed" and lead:
        x = (rng.standard_normal((*lead[:-1], width, lead[-1])) * spread).astype(np.float32).swapaxes(-1, -2)
    else:
        x = (rng.standard_normal((*lead, width)) * spread).astype(np.float32)
    if x.size and draw(st.booleans()):
        x.reshape(-1)[rng.integers(x.size)] = draw(st.sampled_from([np.nan, np.inf, -np.inf, -0.0]))
    kind = draw(st.sampled_from(["row", "row3", "scalar", "strided"]))
    bias = (rng.standard_normal(2 * width) * spread).astype(np.float32)
    bias = {"row": bias[:width], "row3": bias[:width].reshape(1, 1, width), "scalar": bias[:1],
            "strided": bias[::2]}[kind]  # fmt: skip
    return x, bias, draw(st.booleans())


@pytest.fixture(autouse=True, scope="module")
def every_size_compiled() -> Iterator[None]:
    """The loop for zips of any size here (a module runs it from `_CompiledZips.elements`)."""
    before, _CompiledZips.elements = _CompiledZips.elements, 0
    yield
    _CompiledZips.elements = before


def test_a_loop_made_for_a_zero_constant_is_not_reused_for_its_negative() -> None:
    """-0.0 == 0.0 and both hash alike: a loop kept by the steps alone computed 0.0 / -x for -0.0 / -x."""
    x = np.full((2, 3), -2.0, np.float32)
    for zero in (0.0, -0.0):
        steps = (("operand", 0), ("const", zero), ("div", 1, 0))
        out = np.empty((2, 3), np.float32)
        zip_rows(_numpy_function(steps), steps, out, x)
        assert np.all(np.signbit(out) == (zero == 0.0 and not np.signbit(zero)))  # 0/-2 is -0.0, -0/-2 is +0.0


def test_a_zip_smaller_than_the_threshold_stays_in_numpy() -> None:
    fn = _numpy_function(GELU)
    x, bias = np.linspace(-3, 3, 6, dtype=np.float32).reshape(2, 3), np.float32([0.5, -1, 2])
    want = np.empty((2, 3), np.float32)
    fn(x, bias, out=want)
    kept, threshold = _CompiledZips.kernels, _CompiledZips.elements
    try:
        for elements, compiled in ((7, False), (6, True)):
            _CompiledZips.kernels, _CompiledZips.elements = {}, elements
            out = np.empty((2, 3), np.float32)
            assert zip_rows(fn, GELU, out, x, bias) is out and _same_bits(out, want)
            assert bool(_CompiledZips.kernels) is compiled
    finally:
        _CompiledZips.kernels, _CompiledZips.elements = kept, threshold


@given(_gelu_operands())
@settings(max_examples=200, deadline=None)
def test_the_compiled_gelu_is_the_numpy_function_bit_for_bit(case: tuple) -> None:
    x, bias, in_place = case
    fn = _numpy_function(GELU)
    want = np.empty(x.shape, np.float32)
    with np.errstate(all="ignore"):  # infinity times 0 in the numpy function: NaN, as the loop gives
        fn(x, bias, out=want)
    bias_before = bias.copy()
    out = np.ascontiguousarray(x) if in_place else np.empty(x.shape, np.float32)
    assert zip_rows(fn, GELU, out, out if in_place else x, bias) is out
    assert _same_bits(out, want)
    assert np.array_equal(bias, bias_before)  # only out is written
    compiled = _CompiledZips.kernels or {}
    assert any(steps == _zip_key(GELU, kinds)[0] for steps, kinds in compiled) or x.size == 0  # numba ran it


_UNARY = sorted(op for op in STEP_OPS if op in elementwise.UNARY_SOURCE)
_BINARY = sorted(op for op in STEP_OPS if op in elementwise.BINARY_SOURCE)


@st.composite
def _expressions(draw: st.DrawFn) -> tuple[tuple, list[np.ndarray], np.ndarray, tuple]:
    """Steps over 1-3 operands (each of out's extents, a row, one value, or out itself) of the compiled
    steps and float32 constants, operands of odd shapes with extreme values mixed in, and the out buffer."""
    rows, width = draw(st.integers(1, 17)), draw(st.integers(1, 70))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    kinds = draw(st.lists(st.sampled_from(["full", "row", "scalar"]), min_size=1, max_size=3))
    if draw(st.booleans()):
        kinds[0] = "out"
    shapes = {"full": (rows, width), "out": (rows, width), "row": (width,), "scalar": (1,)}
    args = [
        (rng.standard_normal(shapes[k]) * draw(st.sampled_from([1e-3, 1.0, 1e3]))).astype(np.float32) for k in kinds
    ]
    steps: list[tuple] = [("operand", i) for i in range(len(kinds))]
    for _ in range(draw(st.integers(1, 12))):
        choice = draw(st.sampled_from(["unary", "binary", "const"]))
        if choice == "const":
            steps.append(("const", float(np.float32(draw(st.floats(-1e3, 1e3, allow_subnormal=False))))))
        elif choice == "unary":
            steps.append((draw(st.sampled_from(_UNARY)), draw(st.integers(0, len(steps) - 1))))
        else:
            lhs, rhs = draw(st.integers(0, len(steps) - 1)), draw(st.integers(0, len(steps) - 1))
            steps.append((draw(st.sampled_from(_BINARY)), lhs, rhs))
    out = args[0].copy() if kinds[0] == "out" else np.empty((rows, width), np.float32)
    if kinds[0] == "out":
        args[0] = out
    seen = ["scalar" if k == "row" and width == 1 else k for k in kinds]  # a row of one value is one value
    return tuple(steps), args, out, tuple(seen)


@given(_expressions())
@settings(max_examples=150, deadline=None)
def test_any_compiled_expression_is_the_numpy_function_bit_for_bit(case: tuple) -> None:
    steps, args, out, kinds = case
    fn = _numpy_function(steps)
    want = np.empty(out.shape, np.float32)
    with np.errstate(all="ignore"):
        fn(*[a.copy() for a in args], out=want)
        zip_rows(fn, steps, out, *args)
    assert _zip_key(steps, kinds) in (_CompiledZips.kernels or {})  # the compiled loop computed it
    assert _same_bits(out, want)


def test_operands_the_loop_cannot_take_go_to_the_numpy_function() -> None:
    """A column operand ([rows, 1]), another view of out's memory, an out that is not contiguous, and a
    float64 operand each give `_by_rows`'s result."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((6, 40)).astype(np.float32)
    fn = _numpy_function(GELU)
    for args, out in [
        ((x, x[:, :1].copy()), np.empty_like(x)),
        ((x, x[0]), x),  # the bias is a row of out itself
        ((x[:, ::2], x[0, ::2].copy()), np.empty((6, 40), np.float32)[:, ::2]),
        ((x, x[0].astype(np.float64)), np.empty_like(x)),
    ]:
        want = _by_rows(fn, np.empty(out.shape, np.float32), *[np.array(a) for a in args])
        got = zip_rows(fn, GELU, out, *args)
        assert got is out and _same_bits(out, want.astype(np.float32))


def test_set_compiled_false_and_set_compiled_zips_false_turn_the_loop_off() -> None:
    x = np.random.default_rng(3).standard_normal((3, 1, 64)).astype(np.float32)
    bias = np.ones(64, np.float32)
    want = _by_rows(_numpy_function(GELU), np.empty_like(x), x, bias)
    for switch in (set_compiled, set_compiled_zips):
        before = switch(False)
        try:
            off = _CompiledZips.get()
            got = zip_rows(_numpy_function(GELU), GELU, np.empty_like(x), x, bias)
        finally:
            switch(before)
        assert off is None and got.tobytes() == want.tobytes()
    assert _CompiledZips.get() is not None  # on again after each switch


def test_set_compiled_zips_takes_only_a_bool() -> None:
    with pytest.raises(ValueError, match="must be True or False"):
        set_compiled_zips(1)  # type: ignore[arg-type]  # the wrong type on purpose


def test_every_step_op_has_a_loop_and_others_stay_in_numpy() -> None:
    for op in STEP_OPS:
        steps = (("operand", 0), ("operand", 1), (op, 0) if op in elementwise.UNARY_SOURCE else (op, 0, 1))
        assert "_zip_kernel(out, a0, a1)" in _zip_source(steps, ("full", "row"))
    tanh = Expr.operand(0).unary("tanh") * Expr.operand(1) + Expr.operand(0)
    assert compiled_steps(tanh, ["f32", "f32", "f32"]) is None  # tanh: numba's and numpy's differ in bits
    gelu = (Expr.operand(0) + Expr.operand(1)).unary("erf") * 0.5
    assert compiled_steps(gelu, ["f32", "f32", "f32"]) is not None
    assert compiled_steps(gelu, ["f32", "f16", "f32"]) is None  # float32 only
    with pytest.raises(ValueError, match="no compiled step"):
        _zip_source((("operand", 0), ("tanh", 0)), ("full",))


def _gelu_model(batch: object, hidden: int = 64, inner: int = 256) -> tuple[onnx.ModelProto, np.ndarray]:
    """MatMul + bias Add + exact GELU (Div by sqrt 2, Erf, Add 1, Mul x, Mul 0.5), as BERT's intermediate."""
    rng = np.random.default_rng(11)
    consts = {"w": rng.standard_normal((hidden, inner)) / 8, "b": rng.standard_normal(inner), "sqrt2": np.sqrt(2.0),
              "one": 1.0, "half": 0.5}  # fmt: skip
    initializers = [onnx.numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in consts.items()]
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["p"]),
        helper.make_node("Add", ["p", "b"], ["h"]),
        helper.make_node("Div", ["h", "sqrt2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["e1"]),
        helper.make_node("Mul", ["h", "e1"], ["m"]),
        helper.make_node("Mul", ["m", "half"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "gelu",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [batch, hidden])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [batch, inner])],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, (rng.standard_normal((1030, hidden)) * 3).astype(np.float32)


def test_a_built_bias_gelu_is_onnxruntimes_within_the_bound_and_the_numpy_functions_bits() -> None:
    model, x = _gelu_model("N")
    built = build_for(model)
    assert "zip_rows(" in built.source and "_by_rows(" not in built.source.split("def forward", 1)[1].split("\ndef ")[0]
    (got,) = run_built(built, {"x": x})
    assert built.module._CompiledZips.kernels  # type: ignore[attr-defined]  # the compiled loop ran
    before = built.module.set_compiled(False)  # type: ignore[attr-defined]  # the module carries the one switch
    try:
        (numpy_only,) = run_built(built, {"x": x})
    finally:
        built.module.set_compiled(before)  # type: ignore[attr-defined]
    assert _same_bits(np.asarray(got), np.asarray(numpy_only))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, {"x": x})[0]
    assert np.all(np.abs(np.asarray(got, np.float64) - want) <= 2e-5 * (1 + np.abs(want)))


RUN_WITHOUT_NUMBA = r"""
import importlib.util, json, sys
sys.modules["numba"] = None  # `import numba` raises ImportError, as where it is not installed
import numpy as np
spec = importlib.util.spec_from_file_location("gelu_module", sys.argv[1])
module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
x = np.load(sys.argv[2])
y = module.forward(module.Weights.embedded(), x)
np.save(sys.argv[3], y)
print(json.dumps({"numba_found": module._CompiledKernels.numba_found,
                  "compiled": bool(module._CompiledZips.kernels),
                  "imported": sorted({m.split(".")[0] for m, v in sys.modules.items() if v is not None}
                                     - set(sys.stdlib_module_names))}))
"""


def test_a_module_runs_on_numpy_alone_where_numba_is_absent(tmp_path: Path) -> None:
    model, x = _gelu_model("N")
    built = build_for(model)
    module_path = tmp_path / "gelu_module.py"
    module_path.write_text(built.source, encoding="utf-8")
    # 1030 x 256 outputs: _by_rows cuts them into blocks of 64K elements
    np.save(tmp_path / "x.npy", x)
    command = [
        sys.executable,
        "-c",
        RUN_WITHOUT_NUMBA,
        str(module_path),
        str(tmp_path / "x.npy"),
        str(tmp_path / "y.npy"),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["numba_found"] is False and not report["compiled"]
    # Beyond the standard library (and site's own hooks, `_...`), only numpy came in.
    assert [name for name in report["imported"] if not name.startswith("_")] == ["numpy"]
    (compiled,) = run_built(built, {"x": x})
    assert _same_bits(np.load(tmp_path / "y.npy"), np.asarray(compiled))
