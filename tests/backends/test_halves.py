"""Half-precision weights: held as halves, converted once when `Weights` is built, never per forward call.

- The tiny GPT-2 (its graph reads f32) loaded from a float16 copy of its checkpoint keeps each weight's
  stored half as a view of the file, runs forward in a loop without converting a weight, and gives
  exactly the logits of the f32 checkpoint holding the same (f16-rounded) numbers; those are within
  half-precision tolerance of onnxruntime's f32 logits (`expected.npz`).
- A graph that reads f16 weights (MatMul, Add, LayerNormalization) keeps them f16 in `Weights`, and
  forward reads only their prepared float32 forms: the halves themselves can be taken away and
  forward still matches the kernels run on the halves, converting per call.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from types import ModuleType

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from safetensors.numpy import load_file, save_file

from loam.backends import numpy_runtime
from loam.driver.options import Options
from loam.driver.pipeline import build
from loam.runtime.kernels.common import narrowed, widened
from loam.runtime.kernels.conv import kernel_conv
from loam.runtime.kernels.normalization import kernel_normalize

GPT2 = Path(__file__).parents[1] / "models" / "tiny_gpt2"


def count_conversions(module: ModuleType, monkeypatch: pytest.MonkeyPatch, weights: object) -> list[str]:
    """Calls, from now on, that convert one of `weights`' arrays: `widened` given a half one (it
    returns any other unchanged), or `_prepared`."""
    held = {a: getattr(weights, a) for a in type(weights).__slots__ if isinstance(getattr(weights, a), np.ndarray)}
    # Ids name the arrays only while they live: `held` keeps them alive (a test may take a weight
    # away from `weights`), so no array made later can take one's id.
    arrays = {id(array): a for a, array in held.items()}
    calls: list[str] = []
    for piece in ("widened", "_prepared"):
        original = getattr(module, piece, None)
        if original is None:
            continue

        def counted(
            x: object, *args: object, _original: object = original, _piece: str = piece, _held: object = held
        ) -> object:
            converts = _piece == "_prepared" or np.asarray(x).dtype.itemsize == 2
            if id(x) in arrays and converts:
                calls.append(f"{_piece}({arrays[id(x)]})")
            return _original(x, *args)  # type: ignore[operator]

        monkeypatch.setattr(module, piece, counted)
    return calls


def gpt2_call(module: ModuleType, weights: object, ids: np.ndarray) -> np.ndarray:
    names = [n for n, p in inspect.signature(module.forward).parameters.items() if p.kind is p.POSITIONAL_OR_KEYWORD][
        1:
    ]
    feeds = {"input_ids": ids, "attention_mask": np.ones(ids.shape, np.int64)}
    return module.forward(weights, *[feeds[n] for n in names]).logits


def test_half_gpt2_checkpoint_converts_once_and_matches_the_f32_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tensors = load_file(str(GPT2 / "tiny_gpt2.safetensors"))
    halves = {k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in tensors.items()}
    rounded = {k: v.astype(np.float32) if v.dtype == np.float16 else v for k, v in halves.items()}
    save_file(halves, str(tmp_path / "half.safetensors"))
    save_file(rounded, str(tmp_path / "rounded.safetensors"))

    options = Options.from_toml(GPT2 / "decoder.loam.toml")
    # The build checks the f16 header against the graph's f32 weights: F16 converts without loss.
    module = build(GPT2 / "decoder.onnxtext", checkpoints=[tmp_path / "half.safetensors"], options=options).module
    weights = module.Weights.load_file(tmp_path / "half.safetensors")
    reference = module.Weights.load((tmp_path / "rounded.safetensors").read_bytes())

    name = "transformer.h.0.attn.c_attn.weight"
    assert name in weights._stored, sorted(weights._stored)[:5]
    stored = weights.stored(name)
    assert stored.dtype == np.float16 and not stored.flags.writeable
    mapped = np.asarray(weights._source)
    assert np.shares_memory(stored, mapped)  # the half is the file's bytes, mapped, not a copy
    attrs = [a for a in type(weights).__slots__ if not a.startswith("_")]
    assert all(getattr(weights, a).dtype == np.float32 for a in attrs if getattr(weights, a).dtype.kind == "f")
    before = {a: getattr(weights, a) for a in attrs}

    ids = np.load(GPT2 / "expected.npz")["prompt_ids"]
    calls = count_conversions(module, monkeypatch, weights)
    runs = [gpt2_call(module, weights, ids) for _ in range(4)]
    assert calls == []
    assert all(getattr(weights, a) is before[a] for a in attrs)  # nothing re-made between calls
    for logits in runs:
        np.testing.assert_array_equal(logits, runs[0])
    # Converting f16 -> f32 is exact, so the half checkpoint computes what the rounded f32 one does.
    np.testing.assert_array_equal(runs[0], gpt2_call(module, reference, ids))
    # ... which is onnxruntime's f32 run, moved by the weights' rounding to half precision.
    want = np.load(GPT2 / "expected.npz")["decoder.logits.len7"]
    np.testing.assert_allclose(runs[0], want, rtol=0, atol=2e-2)
    assert np.abs(runs[0] - want).max() > 1e-6  # the rounding is real: this is not the f32 checkpoint


def f16_model() -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    inits = {
        "w": rng.standard_normal((8, 8)).astype(np.float16),
        "b": rng.standard_normal(8).astype(np.float16),
        "s": rng.standard_normal(8).astype(np.float16),
    }
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
        helper.make_node("Add", ["m", "b"], ["a"], name="add"),
        helper.make_node("LayerNormalization", ["a", "s", "b"], ["y"], name="ln", axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "halves",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [3, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [3, 8])],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


F16_OPTIONS = Options.from_mapping(
    {
        "layout": [
            {"pattern": "x", "axes": ["Batch", "In"]},
            {"pattern": "w", "axes": ["In", "Hidden"]},
            {"pattern": "b", "axes": ["Hidden"]},
            {"pattern": "s", "axes": ["Hidden"]},
            {"pattern": "y", "axes": ["Batch", "Hidden"]},
        ]
    }
)


class Gone:
    """Stands in for a half weight taken away: any use of it fails."""

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"forward read a half weight ({name})")

    def __array__(self, *args: object, **kwargs: object) -> np.ndarray:
        raise AssertionError("forward read a half weight")


def test_f16_graph_keeps_halves_and_forward_reads_only_the_prepared_forms(monkeypatch: pytest.MonkeyPatch) -> None:
    model = f16_model()
    module = build(model, options=F16_OPTIONS).module
    weights = module.Weights.embedded()
    w, b, s = (numpy_helper.to_array(i) for i in model.graph.initializer)
    assert weights.w.dtype == np.float16 and weights.b.dtype == np.float16  # halves stay half
    assert weights.w_f32.dtype == np.float32 and weights.s_f32.dtype == np.float32
    assert np.shares_memory(weights.w, np.frombuffer(module._WEIGHT_BYTES, np.uint8))  # embedded: a view

    x = np.random.default_rng(4).standard_normal((3, 8)).astype(np.float16)
    # The meaning, converting per call: the kernels run on the halves as stage 0 and the lowering define it.
    m = narrowed(np.matmul(widened(x), widened(w)), np.dtype(np.float16))
    a = narrowed(widened(m) + widened(b), np.dtype(np.float16))
    want = kernel_normalize(a, s, b, axes=(1,), epsilon=1e-5, channel_axis=-1, stash="float32", stats=0)

    calls = count_conversions(module, monkeypatch, weights)
    for attr in ("w", "b", "s"):
        setattr(weights, attr, Gone())
    for _ in range(3):
        got = module.forward(weights, x)
        assert got.dtype == np.float16
        np.testing.assert_array_equal(got, want)
    assert calls == []


@pytest.mark.parametrize("half", [np.float16, "bfloat16"])
def test_kernels_listed_as_widening_only_compute_the_same_from_prepared_operands(half: object) -> None:
    """`numpy_runtime.WIDENED_OPERANDS`: each listed operand, given as its f32 form, changes nothing."""
    import ml_dtypes

    dtype = np.dtype(ml_dtypes.bfloat16 if half == "bfloat16" else half)
    rng = np.random.default_rng(5)
    assert set(numpy_runtime.WIDENED_OPERANDS) == {"kernel_normalize", "kernel_conv"}
    x = rng.standard_normal((2, 3, 5)).astype(dtype)
    s, b = rng.standard_normal(5).astype(dtype), rng.standard_normal(5).astype(dtype)
    ln = {"axes": (2,), "epsilon": 1e-5, "channel_axis": -1, "stash": "float32", "stats": 0}
    np.testing.assert_array_equal(
        kernel_normalize(x, s, b, **ln), kernel_normalize(x, s.astype(np.float32), b.astype(np.float32), **ln)
    )
    xc = rng.standard_normal((1, 3, 6, 6)).astype(dtype)
    wc, bc = rng.standard_normal((4, 3, 3, 3)).astype(dtype), rng.standard_normal(4).astype(dtype)
    conv = {"strides": (1, 1), "pads": (1, 1, 1, 1), "dilations": (1, 1), "group": 1}
    got = kernel_conv(xc, wc.astype(np.float32), bc.astype(np.float32), **conv)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, kernel_conv(xc, wc, bc, **conv))


def test_bf16_weights_stay_bf16_views_and_are_prepared_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import ml_dtypes

    bf16 = np.dtype(ml_dtypes.bfloat16)
    rng = np.random.default_rng(6)
    w = rng.standard_normal((8, 8)).astype(bf16)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        "bf16",
        [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [3, 8])],
        [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [3, 8])],
        initializer=[helper.make_tensor("w", TensorProto.BFLOAT16, [8, 8], w.view(np.uint16).ravel().tolist())],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    layout = {
        "layout": [{"pattern": p, "axes": a} for p, a in (("x", ["B", "I"]), ("w", ["I", "H"]), ("y", ["B", "H"]))]
    }
    module = build(model, options=Options.from_mapping(layout)).module

    # A BF16 checkpoint for the graph's bf16 weight: a view of its bytes, still bf16.
    other = rng.standard_normal((8, 8)).astype(bf16)
    header = b'{"w":{"dtype":"BF16","shape":[8,8],"data_offsets":[0,128]}}'.ljust(64)  # payload aligned
    data = len(header).to_bytes(8, "little") + header + other.tobytes()
    weights = module.Weights.load(data)
    assert weights.w.dtype == bf16 and np.shares_memory(weights.w, np.frombuffer(data, np.uint8))
    np.testing.assert_array_equal(weights.w_f32, other.astype(np.float32))

    x = rng.standard_normal((3, 8)).astype(bf16)
    want = np.matmul(x.astype(np.float32), other.astype(np.float32)).astype(bf16)
    calls = count_conversions(module, monkeypatch, weights)
    weights.w = Gone()
    for _ in range(2):
        np.testing.assert_array_equal(module.forward(weights, x), want)
    assert calls == []
    # An F32 checkpoint for a bf16 weight would round it: refused.
    f32 = b'{"w":{"dtype":"F32","shape":[8,8],"data_offsets":[0,256]}}'
    with pytest.raises(module.LoadError, match="tensor 'w' is F32 in the checkpoint; the graph reads bfloat16"):
        module.Weights.load(len(f32).to_bytes(8, "little") + f32 + bytes(256))
