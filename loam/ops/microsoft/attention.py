"""com.microsoft's attention family: RotaryEmbedding, GroupQueryAttention, MultiHeadAttention, Attention.

Each is written as a body of ONNX operators before import (`loam.ops.microsoft.body`), so the kernels
are the ones those operators lower to (matmul, zip, softmax, concat, permute, regroup, gather) and
the WGSL backend runs them too.  The bodies restate onnxruntime's CPU kernels:

- RotaryEmbedding: input [B, S, hidden] (heads of `num_heads`, or of 2 * cos_cache's second extent)
  or [B, N, S, H]; position_ids [B, S], or one offset (positions offset + s); the first
  `rotary_embedding_dim` (else 2 * cos_cache's second extent) of each head rotated, the rest kept.
- The attentions: scores = scale Q K^T (scale 1 / sqrt(head size) unless given), GroupQueryAttention's
  softcap (softcap tanh(scores / softcap)), plus the masks, softmax (GroupQueryAttention's smooth
  softmax: one more logit 0), times V.  Query head n reads key/value head n / (num_heads /
  kv_num_heads): the body groups the heads as [B, kv heads, group, S, H] and never copies K or V.

Run-time sequence lengths.  present_key's sequence axis is past + new: a Concat of past_key and the
new keys, so its extent is the polynomial P + S over the inputs' symbols, known to the build.
GroupQueryAttention's total_sequence_length and seqlens_k are values only the run knows; onnxruntime
reads them to place the new keys (at seqlens_k[b] + 1 - S in batch b) and to size present (max of
past and total).  The body places the new keys after the whole past buffer, which is the same only
where every batch's total length is P + S (no padding, no buffer shared between past and present).
So the body makes each of total_sequence_length, max(seqlens_k) + 1 and min(seqlens_k) + 1 the length
of a run-time zero vector (ConstantOfShape: a length bound when that node has run,
`NodeInfo.result_length`) that it adds along the key axis: stage 0 owes each equal to P + S, and the
run checks it right there, stopping with a ShapeError naming the value (`NODE/total_sequence_length`,
`NODE/seqlens_k_max_plus_1`, ...) and both lengths.  Right or left padding, a shared KV buffer and
batches of unequal lengths therefore never give wrong numbers: they stop the run.
"""

from __future__ import annotations

from onnx import TensorProto

from loam.ops.base import NodeInfo, OpRule, float_attr, int_attr
from loam.ops.microsoft.body import Body, BodyRule

INT64_MAX = 2**63 - 1
LOWEST = -3.4028234663852886e38
"""numpy.finfo(numpy.float32).min, the float32 lowest, as a Python float."""
KERNELS = ("kernel.matmul", "kernel.zip", "kernel.softmax", "kernel.concat", "kernel.permute", "kernel.regroup")


def _require_f32(node: NodeInfo, body: Body, k: int, what: str) -> None:
    elem = body.elem(k)
    if elem is not None and elem != TensorProto.FLOAT:
        raise node.unsupported(f"{what} has ONNX element type {elem}; Loam writes this operator for float32 only")


def _refuse_inputs(node: NodeInfo, body: Body, names: dict[int, str]) -> None:
    for k, name in names.items():
        if body.input(k) is not None:
            raise node.unsupported(f"input '{name}' is not supported")


def _refuse_outputs(node: NodeInfo, body: Body, names: dict[int, str]) -> None:
    for k, name in names.items():
        if body.output(k) is not None:
            raise node.unsupported(f"output '{name}' is not supported")


