"""The numpy backend: emitted modules run, check their boundary, and import only numpy."""

from __future__ import annotations

import ast
import struct
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save

from loam.core.errors import AxisError
from loam.dialects.graph import TensorDataAttr
from loam.runtime.weights import _strict_json
from tests.backends.printing import emit, load, t

RNG = np.random.default_rng(0)


X, W, B, Y = (
    t("f32", "Batch: 4, In: 8"),
    t("f32", "In: 8, Hidden: 16"),
    t("f32", "Hidden: 16"),
    t("f32", "Batch: 4, Hidden: 16"),
)
MLP = f"""
kernel.program "forward" (%x : {X}) names ["x"] attributes {{model = "mlp"}} {{
  %w = kernel.weight "fc1.weight" : {W}
  %b = kernel.weight "fc1.bias" : {B}
  %0 = kernel.matmul %x, %w {{node = "fc1"}} : ({X}, {W}) -> {Y}
  %1 = kernel.zip(%0, %b) #kernel.expr<[operand 0, operand 1, add 0 1, relu 2]> {{node = "fc1"}}
       : ({Y}, {B}) -> {Y}
  kernel.return %1 names ["y"] : {Y}
}}
"""


def mlp_weights() -> dict[str, np.ndarray]:
    return {
        "fc1.weight": RNG.standard_normal((8, 16)).astype(np.float32),
        "fc1.bias": RNG.standard_normal(16).astype(np.float32),
    }


def test_mlp_matches_numpy(tmp_path: Path) -> None:
    mod = load(MLP, tmp_path)
    tensors = mlp_weights()
    weights = mod.Weights.load(save(tensors))
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    y = mod.forward(weights, x)
    expected = np.maximum(x @ tensors["fc1.weight"] + tensors["fc1.bias"], 0)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, expected, rtol=1e-6, atol=1e-6)


def test_markers_and_extents(tmp_path: Path) -> None:
    mod = load(MLP, tmp_path)
    assert (mod.Batch.EXTENT, mod.In.EXTENT, mod.Hidden.EXTENT) == (4, 8, 16)
    assert mod.__doc__ is not None and "'mlp'" in mod.__doc__


def test_symbolic_axis_has_no_extent_and_binds_at_run_time(tmp_path: Path) -> None:
    xn, yn, wt = t("f32", "Batch: N, In: 3"), t("f32", "Batch: N, Out: 2"), t("f32", "In: 3, Out: 2")
    flat = t("f32", "(Batch Out): 2*N")
    text = f"""
    kernel.program "forward" (%x : {xn}) names ["x"] {{
      %w = kernel.weight "w" : {wt}
      %0 = kernel.matmul %x, %w {{node = "mm"}} : ({xn}, {wt}) -> {yn}
      %1 = kernel.regroup %0 {{node = "flat"}} : {yn} -> {flat}
      kernel.return %1 names ["y"] : {flat}
    }}
    """
    mod = load(text, tmp_path)
    assert not hasattr(mod.Batch, "EXTENT") and mod.Out.EXTENT == 2
    w = RNG.standard_normal((3, 2)).astype(np.float32)
    for n in (1, 5):
        x = RNG.standard_normal((n, 3)).astype(np.float32)
        np.testing.assert_allclose(mod.forward(mod.Weights.load(save({"w": w})), x), (x @ w).reshape(-1), rtol=1e-6)


