"""Export small JAX models as StableHLO text for the StableHLO front end (dev-time only; files committed).

Why this script exists: the StableHLO reader must read what JAX really prints, and its tests need JAX
as the oracle without JAX in CI.  So this script, run once in a venv that has JAX, writes each
model's StableHLO text (the custom form and the generic form), its weights as safetensors, fixed
inputs and JAX's outputs for them; the tests read only those files.

Needs jax (CPU), onnx, numpy and safetensors; Loam itself is not imported.  The venv it was last
run in (outside the repository):

    python3 -m venv /work/venvs/jax
    /work/venvs/jax/bin/pip install jax==0.10.2 jaxlib==0.10.2 onnx==1.23.2 numpy==2.4.6 safetensors==0.8.0
    /work/venvs/jax/bin/python scripts/export_jax_models.py          # a few seconds

Models (weights drawn from fixed seeds; every bias and LayerNorm scale is random, so a compiled
module that drops one cannot still match):

- `examples/jax_mlp/`: a 3-layer MLP, x[4,8] -> 16 -> 12 -> 3 with ReLUs, `jax.jit(...).lower(...)`
  printed with debug info (`mlp.mlir`) and in the generic form (`mlp.generic.mlir`).  Its ONNX twin
  `mlp.onnxtext` is written here with onnx.helper from the same weights (MatMul + Add + Relu, the
  weights ONNX external data pointing into `mlp.safetensors`, as examples/mlp does), so the two
  front ends can be compared kernel for kernel.
- `examples/jax_attention/`: a pre-LayerNorm attention block with a GELU MLP over token ids
  (embedding gather, sliced positions, 2 heads, causal mask, softmax), exported with
  `jax.export` for a symbolic batch `b` (`attention.mlir`, `attention.generic.mlir`).  Inputs and
  outputs for two batch sizes; the token ids include -1 (JAX wraps it to the last row) and an id
  past the table (StableHLO's gather clamps it).
- `tests/frontends/stablehlo_cnn/`: a small CNN as flax writes one, NHWC images and HWIO kernels
  (conv 3x3 SAME -> relu -> max pool 2x2 -> conv 3x3 VALID -> relu -> avg pool 2x2 (a window sum
  over 4) -> mean over H, W -> dense), its weights under `params` (`cnn.mlir`, `cnn.generic.mlir`,
  `cnn.safetensors`, `cnn.npz` with the input and JAX's output); and `windows.mlir` (both forms,
  `windows.npz`): convolutions and reduce_windows the CNN does not have (strides, padding, rhs
  dilation, feature groups, an NCHW/OIHW input, min pooling, a window over a rank-3 operand).
  Beside them `pool_grad.mlir` (both forms, `pool_grad.npz`): `jax.grad` through max pools
  (`stablehlo.select_and_scatter`, `stablehlo.pad` for SAME), NHWC and HWC, VALID, SAME and
  explicit padding, windows side by side and overlapping, inputs whole numbers so windows tie; and
  `select_and_scatter.mlir` (`.npz`), hand-written for what JAX does not print (the spec's example,
  GT, LT, a padding attribute, a non-zero init value), XLA computing its results.
- `tests/frontends/stablehlo_ops/`: one function returning one result per StableHLO op the reader
  translates (`ops.mlir`, `ops.generic.mlir`, `ops.npz` with its inputs and JAX's outputs), and a
  hand-written module for the ops and spellings JAX does not print here (`handwritten.mlir`,
  `handwritten.npz` with XLA's results for it: XLA compiles StableHLO text directly).
- `tests/frontends/stablehlo_indexing/`: one function returning one result per use of the indexing
  ops (`indexing.mlir`, `indexing.generic.mlir`, `indexing.npz` with its inputs and JAX's
  outputs): dynamic_slice and dynamic_update_slice at traced and out-of-range starts (clamped),
  take_along_axis, advanced indexing and batched gathers (vmap), scatters (`x.at[idx]` add, set,
  max, min, multiply; a batched one under vmap) with duplicate and out-of-range indices (dropped),
  a scatter window partly out of range (skipped), and sorts (jnp.sort, jnp.argsort, lax.sort of two operands, along a
  non-last axis, descending, integers, booleans) of keys with NaNs, -0.0, infinities and ties.  Run only
  this section with `python scripts/export_jax_models.py indexing`.

`export_jax_models.py SECTION ...` rewrites the sections named (mlp, attention, ops, handwritten,
cnn, pool_grad, select_and_scatter) and leaves the others' files as they are.

JAX prints absolute paths of this script in the debug locations; they are made relative to the
repository so the committed text does not depend on where it was written.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import onnx
import onnx.checker
import onnx.printer
from jax import export, lax
from jax.extend import backend
from jax.interpreters import mlir as jax_mlir
from jaxlib import xla_client
from jaxlib.mlir import ir
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from safetensors.numpy import save_file
from safetensors_layout import safetensors_offsets

ROOT = Path(__file__).resolve().parents[1]
MLP_DIR = ROOT / "examples" / "jax_mlp"
ATTENTION_DIR = ROOT / "examples" / "jax_attention"
OPS_DIR = ROOT / "tests" / "frontends" / "stablehlo_ops"
CNN_DIR = ROOT / "tests" / "frontends" / "stablehlo_cnn"
FLAX_DIR = ROOT / "tests" / "frontends" / "stablehlo_flax"
INDEXING_DIR = ROOT / "tests" / "frontends" / "stablehlo_indexing"

Params = dict[str, np.ndarray]


def relative_paths(text: str) -> str:
    return text.replace(str(ROOT) + "/", "")


def generic_form(text: str) -> str:
    """The same module printed in MLIR's generic op form, locations kept."""
    with jax_mlir.make_ir_context():
        module = ir.Module.parse(text)
        return module.operation.get_asm(print_generic_op_form=True, enable_debug_info=True)


def write_text(path: Path, text: str) -> None:
    path.write_text(relative_paths(text).rstrip("\n") + "\n", encoding="utf-8")


def uniform(rng: np.random.Generator, shape: tuple[int, ...], fan_in: int) -> np.ndarray:
    bound = 1.0 / np.sqrt(fan_in)
    return rng.uniform(-bound, bound, size=shape).astype(np.float32)


# --------------------------------------------------------------------------------------------------
# The MLP and its ONNX twin


MLP_SEED = 20250109
BATCH, IN, HIDDEN, HIDDEN2, OUT = 4, 8, 16, 12, 3

