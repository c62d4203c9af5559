"""com.microsoft MatMulNBits and GatherBlockQuantized against onnxruntime's CPU kernels, on random
packed weights (and one model onnxruntime's own quantizer wrote), the weights kept packed."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from loam.core.errors import LoamError, UnsupportedError
from loam.driver.options import Options
from loam.testing import assert_same, build_for, run_built, run_loam, run_onnxruntime
from tests.ops.microsoft.models import ms_model, nbits_weights

RNG = np.random.default_rng(20261203)


def nbits_model(
    a: np.ndarray, k: int, n: int, bits: int, block: int, zero: str | None = None, g_idx: bool = False,
    bias: bool = False, **attrs: int,
) -> tuple[onnx.ModelProto, np.ndarray]:  # fmt: skip
    """A MatMulNBits node over random packed B [N, blocks, block * bits / 8] (and random scales, zero
    points as `zero` says: "packed" uint8, "float" of A's type, or None); returns the model and B."""
    weights = nbits_weights(RNG, k, n, bits, block, zero, g_idx, a.dtype)
    b = weights["B"]
    if bias:
        weights["bias"] = RNG.standard_normal(n).astype(a.dtype)
    model = ms_model("MatMulNBits", {"A": a}, weights, K=k, N=n, bits=bits, block_size=block, **attrs)
    names = ["A", "B", "scales", "zero_points" if zero else "", "g_idx" if g_idx else "", "bias" if bias else ""]
    while not names[-1]:
        names.pop()
    node = model.graph.node[0]
    del node.input[:]
    node.input.extend(names)
    return model, b


def tolerance(a: np.ndarray) -> dict[str, float]:
    # f32: the order of the sums; f16: onnxruntime dequantizes W in f16, Loam in f32, narrowing once.
    return {"rtol": 1e-4, "atol": 1e-4} if a.dtype == np.float32 else {"rtol": 1e-2, "atol": 2e-2}


@pytest.mark.parametrize(
    ("bits", "block", "k", "n", "zero", "bias", "a_shape", "dtype"),
    [
        (4, 32, 64, 16, None, False, (3, 64), np.float32),
        (4, 16, 70, 24, "packed", True, (2, 5, 70), np.float32),  # K not a multiple of the block
        (4, 64, 200, 24, "float", False, (1, 200), np.float32),  # a decode step
        (4, 128, 256, 32, "packed", True, (64, 256), np.float32),  # a prefill
        (8, 64, 200, 24, "packed", False, (1, 200), np.float32),
        (8, 128, 300, 16, None, True, (2, 40, 300), np.float32),
        (8, 16, 48, 8, None, False, (4, 48), np.float32),
        (2, 16, 48, 8, "float", False, (4, 48), np.float32),
        (2, 16, 64, 16, "packed", False, (3, 64), np.float32),
        (2, 32, 80, 16, None, True, (1, 1, 80), np.float32),
        (4, 32, 100, 24, None, True, (1, 100), np.float16),
        (4, 64, 128, 24, "float", True, (2, 9, 128), np.float16),
        (8, 32, 96, 16, "packed", False, (20, 96), np.float16),
        (4, 16, 70, 1, "packed", False, (1, 70), np.float32),  # N = 1: one row of per-block zero points
        (2, 16, 64, 1, "float", True, (6, 64), np.float32),
    ],
)
def test_matmul_nbits_matches_onnxruntime(
    bits: int, block: int, k: int, n: int, zero: str | None, bias: bool, a_shape: tuple[int, ...], dtype: type
) -> None:
    a = RNG.standard_normal(a_shape).astype(dtype)
    model, _ = nbits_model(a, k, n, bits, block, zero, bias=bias)
    assert_same(run_loam(model, {"A": a}), run_onnxruntime(model, {"A": a}), **tolerance(a))


@pytest.mark.parametrize(("zero", "rows", "k"), [(None, 3, 128), ("float", 20, 128), (None, 1, 100)])
def test_matmul_nbits_reads_g_idx(zero: str | None, rows: int, k: int) -> None:
    """Each k reads the scale (and zero point) of the block g_idx names, not of its own block."""
    a = RNG.standard_normal((rows, k)).astype(np.float32)
    model, _ = nbits_model(a, k, 24, 4, 32, zero, g_idx=True)
    assert_same(run_loam(model, {"A": a}), run_onnxruntime(model, {"A": a}), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("bits", "block", "k", "zero", "rows"),
    [(4, 32, 128, "packed", 1), (4, 16, 70, None, 2), (4, 64, 256, "packed", 7), (4, 128, 256, None, 16),
     (8, 32, 96, "packed", 33), (8, 128, 300, None, 2), (2, 32, 128, None, 7)],
)  # fmt: skip
def test_accuracy_level_4_rounds_a_to_int8_as_onnxruntime_does(
    bits: int, block: int, k: int, zero: str | None, rows: int
) -> None:
    """At accuracy_level 4 onnxruntime rounds A to int8 per block and multiplies integers; so does Loam,
    to float32 rounding of the per-block scaling (2e-6 of the output's scale; measured up to 5e-7), where
    the float32 product, `int8_activations = false`, is about 1e-2 of the scale away (the rounding of A)."""
    a = RNG.standard_normal((rows, k)).astype(np.float32)
    model, _ = nbits_model(a, k, 32, bits, block, zero, accuracy_level=4)
    want = run_onnxruntime(model, {"A": a})[0]
    scale = float(np.abs(want).max())
    got = run_loam(model, {"A": a})[0]
    assert_same([got], [want], rtol=0, atol=2e-6 * scale)
    f32 = run_loam(model, {"A": a}, Options(int8_activations=False))[0]
    assert np.abs(f32 - want).max() > 100 * max(float(np.abs(got - want).max()), 1e-9 * scale)


@pytest.mark.parametrize("zero", [None, "packed"])
def test_half_activations_at_accuracy_level_4_round_to_int8_too(zero: str | None) -> None:
    """onnxruntime rounds f16 A to int8 at accuracy_level 4 as well; Loam widens A to f32, rounds it the
    same way and narrows the result: onnxruntime's halves, where the float32 product is 5e-2 away."""
    a = RNG.standard_normal((3, 128)).astype(np.float16)
    model, _ = nbits_model(a, 128, 32, 4, 32, zero, accuracy_level=4)
    want = run_onnxruntime(model, {"A": a})[0]
    scale = float(np.abs(want).max())
    assert_same(run_loam(model, {"A": a}), [want], rtol=0, atol=1e-3 * scale)
    f32 = run_loam(model, {"A": a}, Options(int8_activations=False))[0]
    assert np.abs(f32.astype(np.float32) - want).max() > 2e-3 * scale


def test_int8_activations_rounds_a_where_the_model_does_not_ask() -> None:
    """The option on, a node at accuracy_level 0 rounds A too: the same numbers as at accuracy_level 4."""
    a = RNG.standard_normal((3, 64)).astype(np.float32)
    model, _ = nbits_model(a, 64, 16, 4, 32, "packed", accuracy_level=4)
    want = run_onnxruntime(model, {"A": a})[0]
    model.graph.node[0].attribute[[x.name for x in model.graph.node[0].attribute].index("accuracy_level")].i = 0
    assert_same(run_loam(model, {"A": a}, Options(int8_activations=True)), [want], rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    ("level", "zero", "g_idx", "option", "said"),
    [(4, None, False, None, "at accuracy_level 4 rounds A to int8"),
     (4, "packed", False, None, "at accuracy_level 4 rounds A to int8"),
     (4, "float", False, None, None), (4, None, True, None, None), (1, None, False, None, None),
     (0, "packed", False, None, None),
     (4, None, False, False, "at accuracy_level 4 multiplies in float32 (int8_activations = false)"),
     (0, None, False, True, "int8_activations: MatMulNBits rounds A to int8"),
     (4, None, True, True, "reading g_idx or zero points of A's type multiplies in float32"),
     (0, None, False, False, None)],
)  # fmt: skip
def test_a_build_note_says_what_each_node_multiplies(
    level: int, zero: str | None, g_idx: bool, option: bool | None, said: str | None
) -> None:
    """Where the option or the model's accuracy_level 4 makes a node's products integer ones, or where
    the option keeps float32 products that onnxruntime would round, a build note says so, naming the node
    (and the kernel carries `int8 = 1`, the module the integer kernels, exactly where A is rounded);
    elsewhere nothing is said."""
    a = RNG.standard_normal((2, 64)).astype(np.float32)
    model, _ = nbits_model(a, 64, 16, 4, 32, zero, g_idx=g_idx, accuracy_level=level)
    model.graph.node[0].name = "proj"
    built = build_for(model, Options(int8_activations=option))
    notes = [n for n in built.notes if "MatMulNBits" in n]
    assert len(notes) == (0 if said is None else 1)
    if said is not None:
        assert said in notes[0] and "node 'proj'" in notes[0]
    rounded = (option if option is not None else level == 4) and not g_idx and zero != "float"
    assert ("int8=1" in built.source) == rounded
    # The integer kernels are carried only by a module that calls them.
    assert ("def matmul_nbits_int8(" in built.source) == ("def _nbits_int8(" in built.source) == rounded


def test_the_weights_keep_b_packed() -> None:
    """The module's Weights hold B's uint8 bytes at their packed size, and no float copy of W."""
    a = RNG.standard_normal((2, 256)).astype(np.float32)
    model, b = nbits_model(a, 256, 64, 4, 32, "packed", bias=True)
    module = build_for(model).module
    weights = module.Weights.embedded()
    held = {name: getattr(weights, attr) for name, attr, *_ in module.Weights._SPECS}
    assert held["B"].dtype == np.uint8 and held["B"].nbytes == b.nbytes == 64 * 256 // 2
    np.testing.assert_array_equal(held["B"], b)
    assert not any(v.dtype.kind == "f" and v.size >= 64 * 256 for v in held.values())


def test_a_model_onnxruntimes_quantizer_wrote() -> None:
    """onnxruntime's MatMulNBitsQuantizer turns a float MatMul into MatMulNBits (its real-world form)."""
    pytest.importorskip("onnx_ir")  # the quantizer's own dependency
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    w = RNG.standard_normal((96, 48)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 5, 96])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 5, 48])],
        [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    quantizer = MatMulNBitsQuantizer(model, bits=4, block_size=32, is_symmetric=False, accuracy_level=0)
    quantizer.process()
    quantized = quantizer.model.model
    assert [node.op_type for node in quantized.graph.node] == ["MatMulNBits"]
    x = RNG.standard_normal((2, 5, 96)).astype(np.float32)
    assert_same(run_loam(quantized, {"x": x}), run_onnxruntime(quantized, {"x": x}), rtol=1e-4, atol=1e-4)


def test_the_wgsl_module_computes_it_on_the_host() -> None:
    a = RNG.standard_normal((3, 64)).astype(np.float32)
    model, _ = nbits_model(a, 64, 16, 4, 32, "packed", bias=True)
    with pytest.raises(UnsupportedError, match=r"kernel\.matmul_nbits.*--host-fallback"):
        build_for(model, backend="wgsl")
    result = build_for(model, backend="wgsl", host_fallback=True)
    assert_same(run_built(result, {"A": a}), run_onnxruntime(model, {"A": a}), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"bits": 3}, "bits is 3"),
        ({"block_size": 24}, "block_size must be a power of 2"),
        ({"weight_prepacked": 1}, "prepacked"),
        ({"K": 65}, "last extent is 64, not K = 65"),
        ({"N": 17}, "input B has extents"),
        ({"g_idx": "packed"}, "g_idx is read only with bits 4"),
        ({"bits": 8, "zero": "float"}, "8-bit weights with zero points of A's type"),
    ],
)
def test_what_matmul_nbits_refuses(change: dict[str, object], message: str) -> None:
    a = RNG.standard_normal((3, 64)).astype(np.float32)
    attrs = {"K": 64, "N": 16, "bits": 4, "block_size": 32} | {
        k: v for k, v in change.items() if k not in ("g_idx", "zero")
    }
    zero = change.get("g_idx", change.get("zero"))
    bits = 8 if "zero" in change else 4  # B packed as the node says, so the refusal is the one named
    model, _ = nbits_model(a, 64, 16, bits, 32, zero, g_idx="g_idx" in change)  # type: ignore[arg-type]
    node = model.graph.node[0]
    del node.attribute[:]
    node.attribute.extend(helper.make_attribute(k, v) for k, v in attrs.items())
    with pytest.raises(LoamError, match=f"MatMulNBits node 'y'.*{message}"):
        run_loam(model, {"A": a})