def test_batched_matmul_broadcast_permute_and_several_outputs(tmp_path: Path) -> None:
    a, b = t("f32", "H: 3, M: 4, K: 5"), t("f32", "K: 5, N: 2")
    r, p = t("f32", "H: 3, M: 4, N: 2"), t("f32", "N: 2, H: 3, M: 4")
    text = f"""
    kernel.program "forward" (%a : {a}, %b : {b}) names ["a", "b.in"] {{
      %0 = kernel.matmul %a, %b {{node = "mm"}} : ({a}, {b}) -> {r}
      %1 = kernel.permute %0 [2, 0, 1] {{node = "tr"}} : {r} -> {p}
      %2 = kernel.zip(%1) #kernel.expr<[operand 0, sigmoid 0, operand 0, tanh 2, mul 1 3]> {{node = "act"}}
           : ({p}) -> {p}
      kernel.return %0, %2 names ["mm.out", "act"] : {r}, {p}
    }}
    """
    mod = load(text, tmp_path)
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    y = RNG.standard_normal((5, 2)).astype(np.float32)
    out = mod.forward(mod.Weights.load(save({"unused": np.zeros(1, np.float32)})), x, y)
    assert isinstance(out, tuple) and out._fields == ("mm_out", "act")
    np.testing.assert_allclose(out.mm_out, np.matmul(x, y), rtol=1e-5, atol=1e-6)
    z = np.transpose(np.matmul(x, y), (2, 0, 1))
    np.testing.assert_allclose(out.act, 1 / (1 + np.exp(-z)) * np.tanh(z), rtol=1e-5, atol=1e-6)


def test_gemm_like_chain_with_constants(tmp_path: Path) -> None:
    v = t("f32", "N: 6")
    text = f"""
    kernel.program "forward" (%x : {v}, %y : {v}) names ["x", "y"] {{
      %0 = kernel.zip(%x, %y) #kernel.expr<[operand 0, const 0.5 : f32, mul 0 1, operand 1, const 2.0 : f32,
           mul 3 4, add 2 5, neg 6, exp 7, const 1.0 : f32, add 8 9, reciprocal 10]> {{node = "g"}}
           : ({v}, {v}) -> {v}
      kernel.return %0 names ["z"] : {v}
    }}
    """
    mod = load(text, tmp_path)
    x, y = (RNG.standard_normal(6).astype(np.float32) for _ in range(2))
    z = mod.forward(mod.Weights.load(save({"u": np.zeros(1, np.float32)})), x, y)
    assert z.dtype == np.float32
    np.testing.assert_allclose(z, 1 / (1 + np.exp(-(0.5 * x + 2 * y))), rtol=1e-6)


def test_embedded_weights(tmp_path: Path) -> None:
    w = RNG.standard_normal((8, 16)).astype(np.float32)
    data = TensorDataAttr.from_numpy(w)
    text = MLP.replace('kernel.weight "fc1.weight" :', f'kernel.weight "fc1.weight" = {data} :').replace(
        'kernel.weight "fc1.bias" :',
        f'kernel.weight "fc1.bias" = {TensorDataAttr.from_numpy(np.ones(16, np.float32))} :',
    )
    mod = load(text, tmp_path)
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    np.testing.assert_allclose(mod.forward(mod.Weights.embedded(), x), np.maximum(x @ w + 1, 0), rtol=1e-6)


def test_embedded_only_when_every_weight_has_data(tmp_path: Path) -> None:
    assert not hasattr(load(MLP, tmp_path).Weights, "embedded")


def test_imports_only_numpy_and_the_standard_library() -> None:
    """numpy, and `json`, which the checkpoint readers read a safetensors header and an index with."""
    tree = ast.parse(emit(MLP))
    imported = [
        alias.name for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    ]  # fmt: skip
    froms = [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert imported == ["json", "numpy"] and froms == []


def test_only_used_runtime_pieces_are_inlined() -> None:
    source = emit(MLP)
    # The MLP's bias + ReLU runs in place, and its result is tiny: ReLU is numpy's maximum against a
    # scalar zero (`_relu`'s zeros pay off from 1024 elements on), so no piece for relu either.
    assert "np.maximum(s2, 0, out=s2)" in source
    assert "def _relu" not in source and "def _sigmoid" not in source and "def _erf" not in source
    assert "def _check_input" in source


@pytest.mark.parametrize(
    ("tensors", "message"),
    [
        ({"fc1.weight": np.zeros((8, 16), np.float32)}, "tensor 'fc1.bias' is missing from the checkpoint"),
        (
            {"fc1.weight": np.zeros((8, 8), np.float32), "fc1.bias": np.zeros(16, np.float32)},
            "tensor 'fc1.weight' axis 1 (Hidden) is 16 in the graph, 8 in the checkpoint",
        ),
        (
            {"fc1.weight": np.zeros((8, 16, 1), np.float32), "fc1.bias": np.zeros(16, np.float32)},
            "tensor 'fc1.weight' has rank 2 in the graph, 3 in the checkpoint",
        ),
        (
            {"fc1.weight": np.zeros((8, 16), np.int64), "fc1.bias": np.zeros(16, np.float32)},
            "tensor 'fc1.weight' is I64 in the checkpoint; the graph reads float32",
        ),
        (
            {"fc1.weight": np.zeros((8, 16), np.float64), "fc1.bias": np.zeros(16, np.float32)},
            "tensor 'fc1.weight' is F64 in the checkpoint",
        ),
    ],
)
def test_load_errors(tmp_path: Path, tensors: dict[str, np.ndarray], message: str) -> None:
    mod = load(MLP, tmp_path)
    with pytest.raises(mod.LoadError) as info:
        mod.Weights.load(save(tensors))
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)