MLP_TOML = """\
# Build options for the JAX MLP: `loam build mlp.mlir --options loam.toml -o mlp.py`.
# The same rules name the axes of the ONNX twin (mlp.onnxtext): the two share every name.
checkpoint = "mlp.safetensors"

[[layout]]
pattern = "x"
axes = ["Batch", "In"]

[[layout]]
pattern = "fc1.weight"      # JAX's x @ w: stored [in, out]
axes = ["In", "Hidden"]

[[layout]]
pattern = "fc1.bias"
axes = ["Hidden"]

[[layout]]
pattern = "fc2.weight"
axes = ["Hidden", "Hidden2"]

[[layout]]
pattern = "fc2.bias"
axes = ["Hidden2"]

[[layout]]
pattern = "fc3.weight"
axes = ["Hidden2", "Out"]

[[layout]]
pattern = "fc3.bias"
axes = ["Out"]

[[layout]]
pattern = "result"
axes = ["Batch", "Out"]
"""


def mlp(params: Params, x: jax.Array) -> jax.Array:
    h = jnp.maximum(x @ params["fc1.weight"] + params["fc1.bias"], 0)
    h = jnp.maximum(h @ params["fc2.weight"] + params["fc2.bias"], 0)
    return h @ params["fc3.weight"] + params["fc3.bias"]


def mlp_params(rng: np.random.Generator) -> Params:
    return {
        "fc1.weight": uniform(rng, (IN, HIDDEN), IN),
        "fc1.bias": uniform(rng, (HIDDEN,), IN),
        "fc2.weight": uniform(rng, (HIDDEN, HIDDEN2), HIDDEN),
        "fc2.bias": uniform(rng, (HIDDEN2,), HIDDEN),
        "fc3.weight": uniform(rng, (HIDDEN2, OUT), HIDDEN2),
        "fc3.bias": uniform(rng, (OUT,), HIDDEN2),
    }


def mlp_twin(params: Params, checkpoint: Path | None) -> onnx.ModelProto:
    """The MLP as an ONNX exporter would write it: MatMul + Add (+ Relu) per layer, its weights
    (in JAX's argument order, by the same names) embedded, or external data inside `checkpoint`."""
    offsets = safetensors_offsets(checkpoint) if checkpoint is not None else {}
    initializers = []
    for name in sorted(params):  # JAX flattens a dict by sorted key: the reader's weight order
        if checkpoint is None:
            initializers.append(numpy_helper.from_array(params[name], name))
            continue
        tensor = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=params[name].shape)
        tensor.data_location = TensorProto.EXTERNAL
        offset, length = offsets[name]
        for key, value in (("location", checkpoint.name), ("offset", str(offset)), ("length", str(length))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
        initializers.append(tensor)
    nodes = []
    previous = "x"
    for layer in (1, 2, 3):
        mm, added = f"fc{layer}.mm", f"fc{layer}.out" if layer < 3 else "result"
        nodes.append(helper.make_node("MatMul", [previous, f"fc{layer}.weight"], [mm], name=f"fc{layer}.matmul"))
        nodes.append(helper.make_node("Add", [mm, f"fc{layer}.bias"], [added], name=f"fc{layer}.add"))
        previous = added
        if layer < 3:
            nodes.append(helper.make_node("Relu", [added], [f"act{layer}"], name=f"act{layer}"))
            previous = f"act{layer}"
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, IN])],
        [helper.make_tensor_value_info("result", TensorProto.FLOAT, [BATCH, OUT])],
        initializer=initializers,
    )
    return helper.make_model(
        graph, producer_name="export_jax_models", ir_version=8, opset_imports=[helper.make_opsetid("", 17)]
    )


def export_mlp() -> None:
    rng = np.random.default_rng(MLP_SEED)
    params = mlp_params(rng)
    x = rng.standard_normal((BATCH, IN)).astype(np.float32)
    lowered = jax.jit(mlp).lower(params, x)
    text = lowered.as_text(debug_info=True)
    MLP_DIR.mkdir(parents=True, exist_ok=True)
    write_text(MLP_DIR / "mlp.mlir", text)
    write_text(MLP_DIR / "mlp.generic.mlir", generic_form(text))
    checkpoint = MLP_DIR / "mlp.safetensors"
    save_file(params, str(checkpoint))
    twin = mlp_twin(params, checkpoint)
    embedded = mlp_twin(params, None)
    onnx.checker.check_model(embedded, full_check=True)
    (MLP_DIR / "mlp.onnxtext").write_text(
        "# The JAX MLP's ONNX twin (scripts/export_jax_models.py). Weights: external data in mlp.safetensors.\n"
        + onnx.printer.to_text(twin).rstrip("\n")
        + "\n",
        encoding="utf-8",
    )
    result = np.asarray(jax.jit(mlp)(params, x))
    by_hand = np.maximum(np.maximum(x @ params["fc1.weight"] + params["fc1.bias"], 0) @ params["fc2.weight"]
                         + params["fc2.bias"], 0) @ params["fc3.weight"] + params["fc3.bias"]  # fmt: skip
    np.testing.assert_allclose(result, by_hand, rtol=1e-5, atol=1e-6)
    (twin_result,) = ReferenceEvaluator(embedded).run(None, {"x": x})  # the twin computes the same
    np.testing.assert_allclose(twin_result, result, rtol=1e-5, atol=1e-6)
    np.savez(MLP_DIR / "inputs.npz", x=x)
    np.savez(MLP_DIR / "outputs.npz", result=result)
    (MLP_DIR / "loam.toml").write_text(MLP_TOML, encoding="utf-8")


# --------------------------------------------------------------------------------------------------
# The attention block (symbolic batch)


ATTENTION_SEED = 20250110
VOCAB, SEQ, MAX_POS, MODEL, HEADS, FFN = 11, 6, 8, 8, 2, 16


def layer_norm(x: jax.Array, scale: jax.Array, bias: jax.Array, eps: float = 1e-5) -> jax.Array:
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * lax.rsqrt(var + eps) * scale + bias


def attention(params: Params, tokens: jax.Array) -> jax.Array:
    batch, seq = tokens.shape
    head = MODEL // HEADS
    x = params["embed"][tokens] + params["pos"][:seq]
    h = layer_norm(x, params["ln1.scale"], params["ln1.bias"])

    def heads(w: jax.Array) -> jax.Array:
        return (h @ w).reshape(batch, seq, HEADS, head).transpose(0, 2, 1, 3)

    q, k, v = heads(params["wq"]), heads(params["wk"]), heads(params["wv"])
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / np.float32(np.sqrt(head))
    causal = jnp.arange(seq)[:, None] >= jnp.arange(seq)[None, :]
    scores = jnp.where(causal, scores, np.float32(-1e9))
    mixed = jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores, axis=-1), v)
    x = x + mixed.transpose(0, 2, 1, 3).reshape(batch, seq, MODEL) @ params["wo"]
    h2 = layer_norm(x, params["ln2.scale"], params["ln2.bias"])
    return x + jax.nn.gelu(h2 @ params["w1"] + params["b1"], approximate=True) @ params["w2"] + params["b2"]