def rotate(body: Body, x: str, cos: str, sin: str, cache: str, interleaved: bool, hint: str) -> str:
    """`x` (rank 4, heads on the last axis) with its first 2h elements of each head rotated, h being
    `cache`'s second extent; `cos` and `sin` ([..., h]) broadcast against x[..., :h].

    Halves (x1, x2): (x1 cos - x2 sin, x2 cos + x1 sin); interleaved pairs the even and odd elements.
    """
    b = body
    half = b.op("Slice", [b.op("Shape", [cache], f"{hint}_cache_shape"), b.ints([1]), b.ints([2])], f"{hint}_half")
    rot = b.op("Mul", [half, b.ints([2], "two")], f"{hint}_dim")
    axis = b.ints([-1], "axes")
    zero = b.ints([0], "zero")
    if interleaved:
        two = b.ints([2], "step")
        first = b.op("Slice", [x, zero, rot, axis, two], f"{hint}_even")
        second = b.op("Slice", [x, b.ints([1], "one"), rot, axis, two], f"{hint}_odd")
    else:
        first = b.op("Slice", [x, zero, half, axis], f"{hint}_x1")
        second = b.op("Slice", [x, half, rot, axis], f"{hint}_x2")
    mul = lambda a, c, h: b.op("Mul", [a, c], h)  # noqa: E731
    out1 = b.op("Sub", [mul(first, cos, f"{hint}_x1_cos"), mul(second, sin, f"{hint}_x2_sin")], f"{hint}_out1")
    out2 = b.op("Add", [mul(second, cos, f"{hint}_x2_cos"), mul(first, sin, f"{hint}_x1_sin")], f"{hint}_out2")
    if interleaved:
        pairs = b.op("Concat", [b.unsqueeze(out1, [-1]), b.unsqueeze(out2, [-1])], f"{hint}_pairs", axis=-1)
        rotated = b.reshape(pairs, [0, 0, 0, -1], f"{hint}_rotated")
    else:
        rotated = b.op("Concat", [out1, out2], f"{hint}_rotated", axis=-1)
    kept = b.op("Slice", [x, rot, b.ints([INT64_MAX], "end"), axis], f"{hint}_kept")
    return b.op("Concat", [rotated, kept], hint, axis=-1)


def _attend(
    body: Body,
    q5: str,
    k5: str,
    v5: str,
    masks: list[str],
    scale: float,
    softcap: float = 0.0,
    smooth: bool = False,
) -> str:
    """softmax(scale q k^T [softcapped] + masks) v over [B, G, R, S, H] queries and [B, G, 1, T, H]
    keys and values; the masks broadcast against the [B, G, R, S, T] scores."""
    b = body
    scores = b.op("MatMul", [q5, b.transpose(k5, [0, 1, 2, 4, 3], "key_T")], "QK")
    if scale:
        factor = b.const(scale, "scale")
    else:
        head = b.op("Cast", [b.extent(q5, 4, "head_size")], "head_size_f", to=TensorProto.FLOAT)
        factor = b.op("Reciprocal", [b.op("Sqrt", [head], "sqrt_head_size")], "scale")
    scores = b.op("Mul", [scores, factor], "scaled")
    if softcap > 0:
        cap = b.const(softcap, "softcap")
        scores = b.op("Mul", [b.op("Tanh", [b.op("Div", [scores, cap], "capped")], "tanh"), cap], "softcapped")
    unmasked = scores
    for mask in masks:
        scores = b.op("Add", [scores, mask], "masked")
    if smooth:
        zero = b.op("Mul", [b.slice(unmasked, 0, 1, -1, "first_score"), b.const(0.0, "zero_f")], "sink")
        probs = b.op("Softmax", [b.op("Concat", [scores, zero], "with_sink", axis=-1)], "Softmax", axis=-1)
        probs = b.slice(probs, 0, -1, -1, "probs")
    else:
        probs = b.op("Softmax", [scores], "probs", axis=-1)
    return b.op("MatMul", [probs, v5], "attended")


