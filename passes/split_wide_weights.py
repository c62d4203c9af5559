"""split-wide-weights: a weight past one storage binding that only matrix products read is split, along
the products' output axis, into parts that each fit one binding.

Why: WebGPU binds at most `maxStorageBufferBindingSize` bytes of one buffer to a shader (128 MiB by
default, and all a portable module may assume), and the WGSL module keeps each weight in one resident
buffer.  A fully connected layer over a large feature map passes it: AlexNet's fc6 is 4096 x 9216
floats (144 MiB), VGG-19's 4096 x 25088 (392 MiB).  A product `X @ W` over [K, N] computes each column
of its result from one column of W, so W's columns cut into parts W_p give the result as the parts'
products joined along N: `concat(X @ W_0, X @ W_1, ...)`.

The output axis, not the contraction: each part's product writes its own columns and nothing is summed,
so a forward moves the weight's bytes once, reads X once per part (a batch of feature rows, tiny beside
W) and copies the result once (the join); cutting K instead would also write P partial results of the
full [M, N] extent and add them.  And for a Gemm with transB, the usual fully connected layer, W is
stored [N, K], so each part is a run of whole rows of the stored weight: the WGSL module uploads each
part as a slice of the host's weight, which `Weights.load` reads as it always has.

Input: kernel IR after `lower-to-kernel`, before `fuse` (a product has no epilogue yet).  The limit is
the smaller of `loam.device_limits`' maxStorageBufferBindingSize and maxBufferSize (WebGPU's defaults
where it names none); every device element takes 4 bytes (a half weight is uploaded as f32).
Rewritten: every float `kernel.weight` of rank 2 past the limit whose every reader is a `kernel.matmul`
without an epilogue reading it as its right operand, directly or through a `kernel.permute` that only
such products read.  The weight gets P `kernel.slice` parts along the axis that is the products' output
axis (P the fewest parts that fit, their extents as even as they divide: the first ones one larger);
each product becomes P products over the parts (each part permuted as the weight was) and a
`kernel.concat` of their results along the result's last axis.  Any other weight is left as it is
(the WGSL module refuses a weight past one binding, naming it).  The build notes name each split weight
and its parts.  The WGSL pipeline runs this pass; the numpy module never splits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from loam.dialects import build_contract as contract
from loam.dialects.kernel import ConcatOp, MatmulOp, PermuteOp, SliceOp, WeightOp
from loam.dialects.tensor_axes import AxesTensorType, Axis
from loam.passes.notes import add_notes

WEBGPU_BINDING_SIZE = 128 << 20
"""WebGPU's default maxStorageBufferBindingSize: the most bytes of a buffer one shader binding holds."""
WEBGPU_BUFFER_SIZE = 256 << 20
"""WebGPU's default maxBufferSize."""
DEVICE_ELEMENT_BYTES = 4
"""The bytes of one element on the device (f32, i32 or u32: a half is widened, an i64 narrowed)."""
_SPLIT_ELEMENTS = frozenset({"f32", "f16", "bf16"})


def binding_limit(module: ModuleOp) -> int:
    """The most bytes one resident buffer of the WGSL module built from `module` may hold."""
    limits = contract.DEVICE_LIMITS.get(module) or {}
    return min(
        limits.get("maxStorageBufferBindingSize", WEBGPU_BINDING_SIZE), limits.get("maxBufferSize", WEBGPU_BUFFER_SIZE)
    )