def attention_params(rng: np.random.Generator) -> Params:
    def normal(*shape: int, scale: float = 1.0) -> np.ndarray:
        return (scale * rng.standard_normal(shape)).astype(np.float32)

    return {
        "embed": normal(VOCAB, MODEL),
        "pos": normal(MAX_POS, MODEL, scale=0.5),
        "ln1.scale": 1.0 + normal(MODEL, scale=0.2),
        "ln1.bias": normal(MODEL, scale=0.2),
        "wq": uniform(rng, (MODEL, MODEL), MODEL),
        "wk": uniform(rng, (MODEL, MODEL), MODEL),
        "wv": uniform(rng, (MODEL, MODEL), MODEL),
        "wo": uniform(rng, (MODEL, MODEL), MODEL),
        "ln2.scale": 1.0 + normal(MODEL, scale=0.2),
        "ln2.bias": normal(MODEL, scale=0.2),
        "w1": uniform(rng, (MODEL, FFN), MODEL),
        "b1": uniform(rng, (FFN,), MODEL),
        "w2": uniform(rng, (FFN, MODEL), FFN),
        "b2": uniform(rng, (MODEL,), FFN),
    }


def export_attention() -> None:
    rng = np.random.default_rng(ATTENTION_SEED)
    params = attention_params(rng)
    (b,) = export.symbolic_shape("b")
    exported = export.export(jax.jit(attention))(params, jax.ShapeDtypeStruct((b, SEQ), jnp.int32))
    text = exported.mlir_module()
    ATTENTION_DIR.mkdir(parents=True, exist_ok=True)
    write_text(ATTENTION_DIR / "attention.mlir", text)
    write_text(ATTENTION_DIR / "attention.generic.mlir", generic_form(text))
    save_file(params, str(ATTENTION_DIR / "attention.safetensors"))
    inputs: dict[str, np.ndarray] = {}
    outputs: dict[str, np.ndarray] = {}
    for batch in (2, 5):
        tokens = rng.integers(0, VOCAB, size=(batch, SEQ)).astype(np.int32)
        tokens[0, 1], tokens[-1, 2] = -1, VOCAB + 2  # wrapped by JAX, clamped by the gather
        inputs[f"tokens_{batch}"] = tokens
        outputs[f"result_{batch}"] = np.asarray(exported.call(params, tokens))
        np.testing.assert_allclose(
            outputs[f"result_{batch}"], np.asarray(jax.jit(attention)(params, tokens)), rtol=1e-6
        )
    np.savez(ATTENTION_DIR / "inputs.npz", **inputs)
    np.savez(ATTENTION_DIR / "outputs.npz", **outputs)


# --------------------------------------------------------------------------------------------------
# One result per op


OPS_SEED = 20250111


def ops(x: jax.Array, y: jax.Array, m: jax.Array, t: jax.Array) -> dict[str, jax.Array]:
    """x, y: f32[3, 4]; m: i32[3, 4]; t: a scalar i32."""
    return {
        "add_sub_div": (x + y - 1.5) / (jnp.abs(y) + 1.0),
        "min_max": jnp.minimum(x, y) * jnp.maximum(x, 0.25),
        "relu": jnp.maximum(x, 0.0),
        "power": lax.pow(jnp.abs(x) + 0.5, y),
        "neg_log": -jnp.log(jnp.abs(x) + 1.0),
        "exp_tanh": jnp.exp(-jnp.abs(x)) * jnp.tanh(y),
        "logistic": lax.logistic(x),
        "sqrt_rsqrt": jnp.sqrt(jnp.abs(x)) + lax.rsqrt(jnp.abs(y) + 1.0),
        "eq": x == 2.0,
        "ne": m != 2,
        "lt": x < y,
        "le": m <= 1,
        "gt": x > y,
        "ge": m >= 2,
        "and_or_not": ((x > 0) & ~(y > 0)) | (m == 0),
        "select": jnp.where(x > y, x, 2.0 * y),
        "select_scalar": jnp.where(t > 2, x, -x),
        "convert": m.astype(jnp.float32) * 0.5 + (3.0 * x).astype(jnp.int32).astype(jnp.float32),
        "int_divide": lax.div(m - 2, jnp.int32(2)),
        "concatenate": jnp.concatenate([x, y[:, ::2]], axis=1),
        "slice": x[1:, ::2],
        "iota": lax.broadcasted_iota(jnp.int32, (3, 4), 1) * 10 + m,
        "reduce_max": jnp.max(x, axis=1),
        "reduce_min": jnp.min(y, axis=0),
        "reduce_prod": jnp.prod(x, axis=0),
        "reduce_init": lax.reduce(x, np.float32(1.0), lax.add, (1,)),
        "any_all": jnp.any(x > 0.5, axis=1) | jnp.all(m > 0, axis=1),
        "transpose_reshape": jnp.transpose(x).reshape(2, 6),
        "broadcast_transposed": lax.broadcast_in_dim(x, (4, 2, 3), (2, 0)),
        "matmul_transposed": jnp.einsum("ij,kj->ik", x, y),
        "einsum": jnp.einsum("ij,ij->i", x, y),
        "batched": jnp.einsum("bij,bjk->bik", x.reshape(2, 3, 2), y.reshape(2, 2, 3)),
        "splat": x + jnp.full((3, 4), 0.75, jnp.float32),
        "constant": x * jnp.array([1.0, -2.0, 3.0, 0.5], jnp.float32),
        # the transcendental and rounding ops (stablehlo.* and chlo.*)
        "sine": jnp.sin(x),
        "cosine": jnp.cos(y),
        "tan": jnp.tan(x),
        "erf": jax.scipy.special.erf(x),  # chlo.erf
        "cbrt": jnp.cbrt(x),
        "atan2": jnp.arctan2(x, y),
        "atan2_axes": jnp.arctan2(x, y * 0.0),  # x = +-0: +-pi/2
        "atan2_zeros": jnp.arctan2(x * 0.0, y * 0.0),  # signed zeros: +-0 or +-pi
        "sign": jnp.sign(x * (m > 0)),
        "floor_ceil": jnp.floor(x * 2.0) + 10.0 * jnp.ceil(y * 2.0),
        "round_even": jnp.round(jnp.floor(x * 4.0) / 2.0),  # exact halves: ties to even
        "remainder": jnp.fmod(x * 3.0, y),
        "int_remainder": lax.rem(m - 2, jnp.int32(3)),
        "sinh_cosh": jnp.sinh(x) + jnp.cosh(y),  # chlo.sinh, chlo.cosh
        "asin_acos": jnp.arcsin(jnp.tanh(x)) + jnp.arccos(jnp.tanh(y)),  # chlo.asin, chlo.acos
        "atan": jnp.arctan(x),  # chlo.atan
        "square": jnp.square(x),  # chlo.square
    }