def test_f16_checkpoint_widens_to_f32(tmp_path: Path) -> None:
    mod = load(MLP, tmp_path)
    tensors = {k: v.astype(np.float16) for k, v in mlp_weights().items()}
    weights = mod.Weights.load(save(tensors))
    assert weights.fc1_weight.dtype == np.float32
    np.testing.assert_array_equal(weights.fc1_weight, tensors["fc1.weight"].astype(np.float32))


def raw_checkpoint(header: bytes, payload: bytes = b"", length: int | None = None) -> bytes:
    return struct.pack("<Q", len(header) if length is None else length) + header + payload


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x01\x02", "too short for its 8-byte header length"),
        (raw_checkpoint(b"{}", length=1000), "header length 1000 runs past the end"),
        (raw_checkpoint(b"{not json"), "header is not valid JSON"),
        (
            raw_checkpoint(b'{"w": {"dtype": "Q7", "shape": [1], "data_offsets": [0, 4]}}', b"\0" * 4),
            "unknown dtype 'Q7'",
        ),
        (
            raw_checkpoint(b'{"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 8]}}', b"\0" * 4),
            "data_offsets [0, 8] lie outside the payload of 4 bytes",
        ),
    ],
)
def test_malformed_checkpoints(tmp_path: Path, data: bytes, message: str) -> None:
    mod = load(MLP, tmp_path)
    with pytest.raises(mod.LoadError, match=None) as info:
        mod.Weights.load(data)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("x", "message"),
    [
        (np.zeros((4, 7), np.float32), "input 'x' axis 1 (In) must be 8, got 7"),
        (np.zeros((4, 8, 1), np.float32), "input 'x' must have rank 2 [Batch, In], got 3"),
        (np.zeros((4, 8), np.float64), "input 'x' must have dtype float32, got float64"),
        ([[0.0] * 8] * 4, "input 'x' must be a numpy.ndarray, got list"),
    ],
)
def test_shape_errors(tmp_path: Path, x: object, message: str) -> None:
    mod = load(MLP, tmp_path)
    weights = mod.Weights.load(save(mlp_weights()))
    with pytest.raises(mod.ShapeError) as info:
        mod.forward(weights, x)
    assert message in str(info.value)


def test_symbol_bound_by_one_input_checks_the_next(tmp_path: Path) -> None:
    v = t("f32", "N: n")
    text = f"""
    kernel.program "forward" (%a : {v}, %b : {v}) names ["a", "b"] {{
      %0 = kernel.zip(%a, %b) #kernel.expr<[operand 0, operand 1, max 0 1]> {{node = "m"}} : ({v}, {v}) -> {v}
      kernel.return %0 names ["c"] : {v}
    }}
    """
    mod = load(text, tmp_path)
    with pytest.raises(mod.ShapeError, match=r"input 'b' axis 0 \(N\) must be n = 3"):
        mod.forward(
            mod.Weights.load(save({"u": np.zeros(1, np.float32)})), np.zeros(3, np.float32), np.zeros(2, np.float32)
        )


