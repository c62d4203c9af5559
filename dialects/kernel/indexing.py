"""Library kernels that index: gathers, scatters, integer ranges and selections whose length only the
run knows (ONNX Gather, GatherElements, ScatterElements, ScatterND, Range, TensorScatter, NonZero,
Compress, Unique, NonMaxSuppression), listed in `INDEXING_OPS`.
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.irdl import irdl_op_definition
from xdsl.utils.exceptions import VerifyException

from loam.dialects.kernel.library import LibraryOp, library_types, require


@irdl_op_definition
class GatherOp(LibraryOp):
    """ONNX Gather: the data indexed along `axis` by an index tensor of any rank.

    Example: `%y = kernel.gather(%x, %i) {node = "g", axis = 0 : i64} : (X, I) -> Y`
    """

    name = "kernel.gather"
    PARAMS: ClassVar[dict[str, type]] = {"axis": int}

    def verify_kernel(self) -> None:
        ins, outs = library_types(self)
        require(self, len(ins) == 2 and len(outs) == 1, "takes data and indices and gives one result")
        x, i, out = ins[0], ins[1], outs[0]
        if x is not None and i is not None and out is not None:
            axis = self.param("axis")
            require(self, 0 <= axis < len(x), f"axis {axis} is outside the data's rank {len(x)}")
            want = [*x[:axis], *i, *x[axis + 1 :]]
            require(self, list(out) == want, "the result's extents are not data[:axis] + indices + data[axis+1:]")


@irdl_op_definition
class GatherElementsOp(LibraryOp):
    """ONNX GatherElements: out[i][j] = data[indices[i][j]][j] (axis 0); the result has the indices' extents.

    Example: `%y = kernel.gather_elements(%x, %i) {node = "g", axis = 1 : i64} : (X, I) -> Y`
    """

    name = "kernel.gather_elements"
    PARAMS: ClassVar[dict[str, type]] = {"axis": int}

    def verify_kernel(self) -> None:
        ins, outs = library_types(self)
        require(self, len(ins) == 2 and len(outs) == 1, "takes data and indices and gives one result")
        if ins[1] is not None and outs[0] is not None:
            require(self, ins[1] == outs[0], "the result's extents are not the indices' extents")


@irdl_op_definition
class ScatterElementsOp(LibraryOp):
    """ONNX ScatterElements: a copy of the data with updates written (or reduced) at indices along `axis`.

    Example: `%y = kernel.scatter_elements(%x, %i, %u) {node = "s", axis = 0 : i64, reduction = "add"}`
    """

    name = "kernel.scatter_elements"
    PARAMS: ClassVar[dict[str, type]] = {"axis": int, "reduction": str}

    def verify_kernel(self) -> None:
        ins, outs = library_types(self)
        require(self, len(ins) == 3 and len(outs) == 1, "takes data, indices and updates and gives one result")
        reduction = self.param("reduction")
        require(self, reduction in ("none", "add", "mul", "max", "min"), f"unknown reduction '{reduction}'")
        if ins[0] is not None and outs[0] is not None:
            require(self, ins[0] == outs[0], "the result's extents are not the data's")


@irdl_op_definition
class ScatterNDOp(LibraryOp):
    """ONNX ScatterND: a copy of the data with updates written (or reduced) at the index tuples that
    the indices' last axis holds (k entries each, addressing the data's first k axes).

    The updates' extents are the indices' but the last, then the data's after k: where both sides
    are numbers they must agree (symbolic ones the build proved or owes equal).
    Example: `%y = kernel.scatter_nd(%x, %i, %u) {node = "s", reduction = "none"} : (X, I, U) -> Y`
    """

    name = "kernel.scatter_nd"
    PARAMS: ClassVar[dict[str, type]] = {"reduction": str}

    def verify_kernel(self) -> None:
        ins, outs = library_types(self)
        require(self, len(ins) == 3 and len(outs) == 1, "takes data, indices and updates and gives one result")
        reduction = self.param("reduction")
        require(self, reduction in ("none", "add", "mul", "max", "min"), f"unknown reduction '{reduction}'")
        x, i, u = ins
        if x is not None and outs[0] is not None:
            require(self, x == outs[0], "the result's extents are not the data's")
        if x is None or i is None or u is None:
            return
        require(self, len(i) >= 1, "the indices have rank 0")
        k = i[-1]
        require(self, k.is_const and k.const_value <= len(x), f"the indices' last extent {k} is not a number <= rank")
        want = (*i[:-1], *x[k.const_value :])
        require(self, len(u) == len(want), "the updates' rank is not the indices' rank - 1 + the data's rank - k")
        agree = all(a == b or not (a.is_const and b.is_const) for a, b in zip(u, want, strict=True))
        require(self, agree, "the updates' extents are not indices[:-1] + data[k:]")


@irdl_op_definition
class RangeOp(LibraryOp):
    """ONNX Range over integers the run knows: `start`, `start + delta`, ... below `limit` (above it
    for a negative delta), as `dtype`; start and limit may be extents only the run knows.

    Example: `%p = kernel.range() {node = "r", start = 0 : i64, limit = #shape_poly.extent<S>,
    delta = 1 : i64, dtype = "int64"} : () -> R`
    """

    name = "kernel.range"
    PARAMS: ClassVar[dict[str, type]] = {"start": int, "limit": int, "delta": int, "dtype": str}

    def verify_kernel(self) -> None:
        ins, outs = library_types(self)
        require(self, not ins and len(outs) == 1, "takes no operand and gives one result")
        require(self, self.param("dtype") in ("int64", "int32"), f"dtype '{self.param('dtype')}' is not int64 or int32")
        require(self, outs[0] is None or len(outs[0]) == 1, "the result has rank 1")


@irdl_op_definition
class GatherNDOp(LibraryOp):
    """ONNX GatherND: the slices of data at the index tuples along the last axis of indices, after the
    `batch_dims` leading axes data and indices share.

    Example: `%y = kernel.gather_nd(%x, %i) {node = "g", batch_dims = 0 : i64} : (X, I) -> Y`
    """

    name = "kernel.gather_nd"
    PARAMS: ClassVar[dict[str, type]] = {"batch_dims": int}


@irdl_op_definition
class RangeOfOp(LibraryOp):
    """ONNX Range over the values its three scalar operands (start, limit, delta) hold at run time;
    how many elements it makes is a length only the run knows.

    Example: `%r = kernel.range_of(%s, %l, %d) {node = "r"} : (S, L, D) -> !tensor_axes.tensor<f32, [N: r[0]]>`
    """

    name = "kernel.range_of"


@irdl_op_definition
class OneHotOp(LibraryOp):
    """ONNX OneHot: `values[1]` where position i along the new axis `axis` (of `depth` positions)
    is the index there, `values[0]` elsewhere; a negative index counts from `depth`, one outside
    [-depth, depth) matches no position.

    Without the parameter `depth`, a third operand holds depth as the run gives it, and the new
    axis is a length only the run knows.

    Example: `%y = kernel.one_hot(%i, %v) {node = "oh", depth = 10 : i64, axis = 1 : i64} : (I, V) -> Y`
    """

    name = "kernel.one_hot"
    PARAMS: ClassVar[dict[str, type]] = {"depth": int, "axis": int}
    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"depth"})

    def verify_kernel(self) -> None:
        ins, outs = library_types(self)
        wanted = 2 if "depth" in self.attributes else 3
        require(self, len(ins) == wanted and len(outs) == 1, "takes indices, values and depth unless it is a parameter")


@irdl_op_definition
class EyeLikeOp(LibraryOp):
    """ONNX EyeLike: a matrix of the operand's extents, of type `to` (numpy's name), with ones on
    diagonal `k` (above the main one where positive) and zeros elsewhere; the operand's values are
    not read.

    Example: `%y = kernel.eye_like(%x) {node = "e", k = 1 : i64, to = "float32"} : (X) -> Y`
    """

    name = "kernel.eye_like"
    PARAMS: ClassVar[dict[str, type]] = {"k": int, "to": str}


@irdl_op_definition
class NonZeroOp(LibraryOp):
    """ONNX NonZero: the indices of the operand's nonzero elements, [rank, count]; the count is a
    length only the run knows (the result's extent symbol, bound from it).

    Example: `%i = kernel.nonzero(%x) {node = "nz"} : (X) -> !tensor_axes.tensor<i64, [R: 2, C: nz[1]]>`
    """

    name = "kernel.nonzero"


@irdl_op_definition
class CompressOp(LibraryOp):
    """ONNX Compress: the slices along `axis` (of the operand flattened, with `flat`) where the second
    operand, a condition, is true; their count is a length only the run knows.

    Example: `%y = kernel.compress(%x, %c) {node = "c", axis = 0 : i64, flat = 0 : i64} : (X, C) -> Y`
    """

    name = "kernel.compress"
    PARAMS: ClassVar[dict[str, type]] = {"axis": int, "flat": int}


@irdl_op_definition
class UniqueOp(LibraryOp):
    """ONNX Unique: the distinct slices along `axis` (elements, with `flat`), sorted with `ordered`
    or in order of first occurrence, then their first indices, each slice's position among them,
    and their counts; how many there are is a length only the run knows.

    Example: `%y, %i, %v, %n = kernel.unique(%x) {node = "u", axis = 0 : i64, flat = 1 : i64, ordered = 1 : i64}
    : (X) -> (Y, I, V, N)`
    """

    name = "kernel.unique"
    PARAMS: ClassVar[dict[str, type]] = {"axis": int, "flat": int, "ordered": int}


@irdl_op_definition
class TensorScatterOp(LibraryOp):
    """ONNX TensorScatter: `(past, update[, write_indices])`, the cache `past` with `update` written
    along `axis` from each batch row's write index (absent: 0); `mode` is `linear` or `circular` (the
    positions wrap round the axis).

    Example: `%y = kernel.tensor_scatter(%p, %u, %w) {node = "t", axis = 2 : i64, mode = "linear"} : (P, U, W) -> Y`
    """

    name = "kernel.tensor_scatter"
    PARAMS: ClassVar[dict[str, type]] = {"axis": int, "mode": str}

    def verify_kernel(self) -> None:
        if self.param("mode") not in ("linear", "circular"):
            raise VerifyException(f"{self.name} '{self.node.data}': mode must be linear or circular")


@irdl_op_definition
class NonMaxSuppressionOp(LibraryOp):
    """ONNX NonMaxSuppression: boxes [B, N, 4] and scores [B, C, N], then the optional scalars
    `present` names (bit 1: max_output_boxes_per_class, 2: iou_threshold, 4: score_threshold), in that
    order; the result is the selected [batch, class, box] rows, [count, 3], the count a length only the
    run knows.  `center_point_box` says how a box is given (0: corners, 1: center and size).

    Example: `%i = kernel.non_max_suppression(%b, %s, %m) {node = "nms", present = 1 : i64,
    center_point_box = 0 : i64} : (B, S, M) -> !tensor_axes.tensor<i64, [K: nms[0], T: 3]>`
    """

    name = "kernel.non_max_suppression"
    PARAMS: ClassVar[dict[str, type]] = {"present": int, "center_point_box": int}

    def verify_kernel(self) -> None:
        ins, outs = library_types(self)
        present = self.param("present")
        given = 2 + bin(present).count("1") if 0 <= present <= 7 else -1
        require(self, len(ins) == given and len(outs) == 1, "takes boxes, scores and the scalars `present` names")
        require(self, self.param("center_point_box") in (0, 1), "center_point_box must be 0 or 1")
        require(self, outs[0] is None or len(outs[0]) == 2, "the result has rank 2")


INDEXING_OPS: tuple[type[LibraryOp], ...] = (
    GatherOp, GatherElementsOp, GatherNDOp, ScatterElementsOp, ScatterNDOp, RangeOp, RangeOfOp, OneHotOp, EyeLikeOp,
    NonZeroOp, CompressOp, UniqueOp, NonMaxSuppressionOp, TensorScatterOp,
)  # fmt: skip
