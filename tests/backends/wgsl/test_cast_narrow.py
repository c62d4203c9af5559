"""The WGSL cast_narrow kernel against the numpy kernel `kernel_cast_narrow` (ml_dtypes), value by value.

The numpy kernel is itself held to ONNX's node cases (and onnxruntime where it casts them); here the
shader must give its every result bit for bit, on values chosen where the rules bite: each float
format's ties (to even), subnormals, the largest finite value and the halfway point past it, infinities
and NaN of both signs, -0, f32 subnormals, and a sweep of magnitudes; every float8e8m0 rounding mode;
integers wrapping into 4 and 2 bits and floats truncated or out of their range; sources of every type
the device holds, narrow floats included (held as their f32 values).
"""

from __future__ import annotations

import ml_dtypes  # noqa: F401 - registers the narrow dtypes' names with numpy
import numpy as np
import pytest

from loam.backends.wgsl_kernels import narrow
from loam.core import dtypes
from loam.core.errors import UnsupportedError
from loam.runtime.kernels import PIECES as NP
from tests.backends.wgsl.harness import run_kernel

ELEM = {e.numpy.name: e.name for e in dtypes.BY_NAME.values() if e.numpy is not None}
FLOATS = ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float4_e2m1fn"]
INTEGERS = ["int4", "uint4", "int2", "uint2"]


def specials() -> np.ndarray:
    """f32 values where a narrow format's rules bite, and a sweep of magnitudes, of both signs."""
    grid: list[float] = []
    for name in [*FLOATS, "float8_e8m0fnu"]:
        every = np.arange(256, dtype=np.uint8).view(name).astype(np.float32)
        every = np.unique(every[np.isfinite(every)])
        grid += every.tolist()
        grid += ((every[1:] + every[:-1]) / 2).tolist()  # the ties
        grid += (every * 1.0001).tolist() + (every * 0.9999).tolist()
    grid += [np.inf, np.nan, 1e-40, 1e-45, 3.4e38, 0.25, 0.75, 1.25, 464.0, 465.0, 61440.0, 6.5, 17.2, 300.0]
    grid += np.geomspace(1e-12, 1e12, 300).tolist()
    x = np.array(grid, np.float32)
    bits = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0x00000001, 0x80000001], np.uint32).view(np.float32)
    return np.concatenate([x, -x, bits])


def cast(x: np.ndarray, to: str, saturate: int = 1, round_mode: str = "up") -> tuple[np.ndarray, np.ndarray]:
    """(the numpy kernel's result, the shader's) for `x` cast into `to`."""
    with np.errstate(invalid="ignore", over="ignore"):
        want = NP["kernel_cast_narrow"](x, to=to, saturate=saturate, round_mode=round_mode)
    params = {"to": to, "saturate": saturate, "round_mode": round_mode}
    source = narrow.source_cast_narrow([(ELEM[x.dtype.name], x.ndim)], [(ELEM[to], x.ndim)], **params)
    values, grid = narrow.PIECES["_p_cast_narrow"]((x.shape, want.shape), **params)  # type: ignore[operator]
    device_in = x.astype(np.float32) if x.dtype.kind in "fV" else x
    (got,) = run_kernel(source, values, grid, [(to, want.shape)], [device_in])
    return want, got


def same(got: np.ndarray, want: np.ndarray, x: np.ndarray) -> None:
    """Bit for bit, NaN of any payload being NaN (the device keeps values, not NaN's bits)."""
    g, w = got.astype(np.float32), want.astype(np.float32)
    nan = np.isnan(w)
    np.testing.assert_array_equal(np.isnan(g), nan)
    bad = np.flatnonzero((g.view(np.uint32) != w.view(np.uint32)) & ~nan)
    assert not bad.size, f"{x[bad[:5]].tolist()} -> {g[bad[:5]].tolist()}, numpy {w[bad[:5]].tolist()}"


@pytest.mark.parametrize("to", FLOATS)
@pytest.mark.parametrize("saturate", [0, 1])
def test_float_formats(to: str, saturate: int) -> None:
    x = specials()
    want, got = cast(x, to, saturate)
    same(got, want, x)