def part_extents(extent: int, row_bytes: int, limit: int) -> list[int]:
    """`extent` cut into the fewest parts of at most `limit` bytes (`row_bytes` per unit of it), as
    even as they divide (the first ones one larger); [] where one unit is past the limit."""
    if row_bytes > limit:
        return []
    parts = -(-extent * row_bytes // limit)
    while -(-extent // parts) * row_bytes > limit:
        parts += 1
    small, larger = divmod(extent, parts)
    return [small + 1] * larger + [small] * (parts - larger)


def _products(weight: SSAValue) -> list[tuple[MatmulOp, PermuteOp | None]] | None:
    """Each product reading `weight` as its right operand (and the permutation it reads it through),
    or None where anything else reads it."""
    found: list[tuple[MatmulOp, PermuteOp | None]] = []
    for use in weight.uses:
        user = use.operation
        if isinstance(user, PermuteOp):
            readers = [u.operation for u in user.result.uses]
            if not readers or not all(_plain_rhs(r, user.result) for r in readers):
                return None
            found += [(r, user) for r in readers if isinstance(r, MatmulOp)]
        elif _plain_rhs(user, weight) and isinstance(user, MatmulOp):
            found.append((user, None))
        else:
            return None
    return list(dict.fromkeys(found))


def _plain_rhs(op: Operation, value: SSAValue) -> bool:
    """Whether `op` is a product without an epilogue reading `value` as its right operand only."""
    return isinstance(op, MatmulOp) and op.epilogue is None and op.rhs == value and op.lhs != value


def _typed(value: SSAValue) -> AxesTensorType:
    t = value.type
    assert isinstance(t, AxesTensorType), "kernel IR values are tensor_axes tensors"
    return t


def _part_axis(axis: Axis, p: int, count: int, extent: int) -> Axis:
    base = axis.name if not axis.is_merged else "_".join(axis.parts)
    return Axis.named(f"{base}_part{p}of{count}", extent)


def _with_axis(t: AxesTensorType, at: int, axis: Axis) -> AxesTensorType:
    axes = list(t.axes)
    axes[at] = axis
    return AxesTensorType(t.elem, axes)


def split_weight(op: WeightOp, limit: int) -> int:
    """Split `op` into parts of at most `limit` bytes where it qualifies (see the module docstring); the
    number of parts (0: left as it is)."""
    t = _typed(op.result)
    if contract.PACKED.is_on(op) or t.rank != 2 or t.elem.name not in _SPLIT_ELEMENTS:
        return 0
    if not all(e.is_const for e in t.shape):
        return 0
    rows, cols = (e.const_value for e in t.shape)
    if rows * cols * DEVICE_ELEMENT_BYTES <= limit:
        return 0
    products = _products(op.result)
    if not products:
        return 0
    # The weight axis that is the products' output axis (the right operand's last): one for all of them.
    axes = {1 if p is None else p.permutation[-1] for _, p in products}
    if len(axes) != 1:
        return 0  # read as it is and transposed: the readers' output axes differ
    (axis,) = axes
    other = t.shape[1 - axis].const_value
    extents = part_extents(t.shape[axis].const_value, other * DEVICE_ELEMENT_BYTES, limit)
    if len(extents) < 2:
        return 0
    parts = _slices(op, axis, extents)
    permuted: dict[PermuteOp, list[SSAValue]] = {}  # each permutation of the weight, of the parts
    for product, permute in products:
        if permute is not None and permute not in permuted:
            permuted[permute] = [_permuted(permute, part) for part in parts]
        _split_product(product, parts if permute is None else permuted[permute])
    for permute in permuted:
        Rewriter.erase_op(permute)
    return len(extents)


def _slices(op: WeightOp, axis: int, extents: Sequence[int]) -> list[SSAValue]:
    """The parts of `op`'s weight along `axis`, right after it."""
    t = _typed(op.result)
    node = f"{op.weight_name.data} (split)"
    parts: list[SSAValue] = []
    last: Operation = op
    start = 0
    for p, extent in enumerate(extents):
        starts = tuple(start if i == axis else 0 for i in range(2))
        counts = tuple(extent if i == axis else t.shape[i].const_value for i in range(2))
        typ = _with_axis(t, axis, _part_axis(t.axes[axis], p, len(extents), extent))
        part = SliceOp([op.result], [typ], node, starts=starts, counts=counts, steps=(1, 1))
        Rewriter.insert_op(part, InsertPoint.after(last))
        parts.append(part.results[0])
        last = part
        start += extent
    return parts


def _permuted(permute: PermuteOp, part: SSAValue) -> SSAValue:
    """`part` permuted as `permute` permutes the whole weight, just before `permute`."""
    source, result = _typed(part), _typed(permute.result)
    axes = [source.axes[i] for i in permute.permutation]
    op = PermuteOp(part, permute.permutation, AxesTensorType(result.elem, axes), permute.node.data)
    Rewriter.insert_op(op, InsertPoint.before(permute))
    return op.result


def _split_product(product: MatmulOp, parts: Sequence[SSAValue]) -> None:
    """`product` as the products of its left operand with each of `parts` (its right operand cut along
    the output axis), joined along the result's last axis."""
    result = _typed(product.result)
    last = result.rank - 1
    pieces: list[SSAValue] = []
    for part in parts:
        axis = _typed(part).axes[-1]
        piece = MatmulOp(product.lhs, part, _with_axis(result, last, axis), product.node.data)
        Rewriter.insert_op(piece, InsertPoint.before(product))
        pieces.append(piece.result)
    joined = ConcatOp(pieces, [result], product.node.data, axis=last)
    Rewriter.replace_op(product, joined)


@dataclass(frozen=True)
class SplitWideWeightsPass(ModulePass):
    """Split each weight past one storage binding that only products read into parts along their output axis."""

    name = "split-wide-weights"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        limit = binding_limit(op)
        notes: list[str] = []
        for weight in [w for w in op.walk() if isinstance(w, WeightOp)]:
            count = split_weight(weight, limit)
            if count:
                t = _typed(weight.result)
                size = t.shape[0].const_value * t.shape[1].const_value * DEVICE_ELEMENT_BYTES
                notes.append(
                    f"split weights: '{weight.weight_name.data}' ({size} bytes on the device, over one storage "
                    f"binding's {limit}) is uploaded in {count} parts along its products' output axis, each "
                    "product computing its columns of the result from one part"
                )
        if notes:
            add_notes(op, notes)