def export_ops() -> None:
    rng = np.random.default_rng(OPS_SEED)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    y = rng.standard_normal((3, 4)).astype(np.float32)
    x[0, 0] = 2.0  # `eq` has a true element
    m = rng.integers(0, 4, size=(3, 4)).astype(np.int32)
    t = np.int32(3)
    text = jax.jit(ops).lower(x, y, m, t).as_text(debug_info=True)
    OPS_DIR.mkdir(parents=True, exist_ok=True)
    write_text(OPS_DIR / "ops.mlir", text)
    write_text(OPS_DIR / "ops.generic.mlir", generic_form(text))
    results = jax.jit(ops)(x, y, m, t)
    arrays: dict[str, Any] = {"x": x, "y": y, "m": m, "t": t}
    arrays.update({f"result.{name}": np.asarray(value) for name, value in results.items()})
    np.savez(OPS_DIR / "ops.npz", **arrays)


# --------------------------------------------------------------------------------------------------
# A small CNN (NHWC, as flax writes it) and the window ops beside it


CNN_SEED = 20250112


def conv(x: jax.Array, kernel: jax.Array, padding: str) -> jax.Array:
    return lax.conv_general_dilated(x, kernel, (1, 1), padding, dimension_numbers=("NHWC", "HWIO", "NHWC"))


def cnn(params: Params, x: jax.Array) -> jax.Array:
    """x: f32[2, 12, 12, 3] -> f32[2, 10]."""
    h = jnp.maximum(conv(x, params["conv1.kernel"], "SAME") + params["conv1.bias"], 0.0)
    h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")  # flax max_pool
    h = jnp.maximum(conv(h, params["conv2.kernel"], "VALID") + params["conv2.bias"], 0.0)
    h = lax.reduce_window(h, 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") / 4.0  # flax avg_pool
    h = jnp.mean(h, axis=(1, 2))
    return h @ params["dense.kernel"] + params["dense.bias"]


def cnn_params(rng: np.random.Generator) -> Params:
    return {
        "conv1.kernel": uniform(rng, (3, 3, 3, 8), 27),
        "conv1.bias": uniform(rng, (8,), 27),
        "conv2.kernel": uniform(rng, (3, 3, 8, 16), 72),
        "conv2.bias": uniform(rng, (16,), 72),
        "dense.kernel": uniform(rng, (16, 10), 16),
        "dense.bias": uniform(rng, (10,), 16),
    }


def windows(x: jax.Array, w: jax.Array, g: jax.Array) -> dict[str, jax.Array]:
    """x: f32[2, 8, 8, 3]; w: f32[3, 3, 3, 4] (HWIO); g: f32[3, 3, 1, 6] (3 feature groups)."""
    nhwc = ("NHWC", "HWIO", "NHWC")
    return {
        "conv_strided_grouped": lax.conv_general_dilated(
            x, g, (2, 2), ((1, 0), (0, 1)), rhs_dilation=(2, 1), dimension_numbers=nhwc, feature_group_count=3
        ),
        "conv_nchw_in": lax.conv_general_dilated(
            jnp.transpose(x, (0, 3, 1, 2)),
            jnp.transpose(w, (3, 2, 0, 1)),
            (1, 2),
            "VALID",
            dimension_numbers=("NCHW", "OIHW", "NHWC"),
        ),
        "sum_same": lax.reduce_window(x, 0.0, lax.add, (1, 3, 3, 1), (1, 1, 1, 1), "SAME"),
        "max_dilated": lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 1, 2, 1), "VALID", None, (1, 2, 1, 1)),
        "min_padded": lax.reduce_window(
            x, jnp.inf, lax.min, (1, 3, 2, 1), (1, 2, 1, 1), ((0, 0), (1, 1), (0, 1), (0, 0))
        ),
        "sum_rank3": lax.reduce_window(x[0], 0.0, lax.add, (2, 2, 1), (1, 1, 1), "VALID"),
        "max_init": lax.reduce_window(x, np.float32(0.5), lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID"),
    }


def export_cnn() -> None:
    rng = np.random.default_rng(CNN_SEED)
    params = cnn_params(rng)
    x = rng.standard_normal((2, 12, 12, 3)).astype(np.float32)
    text = jax.jit(cnn).lower(params, x).as_text(debug_info=True)
    CNN_DIR.mkdir(parents=True, exist_ok=True)
    write_text(CNN_DIR / "cnn.mlir", text)
    write_text(CNN_DIR / "cnn.generic.mlir", generic_form(text))
    save_file(params, str(CNN_DIR / "cnn.safetensors"))
    np.savez(CNN_DIR / "cnn.npz", x=x, result=np.asarray(jax.jit(cnn)(params, x)))
    xs = rng.standard_normal((2, 8, 8, 3)).astype(np.float32)
    w = rng.standard_normal((3, 3, 3, 4)).astype(np.float32)
    g = rng.standard_normal((3, 3, 1, 6)).astype(np.float32)
    text = jax.jit(windows).lower(xs, w, g).as_text(debug_info=True)
    write_text(CNN_DIR / "windows.mlir", text)
    write_text(CNN_DIR / "windows.generic.mlir", generic_form(text))
    arrays: dict[str, Any] = {"x": xs, "w": w, "g": g}
    arrays.update({f"result.{k}": np.asarray(v) for k, v in jax.jit(windows)(xs, w, g).items()})
    np.savez(CNN_DIR / "windows.npz", **arrays)


# --------------------------------------------------------------------------------------------------
# The gradient of max pooling: stablehlo.select_and_scatter


POOL_GRAD_SEED = 20250113

# name -> (rank-3 operand?, window, strides, padding), the windows and strides over the spatial dims
POOL_GRAD_CASES: dict[str, tuple[bool, tuple[int, ...], tuple[int, ...], str | tuple[tuple[int, int], ...]]] = {
    "valid_2x2": (False, (2, 2), (2, 2), "VALID"),  # flax max_pool's default: windows side by side
    "valid_3x3_stride1": (False, (3, 3), (1, 1), "VALID"),  # overlapping: an element two windows pick
    "same_3x3_stride2": (False, (3, 3), (2, 2), "SAME"),  # overlapping, padded with -inf (stablehlo.pad)
    "same_2x2_stride1": (False, (2, 2), (1, 1), "SAME"),  # padded at the ends only
    "explicit_2x3": (False, (2, 3), (2, 1), ((2, 1), (1, 2))),  # uneven padding, windows mostly padding
    "rank3_same_3x2": (True, (3, 2), (2, 1), "SAME"),  # an HWC operand
}


def max_pool(x: jax.Array, window: tuple[int, ...], strides: tuple[int, ...], padding: Any, rank3: bool) -> jax.Array:
    """flax's max_pool (NHWC, or HWC) as it writes it: a reduce_window of max from -inf."""
    lead = () if rank3 else (1,)
    if not isinstance(padding, str):
        padding = (*((0, 0),) * len(lead), *padding, (0, 0))
    return lax.reduce_window(x, -jnp.inf, lax.max, (*lead, *window, 1), (*lead, *strides, 1), padding)