def _lengths_owed(body: Body, t: str, lengths: list[tuple[str, str]]) -> str:
    """A [1] zero that owes each run-time int value of `lengths` ([1] or scalar, with its hint) equal
    to the key count `t` (see the module docstring), to be added to the scores.

    Each value becomes the length of a zero vector (ConstantOfShape: a length the run binds); so does
    `t` itself, passed through a product with one of the values so the build cannot fold it (a number
    meeting a run-time length would stop the build).  Adding the vectors owes their lengths equal.
    """
    b = body
    vectors = []
    for value, hint in lengths:
        count = b.op("Cast", [value], f"{hint}_i64", to=TensorProto.INT64)
        vectors.append((b.reshape(count, [1], f"{hint}_shape"), hint))
    hidden = b.op("Add", [t, b.op("Mul", [vectors[0][0], b.ints([0], "zero")], "unfolded")], "key_length_value")
    total = b.op("ConstantOfShape", [b.reshape(hidden, [1], "key_length_shape")], "key_length")
    for shape, hint in vectors:
        total = b.op("Add", [total, b.op("ConstantOfShape", [shape], hint)], f"{hint}_owed")
    return b.op("ReduceSum", [total], "lengths_owed", keepdims=1)


def _heads(body: Body, x: str, heads: int, hint: str) -> str:
    """[B, S, heads * H] as [B, heads, S, H]."""
    return body.transpose(body.reshape(x, [0, 0, heads, -1], f"{hint}_BSNH"), [0, 2, 1, 3], f"{hint}_BNSH")


def _merge(body: Body, out5: str, out: str) -> str:
    """[B, G, R, S, H] as [B, S, G * R * H], written to `out`."""
    return body.reshape(body.transpose(out5, [0, 3, 1, 2, 4], "output_BSGRH"), [0, 0, -1], "output", out)


def _causal(body: Body, s: str, t: str, window: int, fill: str, hint: str = "causal", seen: str | None = None) -> str:
    """[S, T]: 0 (or `seen`, broadcast against it) where key j may be seen by query i (j <= T - S + i,
    and, where window > 0, the window keys up to it: j > T - S + i - window, as onnxruntime 1.32's CPU
    kernel counts), `fill` elsewhere."""
    b = body
    one = b.const(1, "one_i", dtype="int64")
    zero = b.const(0, "zero_i", dtype="int64")
    i = b.unsqueeze(b.op("Range", [zero, s, one], "query_pos"), [1])
    j = b.op("Range", [zero, t, one], "key_pos")
    last = b.op("Add", [i, b.op("Sub", [t, s], "past_length")], "last_key")
    allowed = b.op("Not", [b.op("Greater", [j, last], "after")], "not_after")
    if window > 0:
        first = b.op("Sub", [last, b.const(window - 1, "window", dtype="int64")], "first_key")
        allowed = b.op("And", [allowed, b.op("Not", [b.op("Less", [j, first], "before")], "not_before")], "in_window")
    return b.op("Where", [allowed, seen if seen is not None else b.const(0.0, "zero_f"), fill], hint)


def _mask(body: Body, padding: str | None, causal: bool, s: str, t: str) -> list[str]:
    """The additive mask onnxruntime's CPU Attention and MultiHeadAttention add to the scaled scores
    (before any attention_bias): mask_filter_value at a padded key (`padding`, [B, 1, 1, 1, T]), and,
    unidirectional, the float32 lowest (-3.4028235e38) at a key after the query, written over the
    padding's value, not added to it.

    So a query row whose every key is padded sees its keys up to itself at scores + mask_filter_value
    and the later ones at the lowest: softmax over the first as if unpadded (mask_filter_value -10000)
    or even weights over the later ones (mask_filter_value below the lowest's scores, -inf)."""
    if not causal:
        return [padding] if padding is not None else []
    b = body
    return [_causal(b, s, t, 0, b.const(LOWEST, "causal_fill"), "attention_mask", padding)]


