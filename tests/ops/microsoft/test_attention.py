"""com.microsoft RotaryEmbedding, GroupQueryAttention, MultiHeadAttention and Attention against
onnxruntime's CPU kernels, and the forms Loam refuses."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from loam.core.errors import LoamError, UnsupportedError
from loam.testing import assert_same, build_for, run_built, run_loam, run_onnxruntime
from tests.ops.microsoft.models import ms_model

RNG = np.random.default_rng(20261203)
H = 16  # onnxruntime's GQA wants head sizes that are multiples of 16
COS = RNG.standard_normal((16, H // 2)).astype(np.float32)
SIN = RNG.standard_normal((16, H // 2)).astype(np.float32)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def same(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    assert_same(run_loam(model, feeds), run_onnxruntime(model, feeds), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("form", ["BSD", "BNSH-offset", "partial"])
def test_rotary_embedding_matches_onnxruntime(form: str, interleaved: int) -> None:
    b, s, n = 2, 3, 2
    cos, sin, attrs = COS, SIN, {}
    if form == "BNSH-offset":
        x, pos = rand(b, n, s, H), np.array([5], np.int64)
    else:
        x, pos = rand(b, s, n * H), RNG.integers(0, 16, (b, s)).astype(np.int64)
    if form == "partial":  # the first 8 of each head rotated, the rest kept
        cos, sin, attrs = COS[:, :4].copy(), SIN[:, :4].copy(), {"num_heads": n, "rotary_embedding_dim": 8}
    model = ms_model(
        "RotaryEmbedding", {"x": x, "pos": pos}, {"cos": cos, "sin": sin}, interleaved=interleaved, **attrs
    )
    same(model, {"x": x, "pos": pos})


def gqa(
    b: int, s: int, past: int | None, *, heads: int = 4, kv_heads: int = 2, packed: bool = False, **attrs: object
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A GroupQueryAttention node and its feeds: batches of equal lengths, `past` keys before (None: no past)."""
    total = (past or 0) + s
    q = rand(b, s, (heads + (2 * kv_heads if packed else 0)) * H)
    inputs: dict[str, np.ndarray | None] = {"q": q, "k": None, "v": None}
    if not packed:
        inputs |= {"k": rand(b, s, kv_heads * H), "v": rand(b, s, kv_heads * H)}
    if past is not None:
        inputs |= {"pk": rand(b, kv_heads, past, H), "pv": rand(b, kv_heads, past, H)}
    else:
        inputs |= {"pk": None, "pv": None}
    inputs |= {"seqlens": np.full(b, total - 1, np.int32), "total": np.array(total, np.int32)}
    weights = {"cos": COS, "sin": SIN} if attrs.get("do_rotary") else {}
    model = ms_model(
        "GroupQueryAttention",
        inputs,
        weights,
        outputs=("y", "present_key", "present_value"),
        num_heads=heads,
        kv_num_heads=kv_heads,
        **attrs,
    )
    return model, {k: v for k, v in inputs.items() if v is not None}


@pytest.mark.parametrize(
    ("b", "s", "past"),
    [(2, 3, None), (2, 1, 5), (1, 3, 4)],
    ids=["prefill", "decode", "prompt-after-past"],
)
@pytest.mark.parametrize(("rotary", "interleaved"), [(0, 0), (1, 0), (1, 1)])
def test_group_query_attention_matches_onnxruntime(
    b: int, s: int, past: int | None, rotary: int, interleaved: int
) -> None:
    model, feeds = gqa(b, s, past, do_rotary=rotary, rotary_interleaved=interleaved)
    same(model, feeds)


@pytest.mark.parametrize(
    "attrs",
    [
        {"packed": True},
        {"kv_heads": 4},
        {"softcap": 2.0},
        {"smooth_softmax": 1},
        {"local_window_size": 2},
        {"scale": 0.3},
    ],
    ids=["packed", "mha-heads", "softcap", "smooth", "window", "scale"],
)
def test_group_query_attention_options_match_onnxruntime(attrs: dict[str, object]) -> None:
    model, feeds = gqa(1, 3, 4, **attrs)
    same(model, feeds)