def pool_grad(x: jax.Array, x3: jax.Array, g: dict[str, jax.Array]) -> dict[str, jax.Array]:
    """x: f32[2, 7, 7, 3], x3: f32[7, 7, 3]; for each case the gradient of sum(max_pool(x) * g[case]) in x."""
    results = {}
    for name, (rank3, window, strides, padding) in POOL_GRAD_CASES.items():

        def loss(a: jax.Array, c: jax.Array, w: Any = (window, strides, padding, rank3)) -> jax.Array:
            return jnp.sum(max_pool(a, w[0], w[1], w[2], w[3]) * c)

        results[name] = jax.grad(loss)(x3 if rank3 else x, g[name])
    return results


def export_pool_grad() -> None:
    """`pool_grad.mlir` (both forms) and `pool_grad.npz`: the inputs (whole numbers in [-2, 2], so that
    windows hold ties and which maximum is picked matters), the cotangents and JAX's gradients."""
    rng = np.random.default_rng(POOL_GRAD_SEED)
    x = rng.integers(-2, 3, size=(2, 7, 7, 3)).astype(np.float32)
    x3 = rng.integers(-2, 3, size=(7, 7, 3)).astype(np.float32)
    g = {}
    for name, (rank3, window, strides, padding) in POOL_GRAD_CASES.items():
        pooled = jax.eval_shape(lambda a, c=(window, strides, padding, rank3): max_pool(a, *c), x3 if rank3 else x)
        g[name] = rng.standard_normal(pooled.shape).astype(np.float32)
    text = jax.jit(pool_grad).lower(x, x3, g).as_text(debug_info=True)
    assert text.count("stablehlo.select_and_scatter") == len(POOL_GRAD_CASES)
    CNN_DIR.mkdir(parents=True, exist_ok=True)
    write_text(CNN_DIR / "pool_grad.mlir", text)
    write_text(CNN_DIR / "pool_grad.generic.mlir", generic_form(text))
    arrays: dict[str, Any] = {"x": x, "x3": x3}
    arrays.update({f"g.{name}": value for name, value in g.items()})
    arrays.update({f"result.{name}": np.asarray(value) for name, value in jax.jit(pool_grad)(x, x3, g).items()})
    np.savez(CNN_DIR / "pool_grad.npz", **arrays)


def _select_and_scatter(name: str, operands: tuple[str, str, str], compare: str, attrs: str, types: str) -> str:
    """One hand-written `select_and_scatter` (its select region the compare given, its scatter an add)."""
    operand, source, init = operands
    elem = types.split("tensor<")[-1].split("x")[-1].rstrip(">)")
    return (
        f'    %{name} = "stablehlo.select_and_scatter"(%{operand}, %{source}, %{init}) <{{{attrs}}}> ({{\n'
        f"    ^bb0(%a: tensor<{elem}>, %b: tensor<{elem}>):\n"
        f"      %p = stablehlo.compare {compare} : (tensor<{elem}>, tensor<{elem}>) -> tensor<i1>\n"
        f"      stablehlo.return %p : tensor<i1>\n"
        f"    }}, {{\n"
        f"    ^bb0(%a: tensor<{elem}>, %b: tensor<{elem}>):\n"
        f"      %r = stablehlo.add %a, %b : tensor<{elem}>\n"
        f"      stablehlo.return %r : tensor<{elem}>\n"
        f"    }}) : {types}\n"
    )


SELECT_AND_SCATTER = (
    """\
// Hand-written stablehlo.select_and_scatter (scripts/export_jax_models.py): what JAX does not print,
// XLA computing the expected results: the spec's example (i64, a padding attribute), GT (the last
// maximum) with a non-zero init value, a compare of the arguments swapped (GE of (next, kept): the
// first minimum) with windows of padding alone, LT (the last minimum).
module @select_and_scatter {
  func.func public @main(%x: tensor<4x2xi64> loc("x"), %s: tensor<2x2xi64> loc("s"), %y: tensor<5x6xf32> loc("y"),
                         %g2: tensor<3x3xf32> loc("g2"), %g3: tensor<9x2xf32> loc("g3"), %g4: tensor<4x5xf32> loc("g4"))
      -> (tensor<4x2xi64> {jax.result_info = "result['spec']"},
          tensor<5x6xf32> {jax.result_info = "result['last_max']"},
          tensor<5x6xf32> {jax.result_info = "result['first_min']"},
          tensor<5x6xf32> {jax.result_info = "result['last_min']"}) {
    %zero = stablehlo.constant dense<0> : tensor<i64>
    %half = stablehlo.constant dense<5.000000e-01> : tensor<f32>
    %fzero = stablehlo.constant dense<0.000000e+00> : tensor<f32>
"""
    + _select_and_scatter(
        "0",
        ("x", "s", "zero"),
        "GE, %a, %b, SIGNED",
        "window_dimensions = array<i64: 3, 1>, window_strides = array<i64: 2, 1>,"
        " padding = dense<[[0, 1], [0, 0]]> : tensor<2x2xi64>",
        "(tensor<4x2xi64>, tensor<2x2xi64>, tensor<i64>) -> tensor<4x2xi64>",
    )
    + _select_and_scatter(
        "1",
        ("y", "g2", "half"),
        "GT, %a, %b, FLOAT",
        "window_dimensions = array<i64: 2, 3>, window_strides = array<i64: 2, 2>,"
        " padding = dense<[[1, 1], [1, 0]]> : tensor<2x2xi64>",
        "(tensor<5x6xf32>, tensor<3x3xf32>, tensor<f32>) -> tensor<5x6xf32>",
    )
    + _select_and_scatter(
        "2",
        ("y", "g3", "fzero"),
        "GE, %b, %a, FLOAT",
        "window_dimensions = array<i64: 3, 3>, window_strides = array<i64: 1, 3>,"
        " padding = dense<[[3, 3], [0, 2]]> : tensor<2x2xi64>",
        "(tensor<5x6xf32>, tensor<9x2xf32>, tensor<f32>) -> tensor<5x6xf32>",
    )
    + _select_and_scatter(
        "3",
        ("y", "g4", "fzero"),
        "LT, %a, %b, FLOAT",
        "window_dimensions = array<i64: 2, 2>, window_strides = array<i64: 1, 1>",
        "(tensor<5x6xf32>, tensor<4x5xf32>, tensor<f32>) -> tensor<5x6xf32>",
    )
    + """\
    return %0, %1, %2, %3 : tensor<4x2xi64>, tensor<5x6xf32>, tensor<5x6xf32>, tensor<5x6xf32>
  }
}
"""
)