def test_colliding_names_are_sanitised(tmp_path: Path) -> None:
    v = t("f32", "N: 2")
    text = f"""
    kernel.program "forward" (%a : {v}, %b : {v}) names ["forward", "class"] {{
      %w = kernel.weight "Weights" : {v}
      %0 = kernel.zip(%a, %b, %w) #kernel.expr<[operand 0, operand 1, add 0 1, operand 2, sub 2 3]> {{node = "z"}}
           : ({v}, {v}, {v}) -> {v}
      kernel.return %0 names ["np"] : {v}
    }}
    """
    source = emit(text)
    assert 'def forward(weights: "Weights", forward_: np.ndarray, class_: np.ndarray)' in source
    assert "np_ = _zip_0(forward_, class_, weights.Weights_)" in source
    mod = load(text, tmp_path)
    out = mod.forward(
        mod.Weights.load(save({"Weights": np.ones(2, np.float32)})), np.ones(2, np.float32), np.ones(2, np.float32)
    )
    np.testing.assert_array_equal(out, np.ones(2, np.float32))


@pytest.mark.parametrize("axis", ["Weights", "forward", "LoadError"])
def test_axis_named_like_a_declaration_stops_emission(axis: str) -> None:
    v = t("f32", f"{axis}: 2")
    text = f'kernel.program "forward" (%a : {v}) names ["a"] {{\n  kernel.return %a names ["b"] : {v}\n}}'
    with pytest.raises(AxisError, match=f"axis '{axis}'"):
        emit(text)


@pytest.mark.parametrize(
    "text", ['{"a": [1, 2.5, -3e2, true, null], "b": "\\u00e9\\n"}', "[]", '{"__metadata__": {"k": "v"}}']
)
def test_json_reader_agrees_with_json(text: str) -> None:
    import json

    assert _strict_json(text) == json.loads(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": 1,}', "Expecting property name"),
        ("[1 2]", "Expecting ','"),
        ('{"a": 01}', "Expecting ','"),
        ('"\\x"', "Invalid \\\\escape"),
        ("{} x", "Extra data"),
        ("\ufeff{}", "BOM"),
        ('{"a": 1, "a": 2}', "key 'a' appears twice"),
        ('{"a": {"b": 1, "b": 1}}', "key 'b' appears twice"),
        ("[NaN]", "NaN is not JSON"),
        ('{"a": -Infinity}', "-Infinity is not JSON"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ],
)
def test_json_reader_refuses(text: str, message: str) -> None:
    """What `json.loads` refuses, and what it takes and a strict reader must not: a repeated key (Python
    would keep the last), NaN and the infinities (not JSON), nesting past the recursion limit."""
    with pytest.raises(ValueError, match=message):
        _strict_json(text)


@pytest.mark.parametrize(
    ("header", "message"), [(b'{"w": {}, "w": {}}', "key 'w' appears twice"), (b'{"a": NaN}', "NaN is not JSON")]
)
def test_a_safetensors_header_json_refuses_is_a_load_error(tmp_path: Path, header: bytes, message: str) -> None:
    mod = load(MLP, tmp_path)
    with pytest.raises(mod.LoadError, match=f"header is not valid JSON: {message}"):
        mod.Weights.load(raw_checkpoint(header))


@pytest.mark.parametrize(
    "value",
    [
        np.full((3, 2), 0.02, np.float32),
        np.full(4, -0.0, np.float32),
        np.full(3, np.nan, np.float32),
        np.full(2, -np.inf, np.float64),
        np.full((2, 2), 7, np.int64),
        np.ones(3, bool),
        np.array([1.0, 2.0], np.float32),
    ],
    ids=["f32", "negative-zero", "nan", "minus-inf", "i64", "bool", "not-uniform"],
)
def test_a_constant_prints_back_bit_for_bit_and_read_only(value: np.ndarray) -> None:
    """A module constant reads back with its dtype, shape and bits, read-only; one repeated number is
    printed once (a light model's 22 MB ConstantOfShape weights would otherwise be 22 MB of source)."""
    from loam.backends.module_classes import array_literal

    text = array_literal(value)
    back = eval(text, {"np": np})  # the module's own expression, as the module evaluates it
    assert back.dtype == value.dtype and back.shape == value.shape
    assert back.tobytes() == value.tobytes()
    assert not back.flags.writeable
    assert len(text) < 120 or value.size == 2