class RotaryEmbeddingRule(BodyRule):
    """com.microsoft RotaryEmbedding (onnxruntime's CPU kernel)."""

    op_types = ("RotaryEmbedding",)
    attributes = frozenset({"interleaved", "num_heads", "rotary_embedding_dim", "scale", "is_packed_batching"})
    kernels = ("kernel.gather", "kernel.zip", "kernel.concat", "kernel.regroup")
    limitations = (
        "float32; is_packed_batching refused; the input's rank must be known to ONNX's shape inference, and "
        "for a 3-D input without num_heads, cos_cache's second extent; scale is read but not used, as on the CPU"
    )

    def write(self, node: NodeInfo, body: Body) -> None:
        b = body
        if int_attr(node, "is_packed_batching", 0, (0, 1)):
            raise node.unsupported("attribute 'is_packed_batching' 1 is not supported")
        interleaved = bool(int_attr(node, "interleaved", 0, (0, 1)))
        heads = int_attr(node, "num_heads", 0)
        rot_dim = int_attr(node, "rotary_embedding_dim", 0)
        float_attr(node, "scale", 1.0)
        if rot_dim > 0 and heads <= 0:
            raise node.fail("num_heads must be given where rotary_embedding_dim is")
        _require_f32(node, b, 0, "the input")
        x, pos, cos, sin = (b.input(k) for k in range(4))
        out = b.output(0)
        if x is None or pos is None or cos is None or sin is None or out is None:
            raise node.fail("takes input, position_ids, cos_cache and sin_cache and gives one output")
        shape, pos_shape = b.shape(0), b.shape(1)
        if shape is None or len(shape) not in (3, 4):
            raise node.unsupported(
                f"the input's rank must be 3 or 4 and known to ONNX's shape inference, got {shape and len(shape)}"
            )
        if pos_shape is None:
            raise node.unsupported("position_ids' rank must be known to ONNX's shape inference")
        if rot_dim > 0:  # onnxruntime takes the cache's second extent as rot_dim / 2; the body reads the cache
            cos = b.slice(cos, 0, rot_dim // 2, 1, "cos_cache_rot")
            sin = b.slice(sin, 0, rot_dim // 2, 1, "sin_cache_rot")
        transposed = len(shape) == 4
        if transposed:
            x4 = x
        elif heads > 0:
            x4 = b.reshape(x, [0, 0, heads, -1], "BSNH")
        else:
            cache = b.shape(2)
            if cache is None or len(cache) != 2 or not isinstance(cache[1], int):
                raise node.unsupported("without num_heads, cos_cache's second extent must be known to the build")
            x4 = b.reshape(x, [0, 0, -1, 2 * cache[1]], "BSNH")
        if len(pos_shape) == 2:  # [B, S] -> cos [B, S, h]
            positions = pos
            lead = [1] if transposed else [2]
        else:  # one offset: positions offset + s, cos [S, h]
            offset = b.reshape(pos, [], "offset")
            seq = b.extent(x, 2 if transposed else 1, "sequence_length")
            steps = b.op("Range", [b.const(0, "zero_i"), seq, b.const(1, "one_i")], "steps")
            positions = b.op("Add", [offset, steps], "positions")
            lead = [] if transposed else [1]
        cos_rows = b.op("Gather", [cos, positions], "cos", axis=0)
        sin_rows = b.op("Gather", [sin, positions], "sin", axis=0)
        if lead:
            cos_rows, sin_rows = b.unsqueeze(cos_rows, lead, "cos_rows"), b.unsqueeze(sin_rows, lead, "sin_rows")
        y = rotate(b, x4, cos_rows, sin_rows, cos, interleaved, "rotated")
        if transposed:
            b.op("Identity", [y], "output", out)
        else:
            b.op("Reshape", [y, b.op("Shape", [x], "input_shape")], "output", out)


class GroupQueryAttentionRule(BodyRule):
    """com.microsoft GroupQueryAttention (onnxruntime's CPU kernel), batches of equal lengths."""

    op_types = ("GroupQueryAttention",)
    attributes = frozenset(
        {
            "num_heads",
            "kv_num_heads",
            "scale",
            "softcap",
            "do_rotary",
            "rotary_interleaved",
            "local_window_size",
            "smooth_softmax",
            "qk_output",
        }
    )
    kernels = (*KERNELS, "kernel.gather", "kernel.constant", "kernel.reduce")
    limitations = (
        "float32; every batch's total length (seqlens_k + 1) and total_sequence_length must be past + new, checked "
        "at run time: right/left padding and a KV buffer shared by past and present stop the run; position_ids, "
        "attention_bias, head_sink and the qk output refused"
    )

    def write(self, node: NodeInfo, body: Body) -> None:
        b = body
        heads = int_attr(node, "num_heads", 0)
        kv_heads = int_attr(node, "kv_num_heads", 0)
        if heads <= 0 or kv_heads <= 0 or heads % kv_heads:
            raise node.fail(f"num_heads ({heads}) must be a positive multiple of kv_num_heads ({kv_heads})")
        group = heads // kv_heads
        scale = float_attr(node, "scale", 0.0)
        softcap = float_attr(node, "softcap", 0.0)
        rotary = bool(int_attr(node, "do_rotary", 0, (0, 1)))
        interleaved = bool(int_attr(node, "rotary_interleaved", 0, (0, 1)))
        window = int_attr(node, "local_window_size", -1)
        smooth = bool(int_attr(node, "smooth_softmax", 0, (0, 1)))
        if int_attr(node, "qk_output", 0):
            raise node.unsupported("attribute 'qk_output' other than 0 is not supported")
        _refuse_inputs(node, b, {9: "position_ids", 10: "attention_bias", 11: "head_sink"})
        _refuse_outputs(node, b, {3: "output_qk"})
        _require_f32(node, b, 0, "query")
        query, key, value, past_k, past_v, seqlens, total = (b.input(k) for k in range(7))
        out = b.output(0)
        if query is None or seqlens is None or total is None or out is None:
            raise node.fail("needs query, seqlens_k and total_sequence_length, and gives output")
        if (past_k is None) != (past_v is None):
            raise node.fail("takes past_key and past_value together")
        if key is None:  # packed [B, S, (N + 2 Nkv) H]
            if value is not None:
                raise node.fail("takes value only with key")
            qkv = b.reshape(query, [0, 0, heads + 2 * kv_heads, -1], "QKV_BSNH")
            q = b.slice(qkv, 0, heads, 2, "Q_BSNH")
            k = b.slice(qkv, heads, heads + kv_heads, 2, "K_BSNH")
            v = b.slice(qkv, heads + kv_heads, heads + 2 * kv_heads, 2, "V_BSNH")
        else:
            if value is None:
                raise node.fail("takes value with key")
            q = b.reshape(query, [0, 0, heads, -1], "Q_BSNH")
            k = b.reshape(key, [0, 0, kv_heads, -1], "K_BSNH")
            v = b.reshape(value, [0, 0, kv_heads, -1], "V_BSNH")
        seq = b.extent(query, 1, "sequence_length")
        if rotary:
            cos, sin = b.input(7), b.input(8)
            if cos is None or sin is None:
                raise node.fail("do_rotary 1 needs cos_cache and sin_cache")
            # onnxruntime's positions: seqlens_k[b] + 1 - S + s (s for the prompt, the same here).
            one = b.const(1, "one_i")
            start = b.op("Sub", [b.op("Add", [b.op("Cast", [seqlens], "seqlens_i64", to=TensorProto.INT64), one]), seq])
            steps = b.op("Range", [b.const(0, "zero_i"), seq, one], "steps")
            positions = b.op("Add", [b.unsqueeze(start, [1], "start"), steps], "positions")
            cos_rows = b.unsqueeze(b.op("Gather", [cos, positions], "cos", axis=0), [2], "cos_rows")
            sin_rows = b.unsqueeze(b.op("Gather", [sin, positions], "sin", axis=0), [2], "sin_rows")
            q = rotate(b, q, cos_rows, sin_rows, cos, interleaved, "Q_rotated")
            k = rotate(b, k, cos_rows, sin_rows, cos, interleaved, "K_rotated")
        q5 = b.transpose(b.reshape(q, [0, 0, kv_heads, group, -1], "Q_groups"), [0, 2, 3, 1, 4], "Q_BGRSH")
        present = []
        pairs = ((k, past_k, b.output(1), "present_key"), (v, past_v, b.output(2), "present_value"))
        for x, past, k_out, hint in pairs:
            new = b.transpose(x, [0, 2, 1, 3], f"{hint}_new", None if past is not None else k_out)
            present.append(b.op("Concat", [past, new], hint, k_out, axis=2) if past is not None else new)
        k5, v5 = (b.unsqueeze(p, [2], f"{h}_BG1TH") for p, h in zip(present, ("K", "V"), strict=True))
        t = b.extent(present[0], 2, "total_length")
        mask = _causal(b, seq, t, window, b.const(float("-inf"), "minus_inf"))
        longest = b.op("Add", [b.op("ReduceMax", [seqlens], "seqlens_k_max", keepdims=1), b.const(1, "one", "int32")])
        shortest = b.op("Add", [b.op("ReduceMin", [seqlens], "seqlens_k_min", keepdims=1), b.const(1, "one", "int32")])
        owed = _lengths_owed(
            b,
            t,
            [(total, "total_sequence_length"), (longest, "seqlens_k_max_plus_1"), (shortest, "seqlens_k_min_plus_1")],
        )
        _merge(b, _attend(b, q5, k5, v5, [mask, owed], scale, softcap, smooth), out)


def _key_value(node: NodeInfo, body: Body, x: str, past: str | None, out: str | None, hint: str) -> str:
    """[B, N, S, H] keys or values after the past ones ([B, N, P + S, H]), written to `out` where named."""
    b = body
    if past is None:
        return b.op("Identity", [x], hint, out) if out else x
    return b.op("Concat", [past, x], hint, out, axis=2)


def _padding_mask(node: NodeInfo, body: Body, k: int, t: str, fill: str, what: str) -> str | None:
    """Input `k` as an additive [B, 1, 1, 1, T] mask: a [B, T] mask's 0 entries, or a [B] length's keys
    past it, get `fill`; None where the input is absent."""
    b = body
    mask = b.input(k)
    if mask is None:
        return None
    shape = b.shape(k)
    zero = b.const(0.0, "zero_f")
    if shape is not None and len(shape) == 2:
        keep = b.op("Greater", [mask, b.const(0, "zero_mask", "int32")], "kept_keys")
    elif shape is not None and len(shape) == 1:
        batch = (b.shape(0) or (None,))[0]
        if isinstance(shape[0], int) and isinstance(batch, int) and shape[0] != batch:
            raise node.unsupported(f"{what} of extent {shape[0]} (end and start positions) is not supported")
        one = b.const(1, "one_i")
        j = b.op("Range", [b.const(0, "zero_i"), t, one], "key_pos")
        ends = b.unsqueeze(b.op("Cast", [mask], "ends", to=TensorProto.INT64), [1], "ends_B1")
        keep = b.op("Less", [j, ends], "kept_keys")
    else:
        rank = None if shape is None else len(shape)
        raise node.unsupported(f"{what} of rank {rank} is not supported (a [B] length or a [B, T] mask is)")
    return b.reshape(b.op("Where", [keep, zero, fill], "padding_mask"), [0, 1, 1, 1, -1], "padding_mask_B111T")


def _masked_attention_attributes(node: NodeInfo, b: Body) -> tuple[int, float, str, bool]:
    """What Attention and MultiHeadAttention read alike: num_heads (positive), scale (0: 1/sqrt(head
    size)), mask_filter_value (a Constant, -10000 unless given) and unidirectional."""
    heads = int_attr(node, "num_heads", 0)
    if heads <= 0:
        raise node.fail("num_heads must be positive")
    scale = float_attr(node, "scale", 0.0)
    fill = b.const(float_attr(node, "mask_filter_value", -10000.0), "mask_filter_value")
    return heads, scale, fill, bool(int_attr(node, "unidirectional", 0, (0, 1)))


class MultiHeadAttentionRule(BodyRule):
    """com.microsoft MultiHeadAttention (onnxruntime's CPU kernel): separate Q, K, V of [B, S, D]."""

    op_types = ("MultiHeadAttention",)
    attributes = frozenset({"num_heads", "mask_filter_value", "scale", "unidirectional"})
    kernels = KERNELS
    limitations = (
        "float32; query, key and value [B, S, D] (packed and BNSH key/value refused); key_padding_mask [B, T] or "
        "[B], masked as Attention is (a row whose every key is masked matches onnxruntime); past_sequence_length, "
        "cache_indirection and the qk output refused"
    )

    def write(self, node: NodeInfo, body: Body) -> None:
        b = body
        heads, scale, fill, causal = _masked_attention_attributes(node, b)
        _refuse_inputs(node, b, {8: "past_sequence_length", 9: "cache_indirection"})
        _refuse_outputs(node, b, {3: "qk"})
        _require_f32(node, b, 0, "query")
        query, key, value, bias = (b.input(k) for k in range(4))
        past_k, past_v = b.input(6), b.input(7)
        out = b.output(0)
        if query is None or out is None:
            raise node.fail("needs query and gives output")
        if key is None or value is None:
            raise node.unsupported("packed QKV (no key or value input) is not supported")
        for k, what in ((0, "query"), (1, "key"), (2, "value")):
            shape = b.shape(k)
            if shape is not None and len(shape) != 3:
                raise node.unsupported(f"{what} of rank {len(shape)} is not supported (only [B, S, D])")
        if (past_k is None) != (past_v is None):
            raise node.fail("takes past_key and past_value together")
        if bias is not None:
            d = b.op("Slice", [b.op("Shape", [query], "query_shape"), b.ints([2]), b.ints([3])], "hidden")
            d2 = b.op("Mul", [d, b.ints([2], "two")], "hidden2")
            axis0 = b.ints([0], "axis0")
            parts = [
                b.op("Slice", [bias, b.ints([0], "zero"), d, axis0], "bias_q"),
                b.op("Slice", [bias, d, d2, axis0], "bias_k"),
                b.op("Slice", [bias, d2, b.ints([INT64_MAX], "end"), axis0], "bias_v"),
            ]
            biased = zip((query, key, value), parts, ("Q", "K", "V"), strict=True)
            query, key, value = (b.op("Add", [x, p], f"{n}_biased") for x, p, n in biased)
        q5 = b.unsqueeze(_heads(b, query, heads, "Q"), [2], "Q_BN1SH")
        present_k = _key_value(node, b, _heads(b, key, heads, "K"), past_k, b.output(1), "present_key")
        present_v = _key_value(node, b, _heads(b, value, heads, "V"), past_v, b.output(2), "present_value")
        k5, v5 = b.unsqueeze(present_k, [2], "K_BN1TH"), b.unsqueeze(present_v, [2], "V_BN1TH")
        t = b.extent(present_k, 2, "total_length")
        padding = _padding_mask(node, b, 4, t, fill, "key_padding_mask")
        masks = _mask(b, padding, causal, b.extent(query, 1, "sequence_length"), t)
        if b.input(5) is not None:
            masks.append(b.unsqueeze(b.input(5) or "", [2], "attention_bias_BN1ST"))
        _merge(b, _attend(b, q5, k5, v5, masks, scale), out)


class AttentionRule(BodyRule):
    """com.microsoft Attention (onnxruntime's CPU kernel): the input times the packed QKV weights."""

    op_types = ("Attention",)
    attributes = frozenset(
        {
            "num_heads",
            "qkv_hidden_sizes",
            "unidirectional",
            "mask_filter_value",
            "scale",
            "do_rotary",
            "past_present_share_buffer",
            "rotary_embedding_dim",
        }
    )
    kernels = (*KERNELS, "kernel.gather")
    limitations = (
        "float32; mask_index [B] (key lengths) or [B, T] (a 0/1 mask) as BERT and GPT-2 write it; other mask_index "
        "forms, do_rotary, past_present_share_buffer and past_sequence_length refused; masks as onnxruntime's CPU "
        "kernel: mask_filter_value at a padded key, float32's lowest written over it after the query "
        "(unidirectional), then attention_bias, so a row whose every key is masked is onnxruntime's softmax "
        "(to float32 rounding at mask_filter_value's magnitude)"
    )

    def write(self, node: NodeInfo, body: Body) -> None:
        b = body
        heads, scale, fill, causal = _masked_attention_attributes(node, b)
        for attr in ("do_rotary", "past_present_share_buffer"):
            if int_attr(node, attr, 0):
                raise node.unsupported(f"attribute '{attr}' other than 0 is not supported")
        if int_attr(node, "rotary_embedding_dim", 0):
            raise node.unsupported("attribute 'rotary_embedding_dim' is not supported")
        sizes = node.attr("qkv_hidden_sizes", None)
        _refuse_inputs(node, b, {6: "past_sequence_length"})
        _require_f32(node, b, 0, "the input")
        x, weights, bias, _, past = (b.input(k) for k in range(5))
        out = b.output(0)
        if x is None or weights is None or out is None:
            raise node.fail("needs input and weights and gives output")
        qkv = b.op("MatMul", [x, weights], "QKV")
        if bias is not None:
            qkv = b.op("Add", [qkv, bias], "QKV_biased")
        axis = b.ints([2], "axis2")
        if sizes:
            sizes = [int(s) for s in sizes]
            if len(sizes) != 3 or min(sizes) <= 0 or any(s % heads for s in sizes):
                raise node.fail(f"qkv_hidden_sizes {sizes} must be three positive multiples of num_heads")
            if sizes[0] != sizes[1]:
                raise node.fail(f"qkv_hidden_sizes {sizes}: Q and K must be one size")
            cuts = [0, sizes[0], sizes[0] + sizes[1], sum(sizes)]
            q, k, v = (b.slice(qkv, cuts[i], cuts[i + 1], 2, n) for i, n in enumerate(("Q", "K", "V")))
        else:
            width = b.op("Slice", [b.op("Shape", [weights], "w_shape"), b.ints([1]), b.ints([2])], "qkv_width")
            d = b.op("Div", [width, b.ints([3])], "hidden")
            d2 = b.op("Mul", [d, b.ints([2], "two")], "hidden2")
            q = b.op("Slice", [qkv, b.ints([0], "zero"), d, axis], "Q")
            k = b.op("Slice", [qkv, d, d2, axis], "K")
            v = b.op("Slice", [qkv, d2, b.ints([INT64_MAX], "end"), axis], "V")
        present_out = b.output(1)
        pasts: list[str | None]
        if past is not None or present_out is not None:
            if past is not None:
                if sizes and sizes[1] != sizes[2]:
                    raise node.fail("past needs K and V of one size")
                pasts = [b.op("Gather", [past, b.const(i, "index")], f"past_{n}", axis=0) for i, n in enumerate("kv")]
            else:
                pasts = [None, None]
        else:
            pasts = [None, None]
        q5 = b.unsqueeze(_heads(b, q, heads, "Q"), [2], "Q_BN1SH")
        present_k = _key_value(node, b, _heads(b, k, heads, "K"), pasts[0], None, "present_key")
        present_v = _key_value(node, b, _heads(b, v, heads, "V"), pasts[1], None, "present_value")
        if present_out is not None:
            stacked = [b.unsqueeze(p, [0], f"{n}_1BNTH") for p, n in ((present_k, "K"), (present_v, "V"))]
            b.op("Concat", stacked, "present", present_out, axis=0)
        k5, v5 = b.unsqueeze(present_k, [2], "K_BN1TH"), b.unsqueeze(present_v, [2], "V_BN1TH")
        t = b.extent(present_k, 2, "total_length")
        padding = _padding_mask(node, b, 3, t, fill, "mask_index")
        masks = _mask(b, padding, causal, b.extent(x, 1, "sequence_length"), t)
        if b.input(5) is not None:
            masks.append(b.unsqueeze(b.input(5) or "", [2], "attention_bias_BN1ST"))
        _merge(b, _attend(b, q5, k5, v5, masks, scale), out)


RULES: tuple[OpRule, ...] = (
    RotaryEmbeddingRule(),
    GroupQueryAttentionRule(),
    MultiHeadAttentionRule(),
    AttentionRule(),
)