def export_select_and_scatter() -> None:
    """The hand-written module and XLA's results for it (`select_and_scatter.mlir`, `.npz`)."""
    rng = np.random.default_rng(POOL_GRAD_SEED + 1)
    inputs = {
        "x": np.array([[1, 5], [2, 5], [3, 6], [4, 4]], dtype=np.int64),  # the spec's example
        "s": np.array([[5, 6], [7, 8]], dtype=np.int64),
        "y": rng.integers(-2, 3, size=(5, 6)).astype(np.float32),  # whole numbers: ties
        "g2": rng.standard_normal((3, 3)).astype(np.float32),
        "g3": rng.standard_normal((9, 2)).astype(np.float32),
        "g4": rng.standard_normal((4, 5)).astype(np.float32),
    }
    with jax.enable_x64(True):
        executable = backend.get_backend().compile_and_load(
            SELECT_AND_SCATTER, jax.devices()[:1], xla_client.CompileOptions()
        )
        results = executable.execute([jax.device_put(a) for a in inputs.values()])
    spec = np.array([[0, 0], [0, 0], [5, 14], [7, 0]], dtype=np.int64)  # the spec's result
    np.testing.assert_array_equal(np.asarray(results[0]), spec)
    (CNN_DIR / "select_and_scatter.mlir").write_text(SELECT_AND_SCATTER, encoding="utf-8")
    arrays: dict[str, Any] = dict(inputs)
    names = ["spec", "last_max", "first_min", "last_min"]
    arrays.update({f"result.{name}": np.asarray(value) for name, value in zip(names, results, strict=True)})
    np.savez(CNN_DIR / "select_and_scatter.npz", **arrays)


HANDWRITTEN = """\
// Hand-written StableHLO (scripts/export_jax_models.py): ops and spellings JAX 0.10 does not print
// for the models here: stablehlo.logistic, a reduce whose body is written out (its arguments
// swapped), a dot_general contracting the rhs's last dim, NE, a select in the generic form, hex
// floats (-inf, inf) in a constant, argument names in some locations only.  XLA computes the
// expected results.
module @handwritten {
  func.func public @main(%x: tensor<3x4xf32> loc("x"), %w: tensor<5x4xf32> loc("params['w']"),
                         %extra: tensor<2xf32>) -> (tensor<3x4xf32> {jax.result_info = "result['logistic']"},
                         tensor<3xf32> {jax.result_info = "result['reduce_region']"},
                         tensor<3x5xf32> {jax.result_info = "result['matmul_nk']"},
                         tensor<3x4xi1> {jax.result_info = "result['ne']"},
                         tensor<3x4xf32> {jax.result_info = "result['generic_select']"},
                         tensor<4x3xf32> {jax.result_info = "result['hex_floats']"},
                         tensor<2xf32> {jax.result_info = "result['extra']"}) {
    %0 = stablehlo.logistic %x : tensor<3x4xf32>
    %ninf = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %1 = stablehlo.reduce(%x init: %ninf) across dimensions = [1] : (tensor<3x4xf32>, tensor<f32>) -> tensor<3xf32>
     reducer(%a: tensor<f32>, %b: tensor<f32>)  {
      %m = stablehlo.maximum %b, %a : tensor<f32>
      stablehlo.return %m : tensor<f32>
    }
    %2 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [1]
           : (tensor<3x4xf32>, tensor<5x4xf32>) -> tensor<3x5xf32>
    %3 = stablehlo.compare  NE, %x, %0,  FLOAT : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xi1>
    %4 = "stablehlo.select"(%3, %x, %0) : (tensor<3x4xi1>, tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
    %5 = stablehlo.transpose %x, dims = [1, 0] : (tensor<3x4xf32>) -> tensor<4x3xf32>
    %c = stablehlo.constant dense<[[1.0, 0xFF800000, 2.0], [0x7F800000, -1.0, 0.0], [0.5, 0.25, -3.0],
                                   [4.0, -0.5, 1.5]]> : tensor<4x3xf32>
    %6 = stablehlo.minimum %5, %c : tensor<4x3xf32>
    %7 = stablehlo.abs %extra : tensor<2xf32>
    return %0, %1, %2, %3, %4, %6, %7 : tensor<3x4xf32>, tensor<3xf32>, tensor<3x5xf32>, tensor<3x4xi1>,
                                        tensor<3x4xf32>, tensor<4x3xf32>, tensor<2xf32>
  }
}
"""


def export_handwritten() -> None:
    """The hand-written module and XLA's results for it (XLA compiles StableHLO text directly)."""
    rng = np.random.default_rng(OPS_SEED + 1)
    inputs = {
        "x": rng.standard_normal((3, 4)).astype(np.float32),
        "w": rng.standard_normal((5, 4)).astype(np.float32),
        "extra": rng.standard_normal(2).astype(np.float32),
    }
    executable = backend.get_backend().compile_and_load(HANDWRITTEN, jax.devices()[:1], xla_client.CompileOptions())
    results = executable.execute([jax.device_put(a) for a in inputs.values()])
    names = ["logistic", "reduce_region", "matmul_nk", "ne", "generic_select", "hex_floats", "extra"]
    np.testing.assert_allclose(np.asarray(results[0]), 1 / (1 + np.exp(-inputs["x"])), rtol=1e-6)
    (OPS_DIR / "handwritten.mlir").write_text(HANDWRITTEN, encoding="utf-8")
    arrays: dict[str, Any] = dict(inputs)
    arrays.update({f"result.{name}": np.asarray(value) for name, value in zip(names, results, strict=True)})
    np.savez(OPS_DIR / "handwritten.npz", **arrays)


# --------------------------------------------------------------------------------------------------
# Control flow and the elementwise ops it came with


