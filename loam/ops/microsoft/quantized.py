"""com.microsoft's weight-only quantized operators: MatMulNBits and GatherBlockQuantized.

Both read a weight quantized in blocks, each block with a scale and a zero point, dequantized as
(q - zero point) * scale, and both keep it packed in the module: `Weights` holds the initializer's
uint8 bytes (or int4/uint4 elements), and the library kernels `kernel.matmul_nbits` and
`kernel.gather_block_quantized` widen a bounded group of rows, or the rows gathered, as they go
(`loam/runtime/kernels/quantized.py`).  onnxruntime's CPU kernels are their meaning:

- MatMulNBits: A [.., K] @ W^T (+ bias), W [N, K] stored as B [N, blocks, block_size * bits / 8],
  `bits`-bit integers low bits first, blocks of `block_size` along K (the last block padded);
  scales [N, blocks]; zero points packed as B is ([N, ceil(blocks * bits / 8)] uint8) or of A's
  type ([N, blocks]), else 2^(bits - 1); g_idx [K] names the block each k reads its scale and zero
  point from.  `accuracy_level` 4 lets onnxruntime round A to int8 in blocks of `block_size` (one
  scale, max|a| / 127, a block) and multiply integers (unless it reads g_idx or zero points of A's
  type).  Loam does the same there (`int8 = 1` on the kernel, `loam/runtime/kernels/int8_products.py`):
  the build option `int8_activations` decides for every node where it is given (true: int8 wherever
  no g_idx or zero points of A's type are read; false: float32 products everywhere), and a build note
  names the nodes and what they compute.  The rounding is discontinuous, so a code may flip where
  the float32 sums before the product (an attention's output, a norm's) leave A 1e-7 from
  onnxruntime's; onnxruntime's batched and unbatched runs differ the same way.
- GatherBlockQuantized: a Gather along axis 0 of data quantized in blocks along its last axis;
  uint8 data packs `bits`-bit integers along that axis (default zero point 2^(bits - 1)), int4 and
  uint4 data hold one integer an element (default zero point 0).  An index outside the rows gives
  zeros (onnxruntime's kernel), a negative one counts from the end.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from loam.core import dtypes, owed
from loam.core.poly import Poly
from loam.ops.base import Facts, LowerContext, NodeInfo, OpRule, int_attr, require_arity
from loam.ops.microsoft.domain import DOMAIN
from loam.ops.operands import INDEX_TYPES, emit_library, given, norm_axis, optional, present_bits

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from loam.dialects.tensor_axes import Axis

# The element types of A (MatMulNBits) and of the scales (GatherBlockQuantized) Loam computes.
ACTIVATIONS = ("f32", "f16")


def _required(node: NodeInfo, key: str) -> int:
    if node.attr(key, None) is None:
        raise node.fail(f"has no '{key}' attribute")
    value = int_attr(node, key, 0)
    if value <= 0:
        raise node.fail(f"attribute '{key}' must be positive, got {value}")
    return value


def _block_size(node: NodeInfo, value: int) -> int:
    if value < 16 or value & (value - 1):
        raise node.fail(f"block_size must be a power of 2 of at least 16, got {value}")
    return value


def _extents(node: NodeInfo, f: Facts, what: str) -> tuple[int, ...]:
    shape = f.static_shape()
    if shape is None:
        raise node.unsupported(f"{what} has extents [{', '.join(map(str, f.shape))}]; Loam needs them at build time")
    return shape


def _one_of(node: NodeInfo, f: Facts, what: str, forms: Sequence[tuple[int, ...]]) -> None:
    """`f` has one of the extents `forms` (onnxruntime reads the data flat, so [N, B] and [N * B] both)."""
    shape = _extents(node, f, what)
    if shape not in forms:
        raise node.fail(f"{what} has extents {list(shape)}; expected {' or '.join(str(list(s)) for s in forms)}")


class MatMulNBitsRule(OpRule):
    """com.microsoft MatMulNBits: A @ W^T (+ bias) over W quantized to `bits` in blocks along K, kept packed."""

    op_types = ("MatMulNBits",)
    domain = DOMAIN
    kernels: tuple[str, ...] = ("kernel.matmul_nbits",)
    attributes = frozenset({"K", "N", "bits", "block_size", "accuracy_level", "weight_prepacked"})
    elem_types = ACTIVATIONS
    limitations = (
        "bits 2, 4 or 8; at accuracy_level 4 (or with int8_activations) A is rounded to int8 per block and "
        "multiplied as integers, as onnxruntime does, else W is widened and multiplied in f32; no bf16 A, no "
        "prepacked B (weight_prepacked), no empty B (an omitted projection); g_idx only with bits 4 and "
        "without uint8 zero points; no 8-bit B with zero points of A's type; WGSL only with --host-fallback"
    )

    def params(self, node: NodeInfo) -> tuple[int, int, int, int]:
        """(K, N, bits, block_size), checked (accuracy_level too)."""
        k, n = _required(node, "K"), _required(node, "N")
        bits = int_attr(node, "bits", 4)
        if bits not in (2, 4, 8):
            raise node.unsupported(f"bits is {bits}; Loam reads 2, 4 and 8")
        block = _block_size(node, _required(node, "block_size"))
        int_attr(node, "accuracy_level", 0, (0, 1, 2, 3, 4))
        if int_attr(node, "weight_prepacked", 0) != 0:
            raise node.unsupported(
                "B is prepacked for an execution provider (weight_prepacked); Loam reads it unpacked"
            )
        return k, n, bits, block

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 3, 6)
        k, n, bits, block = self.params(node)
        a, b, scales = given(node, inputs, 0, "A"), given(node, inputs, 1, "B"), given(node, inputs, 2, "scales")
        zero, g_idx, bias = (optional(inputs, i) for i in (3, 4, 5))
        if a.elem.name not in ACTIVATIONS:
            raise node.unsupported(f"input A has element type {a.elem.name}; Loam computes {', '.join(ACTIVATIONS)}")
        if a.rank < 1:
            raise node.fail("input A must have rank 1 or more")
        if a.shape[-1].is_const and a.shape[-1].const_value != k:
            raise node.fail(f"input A's last extent is {a.shape[-1]}, not K = {k}")
        owed.require_equal(a.shape[-1], Poly.const(k), node, "input A's last axis and K")
        blocks = -(-k // block)
        if b.elem.name != "ui8":
            raise node.fail(f"input B has element type {b.elem.name}; MatMulNBits packs it in ui8")
        b_shape = _extents(node, b, "input B")
        if 0 in b_shape:
            raise node.unsupported("input B is empty (an omitted projection); Loam reads a whole B")
        _one_of(node, b, "input B", [(n, blocks, block * bits // 8)])
        if scales.elem != a.elem:
            raise node.fail(f"input scales is {scales.elem.name} and A {a.elem.name}; MatMulNBits needs one type")
        _one_of(node, scales, "input scales", [(n, blocks), (n * blocks,)])
        if zero is not None:
            if zero.elem.name == "ui8":
                row = -(-blocks * bits // 8)
                _one_of(node, zero, "input zero_points", [(n, row), (n * row,)])
            elif zero.elem == a.elem:
                if bits == 8:
                    raise node.unsupported(
                        "8-bit weights with zero points of A's type are refused (onnxruntime's CPU kernel refuses them)"
                    )
                _one_of(node, zero, "input zero_points", [(n, blocks), (n * blocks,)])
            else:
                raise node.unsupported(
                    f"input zero_points has element type {zero.elem.name}; Loam reads ui8 (packed) or A's type"
                )
        if g_idx is not None:
            if g_idx.elem.name != "i32":
                raise node.fail(f"input g_idx has element type {g_idx.elem.name}; MatMulNBits takes i32")
            _one_of(node, g_idx, "input g_idx", [(k,)])
            # onnxruntime's CPU kernel reads g_idx for 4 bits only, and there disregards uint8 zero points
            # (2^(bits - 1) stands for them); rather than pick one of two meanings, Loam refuses the rest.
            if bits != 4 or (zero is not None and zero.elem.name == "ui8"):
                raise node.unsupported(
                    "input g_idx is read only with bits 4 and zero points absent or of A's type "
                    "(onnxruntime's CPU kernel refuses other bits and disregards uint8 zero points with g_idx)"
                )
        if bias is not None:
            if bias.elem != a.elem:
                raise node.fail(f"input bias is {bias.elem.name} and A {a.elem.name}; MatMulNBits needs one type")
            _one_of(node, bias, "input bias", [(n,)])
        return [Facts(a.elem, (*a.shape[:-1], Poly.const(n)))]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        a, b = inputs[0], inputs[1]
        assert a is not None and b is not None
        return [(*a[:-1], b[0])]  # B's first axis runs along N

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import MatmulNbitsOp

        k, n, bits, block = self.params(node)
        optional_operands = [operands[i] if i < len(operands) else None for i in (3, 4, 5)]
        present = [v for v in operands if v is not None]
        int8 = self._int8(ctx, node, *optional_operands[:2])
        op = MatmulNbitsOp(
            present, [ctx.result_types[0]], node.name, k=k, n=n, bits=bits, block_size=block,
            present=present_bits(optional_operands), **({"int8": 1} if int8 else {}),
        )  # fmt: skip
        return emit_library(ctx, op)

    @staticmethod
    def _int8(ctx: LowerContext, node: NodeInfo, zero: SSAValue | None, g_idx: SSAValue | None) -> bool:
        """Whether the node rounds A to int8 (`int8_activations`, else accuracy_level 4), with its build note.

        onnxruntime's CPU kernel rounds A at accuracy_level 4 unless it reads g_idx or zero points of A's
        type (then it multiplies in float, as Loam does there whatever the option says)."""
        from loam.ops.lowering import axes_type

        asked = int_attr(node, "accuracy_level", 0) == 4
        can = g_idx is None and (zero is None or axes_type(zero).elem.name == "ui8")
        option = ctx.int8_activations
        if not can:
            if option:
                ctx.note(
                    "int8_activations: MatMulNBits reading g_idx or zero points of A's type multiplies in float32, "
                    "as onnxruntime does",
                    node,
                )
            return False
        if option is None and asked:
            ctx.note(
                "MatMulNBits at accuracy_level 4 rounds A to int8 per block and multiplies integers, as onnxruntime "
                "does (--no-int8-activations: float32 products)",
                node,
            )
        elif option and not asked:
            ctx.note("int8_activations: MatMulNBits rounds A to int8 per block and multiplies integers", node)
        elif option is False and asked:
            ctx.note(
                "MatMulNBits at accuracy_level 4 multiplies in float32 (int8_activations = false), where onnxruntime "
                "rounds A to int8 per block: expect logits to differ from onnxruntime's by about 1e-1, and greedy "
                "picks between near-tied tokens",
                node,
            )
        elif option:
            ctx.note("MatMulNBits at accuracy_level 4 rounds A to int8 per block and multiplies integers", node)
        return asked if option is None else option


# GatherBlockQuantized's data types Loam reads (onnxruntime's float8 and float4 forms are refused).
GATHERED = ("ui8", "i4", "ui4")


class GatherBlockQuantizedRule(OpRule):
    """com.microsoft GatherBlockQuantized: a Gather along axis 0 of data quantized in blocks along its
    last axis, kept packed; the rows picked, then dequantized."""

    op_types = ("GatherBlockQuantized",)
    domain = DOMAIN
    kernels: tuple[str, ...] = ("kernel.gather_block_quantized",)
    attributes = frozenset({"gather_axis", "quantize_axis", "block_size", "bits"})
    elem_types = GATHERED
    limitations = (
        "ui8 data of bits 2, 4 or 8, or i4/ui4 data; gathers along axis 0 only, quantized along the last axis "
        "only; no float8/float4 data; f32 or f16 scales; WGSL only with --host-fallback"
    )

    def params(self, node: NodeInfo, data: Facts) -> tuple[int, int]:
        """(bits, block_size), the axes checked."""
        rank = data.rank
        if rank < 2:
            raise node.unsupported(f"input data has rank {rank}; Loam gathers rows of data of rank 2 or more")
        gather = norm_axis(node, int_attr(node, "gather_axis", 0), rank, "gather_axis")
        quantize = norm_axis(node, int_attr(node, "quantize_axis", 1), rank, "quantize_axis")
        if gather != 0:
            raise node.unsupported(f"gathers along axis {gather}; Loam gathers along axis 0 only")
        if quantize != rank - 1:
            raise node.unsupported(
                f"quantize_axis is {quantize}; Loam reads blocks along the last axis ({rank - 1}) only"
            )
        bits = int_attr(node, "bits", 4)
        if data.elem.name == "ui8" and bits not in (2, 4, 8):
            raise node.fail(f"bits is {bits}; uint8 data packs 2, 4 or 8")
        if data.elem.name != "ui8" and bits != 4:
            raise node.fail(f"bits is {bits} but data is {data.elem.name}")
        return bits, _block_size(node, int_attr(node, "block_size", 128))

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 3, 4)
        data, indices = given(node, inputs, 0, "data"), given(node, inputs, 1, "indices")
        scales, zero = given(node, inputs, 2, "scales"), optional(inputs, 3)
        if data.elem.name not in GATHERED:
            raise node.unsupported(f"input data has element type {data.elem.name}; Loam reads {', '.join(GATHERED)}")
        bits, block = self.params(node, data)
        if indices.elem.name not in INDEX_TYPES:
            raise node.fail(f"input indices has element type {indices.elem.name}; it takes i32 or i64")
        if scales.elem.name not in ACTIVATIONS:
            raise node.unsupported(f"input scales has element type {scales.elem.name}; Loam reads f32 and f16")
        shape = _extents(node, data, "input data")
        width = shape[-1] * (8 // bits) if data.elem.name == "ui8" else shape[-1]
        blocks = -(-width // block)
        _one_of(node, scales, "input scales", [(*shape[:-1], blocks)])
        if zero is not None:
            if zero.elem != data.elem:
                raise node.fail(f"input zero_points is {zero.elem.name} and data {data.elem.name}; they share a type")
            row = -(-blocks * bits // 8) if data.elem.name == "ui8" else blocks
            _one_of(node, zero, "input zero_points", [(*shape[:-1], row)])
        return [Facts(scales.elem, (*indices.shape, *data.shape[1:-1], Poly.const(width)))]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        data, indices = inputs[0], inputs[1]
        assert data is not None and indices is not None
        last = data[-1] if data[-1].extent == outputs[0].shape[-1] else None  # packed: the layout names it
        return [(*indices, *data[1:-1], last)]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import GatherBlockQuantizedOp
        from loam.ops.lowering import axes_type

        data = operands[0]
        assert data is not None
        t = axes_type(data)
        facts = Facts(dtypes.by_name(t.elem.name), tuple(a.extent for a in t.axes))
        bits, block = self.params(node, facts)
        zero = operands[3] if len(operands) > 3 else None
        present = [v for v in operands if v is not None]
        op = GatherBlockQuantizedOp(
            present, [ctx.result_types[0]], node.name, bits=bits, block_size=block, zeros=int(zero is not None)
        )
        return emit_library(ctx, op)


RULES: tuple[OpRule, ...] = (MatMulNBitsRule(), GatherBlockQuantizedRule())