@pytest.mark.parametrize("round_mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [0, 1])
def test_e8m0(round_mode: str, saturate: int) -> None:
    x = specials()
    want, got = cast(x, "float8_e8m0fnu", saturate, round_mode)
    same(got, want, x)


@pytest.mark.parametrize("to", INTEGERS)
@pytest.mark.parametrize("source", ["float32", "float16", "bfloat16", "int32", "int64", "int8", "uint8", "bool"])
def test_integers(to: str, source: str) -> None:
    if source.startswith(("float", "bfloat")):
        with np.errstate(invalid="ignore", over="ignore"):  # past a half's range: its infinity
            x = np.concatenate([specials(), np.arange(-20, 20, 0.25, dtype=np.float32)]).astype(source)
    elif source == "bool":
        x = np.array([True, False, True])
    else:
        info = np.iinfo(source)
        x = np.concatenate([np.arange(-300, 300), [-(2**31), 2**31 - 1]]).clip(info.min, info.max).astype(source)
    want, got = cast(x, to)
    np.testing.assert_array_equal(got.astype(np.int32), want.astype(np.int32))


@pytest.mark.parametrize("source", ["float16", "bfloat16", "int32", "int64", "bool", *FLOATS, "float8_e8m0fnu"])
@pytest.mark.parametrize("to", ["float8_e4m3fn", "float8_e5m2fnuz", "float4_e2m1fn", "float8_e8m0fnu"])
def test_sources(source: str, to: str) -> None:
    if source == "bool":
        x = np.array([True, False])
    elif source in ("int32", "int64"):
        x = np.arange(-70000, 70000, 997).astype(source)
    else:
        with np.errstate(invalid="ignore", over="ignore"):
            x = specials().astype(source)
    want, got = cast(x, to, saturate=0, round_mode="nearest")
    same(got, want, x.astype(np.float32))


def test_a_cast_into_an_unknown_type_is_refused() -> None:
    with pytest.raises(UnsupportedError, match="no cast into float8_e3m4"):
        narrow.source_cast_narrow([("f32", 1)], [("f32", 1)], to="float8_e3m4", saturate=1, round_mode="up")


# -- through the WGSL module -----------------------------------------------------------------------

ONNX_TYPES = {"float8_e4m3fn": 17, "float8_e4m3fnuz": 18, "float8_e5m2": 19, "float8_e5m2fnuz": 20,
              "float8_e8m0fnu": 24, "int4": 22, "uint4": 21, "int2": 26, "uint2": 25}  # fmt: skip


@pytest.mark.parametrize("to", list(ONNX_TYPES))
def test_a_round_trip_runs_on_the_device_as_onnxruntime_casts(to: str) -> None:
    # f32 -> narrow -> f32 with no host kernel, held to onnxruntime where ONNX defines the cast: float8
    # saturating (onnxruntime clips -495.9 to -448 without saturate too, where ONNX and numpy say NaN),
    # e8m0 of positive values, integers from in-range whole numbers (onnxruntime rounds a fraction into
    # int4 where numpy's astype truncates; ONNX leaves a float's fraction to the cast).
    from onnx import TensorProto, helper

    from loam.testing import assert_same, build_for, run_built, run_onnxruntime

    code = ONNX_TYPES[to]
    saturate = {} if to in INTEGERS else {"saturate": 1}
    nodes = [helper.make_node("Cast", ["x"], ["n"], to=code, **saturate),
             helper.make_node("Cast", ["n"], ["y"], to=TensorProto.FLOAT)]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [200])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [200])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 25)])
    rng = np.random.default_rng(code)
    if to in INTEGERS:
        bits, signed = narrow.INTEGERS[to]
        x = rng.integers(-(1 << (bits - 1)) if signed else 0, (1 << (bits - 1)) if signed else 1 << bits, 200)
    else:
        x = rng.standard_normal(200) * np.geomspace(1e-4, 1e5, 200)
        x = np.abs(x) if to == "float8_e8m0fnu" else x
    feeds = {"x": np.asarray(x, np.float32)}
    built = build_for(model, backend="wgsl", fuse="dispatch")
    assert built.fusion is not None and built.fusion.device.host == ()
    assert_same(run_built(built, feeds), run_onnxruntime(model, feeds), rtol=0, atol=0)