def test_group_query_attention_past_length_is_symbolic() -> None:
    """One build serves every past length: present's sequence axis is past + new."""
    model, _ = gqa(1, 1, 2)
    for value in model.graph.input:
        if value.name in ("pk", "pv"):
            value.type.tensor_type.shape.dim[2].dim_param = "past"
    built = build_for(model)
    for past in (0, 3, 7):
        model_p, feeds = gqa(1, 1, past)
        assert_same(run_built(built, feeds), run_onnxruntime(model_p, feeds), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("bad", ["total", "padded"])
def test_group_query_attention_refuses_lengths_other_than_past_plus_new(bad: str) -> None:
    """A total length other than past + new (a shared buffer), or batches of unequal lengths (padding),
    stop the run naming the value that disagrees."""
    model, feeds = gqa(2, 1, 5)
    if bad == "total":
        feeds["total"] = np.array(9, np.int32)
        name = "total_sequence_length"
    else:
        feeds["seqlens"] = np.array([5, 3], np.int32)
        name = "seqlens_k_min_plus_1"
    built = build_for(model)
    with pytest.raises(built.module.ShapeError, match=f"y/{name}"):
        run_built(built, feeds)


def mha(
    b: int,
    s: int,
    past: int | None,
    *,
    bias: bool = False,
    mask: str | None = None,
    attn_bias: bool = False,
    **attrs: object,
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    n = 2
    total = (past or 0) + s
    inputs: dict[str, np.ndarray | None] = {"q": rand(b, s, n * H), "k": rand(b, s, n * H), "v": rand(b, s, n * H)}
    inputs["bias"] = rand(3 * n * H) if bias else None
    if mask == "2d":
        m = np.ones((b, total), np.int32)
        m[0, -2:] = 0
        inputs["mask"] = m
    elif mask == "1d":
        inputs["mask"] = np.array([total - 1] + [total] * (b - 1), np.int32)
    else:
        inputs["mask"] = None
    inputs["attn_bias"] = rand(1, n, s, total) if attn_bias else None
    if past is not None:
        inputs |= {"pk": rand(b, n, past, H), "pv": rand(b, n, past, H)}
    outputs = ("y", "present_key", "present_value") if past is not None else ("y",)
    model = ms_model("MultiHeadAttention", inputs, outputs=outputs, num_heads=n, **attrs)
    return model, {k: v for k, v in inputs.items() if v is not None}


@pytest.mark.parametrize(
    ("past", "options"),
    [
        (None, {}),
        (None, {"bias": True, "mask": "2d"}),
        (None, {"mask": "1d", "scale": 0.2}),
        (None, {"attn_bias": True, "unidirectional": 1}),
        (3, {"mask": "2d", "unidirectional": 1, "mask_filter_value": -1000.0}),
        (3, {"bias": True, "attn_bias": True}),
    ],
    ids=["plain", "bias-2d-mask", "1d-mask-scale", "attention-bias-causal", "past-mask-causal", "past-bias"],
)
def test_multi_head_attention_matches_onnxruntime(past: int | None, options: dict[str, object]) -> None:
    model, feeds = mha(2, 3, past, **options)  # type: ignore[arg-type]
    same(model, feeds)


def attention(
    b: int, s: int, past: int | None, *, mask: str | None = None, sizes: list[int] | None = None, **attrs: object
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    n, d_in = 2, 24
    total = (past or 0) + s
    widths = sizes or [n * H] * 3
    x = rand(b, s, d_in)
    inputs: dict[str, np.ndarray | None] = {"x": x}
    weights = {"w": rand(d_in, sum(widths)), "bias": rand(sum(widths))}
    if mask == "2d":
        m = np.ones((b, total), np.int32)
        m[-1, -1] = 0
        inputs["mask"] = m
    elif mask == "1d":
        inputs["mask"] = np.array([total] * (b - 1) + [total - 2], np.int32)
    if past is not None:
        inputs.setdefault("mask", None)
        inputs["past"] = rand(2, b, n, past, H)
    outputs = ("y", "present") if past is not None else ("y",)
    extra = {"qkv_hidden_sizes": sizes} if sizes else {}
    model = ms_model("Attention", inputs, weights, outputs=outputs, num_heads=n, **extra, **attrs)
    # ms_model puts initializers after the graph inputs; Attention reads (input, weights, bias, mask, past)
    node = model.graph.node[0]
    names = ["x", "w", "bias", "mask" if inputs.get("mask") is not None else ""]
    if past is not None:
        names.append("past")
    del node.input[:]
    node.input.extend(names)
    return model, {k: v for k, v in inputs.items() if v is not None}


@pytest.mark.parametrize(
    ("past", "options"),
    [
        (None, {}),
        (None, {"mask": "1d"}),
        (None, {"mask": "2d", "sizes": [32, 32, 16]}),
        (3, {"mask": "2d", "unidirectional": 1}),
        (0, {"mask": "2d", "unidirectional": 1}),
    ],
    ids=["bert", "bert-1d-mask", "qkv-sizes", "gpt2-decode", "gpt2-prompt"],
)
def test_attention_matches_onnxruntime(past: int | None, options: dict[str, object]) -> None:
    model, feeds = attention(2, 3, past, **options)  # type: ignore[arg-type]
    same(model, feeds)


@pytest.mark.parametrize(
    ("op", "attrs", "message"),
    [
        ("RotaryEmbedding", {"is_packed_batching": 1}, "is_packed_batching"),
        ("RotaryEmbedding", {"bogus": 1}, "'bogus'"),
        ("GroupQueryAttention", {"num_heads": 4, "kv_num_heads": 2, "qk_output": 1}, "qk_output"),
        ("Attention", {"num_heads": 2, "past_present_share_buffer": 1}, "past_present_share_buffer"),
        ("Attention", {"num_heads": 2, "do_rotary": 1}, "do_rotary"),
    ],
)
def test_refusals_name_the_node_and_attribute(op: str, attrs: dict[str, object], message: str) -> None:
    x = rand(1, 2, 2 * H)
    if op == "RotaryEmbedding":
        inputs = {"x": x, "pos": np.zeros((1, 2), np.int64)}
        weights = {"cos": COS, "sin": SIN}
    elif op == "GroupQueryAttention":
        x = rand(1, 2, 4 * H)
        inputs = {"q": x, "k": rand(1, 2, 2 * H), "v": rand(1, 2, 2 * H)}
        inputs |= {"seqlens": np.array([1], np.int32), "total": np.array(2, np.int32)}
        weights = {}
    else:
        inputs, weights = {"x": x}, {"w": rand(2 * H, 6 * H)}
    model = ms_model(op, inputs, weights, **attrs)
    model.graph.node[0].name = "the_node"
    with pytest.raises((UnsupportedError, LoamError), match=f"{op} node 'the_node'.*{message}"):
        run_loam(model, inputs)


def test_multi_head_attention_refuses_packed_qkv() -> None:
    q = rand(1, 2, 2, 3, H)
    model = ms_model("MultiHeadAttention", {"q": q}, num_heads=2)
    with pytest.raises(UnsupportedError, match=r"MultiHeadAttention node .*packed QKV"):
        run_loam(model, {"q": q})


# ---------------------------------------------------------------------------------------------
# Query rows whose every key is masked: onnxruntime's CPU kernels add mask_filter_value at a padded
# key and the float32 lowest, written over it, at a key after the query (unidirectional), then any
# attention_bias; such a row is a softmax over those large negatives, never refused.
# ---------------------------------------------------------------------------------------------

LOWEST = float(np.finfo(np.float32).min)
B2, S4 = 2, 4


def _masked_feeds(kind: str) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(mask, attention bias [B, N, S, T]) of one masking case."""
    if kind == "left-padding":  # batch 0's first two keys padded: its first two rows see no key
        mask = np.ones((B2, S4), np.int32)
        mask[0, :2] = 0
        return mask, None
    if kind == "row-all-padded":
        mask = np.ones((B2, S4), np.int32)
        mask[1] = 0
        return mask, None
    if kind == "length-0":
        return np.array([0, S4], np.int32), None
    bias = rand(B2, 2, S4, S4)
    value = {"bias-ninf": -np.inf, "bias-big": -1e30, "bias-lowest": LOWEST, "bias-10000": -10000.0}[kind]
    bias[0, :, 1, :] = value  # one whole query row
    bias[1, :, :, 2] = value  # one key of every row
    return None, bias


MASKED = ["left-padding", "row-all-padded", "length-0", "bias-ninf", "bias-big", "bias-lowest", "bias-10000"]
# mask_filter_value applies to a mask: the attention_bias kinds run with the default only.
MASKED_CASES = [
    pytest.param(kind, value, id=f"{kind}-{name}")
    for kind in MASKED
    for value, name in ((None, "default"), (float("-inf"), "ninf"), (LOWEST, "lowest"))
    if value is None or not kind.startswith("bias-")
]


def _same_with_nans(model: onnx.ModelProto, feeds: dict[str, np.ndarray], padded_row: bool) -> None:
    """Loam's numbers are onnxruntime's, NaN where onnxruntime's are (a row of -inf scores).

    A `padded_row` (every key of a row at scores - 10000) agrees to float32's rounding at 10000 (an
    ulp of 1e-3): one dot product summed in another order can round the other way there.  Elsewhere
    the tolerance is relative to the output's largest magnitude: an element that is a near-cancelling
    sum of values near 7 (onnxruntime's CPU kernels take other exp and sum paths on other CPUs) keeps
    no more digits than those values do."""
    rtol, atol = (2e-3, 5e-4) if padded_row else (1e-4, 1e-5)
    for got, want in zip(run_loam(model, feeds), run_onnxruntime(model, feeds), strict=True):
        finite = np.abs(want[np.isfinite(want)])
        scale = max(1.0, float(finite.max())) if finite.size else 1.0
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol * scale)


@pytest.mark.parametrize("unidirectional", [0, 1])
@pytest.mark.parametrize(("kind", "filter_value"), MASKED_CASES)
def test_attention_rows_without_a_key_match_onnxruntime(kind: str, unidirectional: int, filter_value: float) -> None:
    mask, bias = _masked_feeds(kind)
    n, d_in = 2, 24
    inputs: dict[str, np.ndarray] = {"x": rand(B2, S4, d_in)}
    weights = {"w": rand(d_in, 3 * n * H), "bias": rand(3 * n * H)}
    names = ["x", "w", "bias", "mask" if mask is not None else ""]
    if mask is not None:
        inputs["mask"] = mask
    if bias is not None:
        inputs["attention_bias"] = bias
        names += ["", "attention_bias"]
    attrs = {} if filter_value is None else {"mask_filter_value": filter_value}
    model = ms_model("Attention", inputs, weights, num_heads=n, unidirectional=unidirectional, **attrs)
    del model.graph.node[0].input[:]
    model.graph.node[0].input.extend(names)
    _same_with_nans(model, inputs, mask is not None and filter_value is None)


@pytest.mark.parametrize("unidirectional", [0, 1])
@pytest.mark.parametrize(("kind", "filter_value"), MASKED_CASES)
def test_multi_head_attention_rows_without_a_key_match_onnxruntime(
    kind: str, unidirectional: int, filter_value: float
) -> None:
    mask, bias = _masked_feeds(kind)
    inputs = {"q": rand(B2, S4, 2 * H), "k": rand(B2, S4, 2 * H), "v": rand(B2, S4, 2 * H), "bias": None}
    inputs |= {"mask": mask, "attention_bias": bias}
    while inputs and next(reversed(inputs.values())) is None:
        inputs.popitem()
    attrs = {} if filter_value is None else {"mask_filter_value": filter_value}
    model = ms_model("MultiHeadAttention", inputs, num_heads=2, unidirectional=unidirectional, **attrs)
    feeds = {k: v for k, v in inputs.items() if v is not None}
    _same_with_nans(model, feeds, mask is not None and filter_value is None)