def control(x: jax.Array, i: jax.Array, k: jax.Array, bits: jax.Array) -> dict[str, jax.Array]:
    """x: f32[3, 4]; i, k: scalar i32; bits: i32[4]."""
    halving = lax.fori_loop(0, i, lambda j, v: v * 0.5 + j.astype(v.dtype), x)

    def grow(state: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        n, v = state
        return n + 1, v * 1.5 + 0.25

    steps, grown = lax.while_loop(lambda s: jnp.max(jnp.abs(s[1])) < 8.0, grow, (jnp.int32(0), x))
    nested = lax.cond(i > 1, lambda v: lax.fori_loop(0, i, lambda j, w: jnp.sin(w) + v, v), lambda v: jnp.cos(v) * k, x)
    return {
        "cond": lax.cond(x.sum() + i > 0, lambda v: v * 2, lambda v: v - 1, x),
        "switch": lax.switch(k, [lambda v: v + 1, lambda v: v * 3, lambda v: jnp.sin(v)], x),
        "fori": halving,
        "while_steps": steps,
        "while_value": grown,
        "nested": nested,
        "expm1": jnp.expm1(x * 1e-4) + jnp.expm1(x * 30.0),
        "log1p": jnp.log1p(x * 1e-5) + jnp.log1p(jnp.abs(x) * 50.0),
        "is_finite": jnp.isfinite(jnp.log(x)),
        "clamp": lax.clamp(-0.5, x, 0.5),
        "clamp_ints": lax.clamp(jnp.int32(-1), bits, jnp.full((4,), 2, jnp.int32)),
        "pad": jnp.pad(x, ((1, 2), (0, 1)), constant_values=3.0),
        "pad_interior": lax.pad(x, jnp.float32(-2.0), [(1, -1, 1), (-1, 2, 2)]),
        "reverse": jnp.flip(x, (0, 1)),
        "xor": jnp.bitwise_xor(bits, 5) + (bits > 0).astype(jnp.int32),
        "xor_bool": jnp.logical_xor(bits > 0, bits < 3),
    }


CONTROL_INPUTS = [
    {"i": 3, "k": 1, "scale": 1.0},
    {"i": 0, "k": -4, "scale": -1.0},  # the fori_loop runs no iterations; switch clamps k to branch 0
    {"i": 2, "k": 9, "scale": 0.001},  # the while_loop runs long
]

HANDWRITTEN_CASE = """\
// stablehlo.case with an index JAX never gives (lax.switch clamps it): out of range, the last branch
// runs.  XLA computes the expected results.
module @case_index {
  func.func public @main(%i: tensor<i32> loc("i"), %x: tensor<2xf32> loc("x"))
      -> (tensor<2xf32> {jax.result_info = "result"}) {
    %0 = "stablehlo.case"(%i) ({
      %a = stablehlo.negate %x : tensor<2xf32>
      stablehlo.return %a : tensor<2xf32>
    }, {
      %b = stablehlo.add %x, %x : tensor<2xf32>
      stablehlo.return %b : tensor<2xf32>
    }, {
      %c = stablehlo.multiply %x, %x : tensor<2xf32>
      stablehlo.return %c : tensor<2xf32>
    }) : (tensor<i32>) -> tensor<2xf32>
    return %0 : tensor<2xf32>
  }
}
"""


def export_control() -> None:
    rng = np.random.default_rng(OPS_SEED + 2)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    x[0, 0] = 0.0  # log(0) = -inf: not finite
    bits = np.array([-3, 0, 1, 7], np.int32)
    text = jax.jit(control).lower(x, np.int32(0), np.int32(0), bits).as_text(debug_info=True)
    write_text(OPS_DIR / "control.mlir", text)
    write_text(OPS_DIR / "control.generic.mlir", generic_form(text))
    arrays: dict[str, Any] = {"bits": bits}
    for n, case in enumerate(CONTROL_INPUTS):
        xs = (x * case["scale"]).astype(np.float32)
        i, k = np.int32(case["i"]), np.int32(case["k"])
        arrays.update({f"x.{n}": xs, f"i.{n}": i, f"k.{n}": k})
        for name, value in jax.jit(control)(xs, i, k, bits).items():
            arrays[f"result.{n}.{name}"] = np.asarray(value)
    np.savez(OPS_DIR / "control.npz", **arrays)
    (OPS_DIR / "case_index.mlir").write_text(HANDWRITTEN_CASE, encoding="utf-8")
    executable = backend.get_backend().compile_and_load(
        HANDWRITTEN_CASE, jax.devices()[:1], xla_client.CompileOptions()
    )
    x2 = np.array([1.5, -2.0], np.float32)
    cases: dict[str, Any] = {"x": x2}
    for index in (-1, 0, 1, 2, 7):
        (result,) = executable.execute([jax.device_put(np.int32(index)), jax.device_put(x2)])
        cases[f"result.{index}"] = np.asarray(result)
    np.savez(OPS_DIR / "case_index.npz", **cases)


# --------------------------------------------------------------------------------------------------
# Flax: a scan-based RNN and a transformer block


FLAX_SEED = 20261202


class Recurrent(nn.Module):
    """A GRU over the sequence forward and an LSTM over it backward (flax's nn.RNN: a lax.scan)."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        forward = nn.RNN(nn.GRUCell(features=6))(x)
        backward = nn.RNN(nn.LSTMCell(features=5), reverse=True, keep_order=True)(x)
        return jnp.concatenate([forward, backward], axis=-1)


class TransformerBlock(nn.Module):
    """Pre-LayerNorm: causal multi-head self-attention, then a GELU MLP, each with a residual."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        h = nn.LayerNorm()(x)
        mask = nn.make_causal_mask(jnp.ones(x.shape[:2]))
        x = x + nn.MultiHeadDotProductAttention(num_heads=2)(h, h, mask=mask)
        h = nn.LayerNorm()(x)
        return x + nn.Dense(16)(nn.gelu(nn.Dense(32)(h)))


def flat_params(tree: Any) -> Params:
    """A flax parameter tree as `a.b.c` names, the key paths the reader gives the weights."""
    flat = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {".".join(k.key for k in path): np.asarray(v) for path, v in flat}


def randomized(tree: Any, rng: np.random.Generator) -> Any:
    """Every leaf drawn anew (flax starts biases at 0 and scales at 1: a module dropping one still matched)."""
    return jax.tree_util.tree_map(lambda a: (rng.standard_normal(a.shape) * 0.4).astype(np.float32), tree)


def export_flax() -> None:
    rng = np.random.default_rng(FLAX_SEED)
    FLAX_DIR.mkdir(parents=True, exist_ok=True)
    rnn = Recurrent()
    x = rng.standard_normal((2, 7, 3)).astype(np.float32)
    params = randomized(rnn.init(jax.random.PRNGKey(0), x)["params"], rng)

    def run_rnn(params: Any, x: jax.Array) -> jax.Array:
        return rnn.apply({"params": params}, x)

    text = jax.jit(run_rnn).lower(params, x).as_text(debug_info=True)
    write_text(FLAX_DIR / "rnn.mlir", text)
    write_text(FLAX_DIR / "rnn.generic.mlir", generic_form(text))
    save_file(flat_params(params), str(FLAX_DIR / "rnn.safetensors"))
    np.savez(FLAX_DIR / "rnn.npz", x=x, result=np.asarray(jax.jit(run_rnn)(params, x)))

    block = TransformerBlock()
    x = rng.standard_normal((2, 5, 16)).astype(np.float32)
    params = randomized(block.init(jax.random.PRNGKey(1), x)["params"], rng)

    def run_block(params: Any, x: jax.Array) -> jax.Array:
        return block.apply({"params": params}, x)

    (b,) = export.symbolic_shape("b")
    exported = export.export(jax.jit(run_block))(params, jax.ShapeDtypeStruct((b, 5, 16), jnp.float32))
    text = exported.mlir_module()
    write_text(FLAX_DIR / "block.mlir", text)
    write_text(FLAX_DIR / "block.generic.mlir", generic_form(text))
    save_file(flat_params(params), str(FLAX_DIR / "block.safetensors"))
    arrays: dict[str, Any] = {}
    for batch in (2, 3):
        xs = rng.standard_normal((batch, 5, 16)).astype(np.float32)
        arrays[f"x.{batch}"] = xs
        arrays[f"result.{batch}"] = np.asarray(exported.call(params, xs))
    np.savez(FLAX_DIR / "block.npz", **arrays)


# --------------------------------------------------------------------------------------------------
# The indexing ops: dynamic slices, gathers, scatters, sorts


INDEXING_SEED = 20250113


def indexing(
    x: jax.Array, m: jax.Array, v: jax.Array, s: jax.Array, k: jax.Array, i: jax.Array, j: jax.Array,
    g: jax.Array, h: jax.Array, a: jax.Array, r: jax.Array, w: jax.Array,
) -> dict[str, jax.Array]:  # fmt: skip
    """x: f32[6, 5, 4]; m: f32[4, 5]; v: f32[5, 5]; s: f32[4, 6] (NaNs, -0.0, infinities, ties);
    k: i32[4, 6]; i, j: i32 scalars (1 and 7); g, h: i32[3] (gather indices, some out of range);
    a: i32[4, 2] (take_along_axis); r: i32[6, 2] (batched); w: i32[5] (scatter indices: duplicates,
    out of range)."""
    scatter_window = lax.ScatterDimensionNumbers(
        update_window_dims=(1, 2), inserted_window_dims=(), scatter_dims_to_operand_dims=(0,)
    )
    return {
        "dynamic_slice": lax.dynamic_slice_in_dim(m, i, 3, axis=0),
        "dynamic_slice_clamped": lax.dynamic_slice(m, (j, -j), (2, 3)),
        "dynamic_slice_3d": lax.dynamic_slice(x, (i, j, i - 2), (2, 3, 4)),
        "at_set_row": m.at[i].set(v[0]),
        "dynamic_update_slice": lax.dynamic_update_slice(m, v[:2, :3], (j, i - 7)),
        "take_along_axis": jnp.take_along_axis(m, a, axis=1),
        "advanced": x[g, :, h],
        "take_rows": jnp.take(m, g, axis=0, mode="clip"),
        "batched_take": jax.vmap(lambda row, t: jnp.take(row, t, axis=0, mode="clip"))(x, r),
        "batched_window": jax.vmap(lambda row, t: lax.dynamic_slice_in_dim(row, t, 2))(m, a[:, 0] * 2),
        "at_add": m.at[w].add(v),
        "at_set": m.at[w].set(v),
        "at_max": m.at[w, 1].max(v[:, 0]),
        "at_min": m.at[w].min(v),
        "at_multiply": m.at[w].multiply(v),
        "at_add_2d": m.at[w[:3], w[2:]].add(v[0, :3]),
        "window_out_of_range": lax.scatter_add(m, w[:2, None] - 1, jnp.stack([v[:2], v[2:4]]), scatter_window),
        "int_at_add": k.at[:, w[:2]].add(k[:, :2]),
        "batched_at_add": jax.vmap(lambda row, t, u: row.at[t].add(u))(m, a * 3, v[:4, :2]),
        "sort": jnp.sort(s, axis=1),
        "argsort": jnp.argsort(s, axis=1),
        "sort_two": lax.sort((s, k), dimension=1, num_keys=1),
        "sort_axis0": jnp.sort(s, axis=0),
        "argsort_descending": jnp.argsort(s, axis=1, descending=True),
        "sort_key_val": lax.sort_key_val(s, k, dimension=0),
        "sort_int": jnp.sort(k, axis=1),
        "argsort_int_descending": jnp.argsort(k, axis=0, descending=True),
        "argsort_bool": jnp.argsort(k > 0, axis=1),  # an UNSIGNED compare of i1
    }


def export_indexing() -> None:
    rng = np.random.default_rng(INDEXING_SEED)
    s = rng.standard_normal((4, 6)).astype(np.float32)
    s[0, 1], s[0, 4], s[1, 0], s[1, 5] = np.nan, np.nan, np.inf, -np.inf
    s[2, :3] = [0.0, -0.0, 0.0]
    s[3, 2] = s[3, 4] = s[3, 0]
    s[1, 2] = np.nan
    arrays: dict[str, Any] = {
        "x": rng.standard_normal((6, 5, 4)).astype(np.float32),
        "m": rng.standard_normal((4, 5)).astype(np.float32),
        "v": rng.standard_normal((5, 5)).astype(np.float32),
        "s": s,
        "k": rng.integers(-3, 4, size=(4, 6)).astype(np.int32),
        "i": np.int32(1),
        "j": np.int32(7),
        "g": np.array([5, -1, 9], np.int32),
        "h": np.array([3, 0, -9], np.int32),
        "a": np.array([[0, 4], [-1, 2], [3, 3], [1, 0]], np.int32),
        "r": rng.integers(-1, 6, size=(6, 2)).astype(np.int32),
        "w": np.array([2, 0, 9, 2, -7], np.int32),
    }
    inputs = list(arrays.values())
    text = jax.jit(indexing).lower(*inputs).as_text(debug_info=True)
    INDEXING_DIR.mkdir(parents=True, exist_ok=True)
    write_text(INDEXING_DIR / "indexing.mlir", text)
    write_text(INDEXING_DIR / "indexing.generic.mlir", generic_form(text))
    for name, value in jax.jit(indexing)(*inputs).items():
        if isinstance(value, tuple):
            arrays.update({f"result.{name}.{n}": np.asarray(part) for n, part in enumerate(value)})
        else:
            arrays[f"result.{name}"] = np.asarray(value)
    np.savez(INDEXING_DIR / "indexing.npz", **arrays)


EXPORTERS: dict[str, Callable[[], None]] = {
    "mlp": export_mlp,
    "attention": export_attention,
    "ops": export_ops,
    "handwritten": export_handwritten,
    "cnn": export_cnn,
    "pool_grad": export_pool_grad,
    "select_and_scatter": export_select_and_scatter,
    "control": export_control,
    "flax": export_flax,
    "indexing": export_indexing,
}


def main() -> int:
    """Every section, or those named (`export_jax_models.py pool_grad` rewrites that one alone)."""
    names = sys.argv[1:] or list(EXPORTERS)
    unknown = [n for n in names if n not in EXPORTERS]
    if unknown:
        print(f"unknown sections {unknown}; the sections are {', '.join(EXPORTERS)}", file=sys.stderr)
        return 2
    for name in names:
        EXPORTERS[name]()
    print(f"jax {jax.__version__}: wrote the sections {', '.join(names)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