ELEMS = {"ui8": onnx.TensorProto.UINT8, "i4": onnx.TensorProto.INT4, "ui4": onnx.TensorProto.UINT4}


def gather_model(
    rows: int, width: int, bits: int, block: int, data_type: str, zero: bool, indices: np.ndarray,
    scale_type: type = np.float32, **attrs: int,
) -> onnx.ModelProto:  # fmt: skip
    """A GatherBlockQuantized node over random data [rows, width] quantized along its last axis."""
    blocks = -(-width // block)
    inits = []
    if data_type == "ui8":
        inits.append(numpy_helper.from_array(RNG.integers(0, 256, (rows, width * bits // 8), dtype=np.uint8), "data"))
        if zero:
            zp = RNG.integers(0, 256, (rows, -(-blocks * bits // 8)), dtype=np.uint8)
            inits.append(numpy_helper.from_array(zp, "zero_points"))
    else:
        low, high = (-8, 8) if data_type == "i4" else (0, 16)
        values = RNG.integers(low, high, (rows, width)).reshape(-1).tolist()
        inits.append(helper.make_tensor("data", ELEMS[data_type], [rows, width], values))
        if zero:
            zp_values = RNG.integers(low, high, (rows, blocks)).reshape(-1).tolist()
            inits.append(helper.make_tensor("zero_points", ELEMS[data_type], [rows, blocks], zp_values))
    inits.append(numpy_helper.from_array((RNG.random((rows, blocks)) * 0.1 + 0.01).astype(scale_type), "scales"))
    node = helper.make_node(
        "GatherBlockQuantized",
        ["data", "indices", "scales", *(["zero_points"] if zero else [])],
        ["y"],
        domain="com.microsoft",
        **({"block_size": block, **({"bits": bits} if data_type == "ui8" else {})} | attrs),
    )
    out_type = onnx.TensorProto.FLOAT if scale_type == np.float32 else onnx.TensorProto.FLOAT16
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("indices", onnx.TensorProto.INT64, list(indices.shape))],
        [helper.make_tensor_value_info("y", out_type, None)],
        inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    )
    model.ir_version = 10
    return model


@pytest.mark.parametrize(
    ("data_type", "bits", "block", "width", "zero", "scale_type"),
    [
        ("ui8", 4, 32, 64, False, np.float32),
        ("ui8", 4, 32, 64, True, np.float32),
        ("ui8", 4, 32, 48, True, np.float16),  # the width not a multiple of the block
        ("ui8", 8, 16, 64, True, np.float32),
        ("ui8", 8, 128, 256, False, np.float32),
        ("ui8", 2, 16, 64, True, np.float32),
        ("i4", 4, 32, 64, False, np.float32),
        ("i4", 4, 32, 64, True, np.float16),
        ("ui4", 4, 16, 40, True, np.float32),
        ("ui4", 4, 64, 64, False, np.float32),
    ],
)
def test_gather_block_quantized_matches_onnxruntime(
    data_type: str, bits: int, block: int, width: int, zero: bool, scale_type: type
) -> None:
    indices = np.array([[0, 9, -1], [3, -10, 4]], np.int64)
    model = gather_model(10, width, bits, block, data_type, zero, indices, scale_type)
    assert_same(run_loam(model, {"indices": indices}), run_onnxruntime(model, {"indices": indices}), rtol=0, atol=0)


def test_an_index_outside_the_rows_gathers_zeros() -> None:
    indices = np.array([2, 10, -11, 5], np.int64)
    model = gather_model(10, 64, 4, 32, "ui8", True, indices)
    got = run_loam(model, {"indices": indices})
    assert_same(got, run_onnxruntime(model, {"indices": indices}), rtol=0, atol=0)
    assert not got[0][1].any() and not got[0][2].any() and got[0][0].any()


def test_the_gathered_data_stays_packed() -> None:
    indices = np.array([1, 2], np.int64)
    module = build_for(gather_model(10, 64, 4, 32, "ui8", False, indices)).module
    weights = module.Weights.embedded()
    data = {name: getattr(weights, attr) for name, attr, *_ in module.Weights._SPECS}["data"]
    assert data.dtype == np.uint8 and data.shape == (10, 32)


@pytest.mark.parametrize(
    ("attrs", "message"),
    [
        ({"gather_axis": 1}, "gathers along axis 1"),
        ({"quantize_axis": 0}, "quantize_axis is 0"),
        ({"block_size": 8}, "block_size must be a power of 2"),
    ],
)
def test_what_gather_block_quantized_refuses(attrs: dict[str, int], message: str) -> None:
    indices = np.array([1], np.int64)
    model = gather_model(32, 64, 4, 32, "i4", False, indices, **attrs)
    with pytest.raises(LoamError, match=f"GatherBlockQuantized node 'y'.*{message}"):
        run_loam(model, {"indices": indices})
