"""Library kernels that move elements: concatenation (and a decoder's past joined with its new rows),
splitting, slicing, padding, tiling and triangles, reversed sequences and reinterpreted bits (ONNX
Concat, Split, Slice, Pad, Tile, Trilu, ReverseSequence, BitCast), listed in `MOVEMENT_OPS`.
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.irdl import irdl_op_definition

from loam.core.poly import Poly
from loam.dialects.kernel.library import LibraryOp, check_axes, kernel_rank, library_types, require


def require_joined(op: LibraryOp) -> None:
    """The operands of a join along the op's `axis` match its one result on every other axis."""
    ins, outs = library_types(op)
    if any(e is None for e in (*ins, *outs)):
        return
    axis, out = op.param("axis"), outs[0]
    assert out is not None
    require(op, 0 <= axis < len(out), f"axis {axis} is outside the result's rank {len(out)}")
    for i, ext in enumerate(ins):
        assert ext is not None
        same = len(ext) == len(out) and all(e == o for j, (e, o) in enumerate(zip(ext, out, strict=True)) if j != axis)
        require(op, same, f"operand {i} does not match the result outside axis {axis}")


@irdl_op_definition
class ConcatOp(LibraryOp):
    """ONNX Concat: the operands joined along `axis`; every other extent is shared.

    Example: `%y = kernel.concat(%a, %b) {node = "cat", axis = 1 : i64} : (A, B) -> R`
    """

    name = "kernel.concat"
    PARAMS: ClassVar[dict[str, type]] = {"axis": int}

    def verify_kernel(self) -> None:
        ins, outs = library_types(self)
        require(self, len(ins) >= 1 and len(outs) == 1, "takes one or more operands and gives one result")
        require_joined(self)


@irdl_op_definition
class AppendStateOp(LibraryOp):
    """A decoder's past joined with its new rows along `axis`, as ONNX Concat(past, new), where `past`
    is the program input named `state` and the result is an output (`decode-state-in-place`).

    Its value is the concatenation.  The numpy module computes it so; given a `DecodeState` whose view
    of `state` is the past it was passed (`forward_in_place`), it writes only the new rows into the
    state's storage after the past and returns the view of both, so no step copies the past.

    Example: `%p = kernel.append_state(%past, %new) {node = "c", axis = 2 : i64, state = "past.0"} : (P, N) -> R`
    """

    name = "kernel.append_state"
    PARAMS: ClassVar[dict[str, type]] = {"axis": int, "state": str}

    def verify_kernel(self) -> None:
        ins, outs = library_types(self)
        require(self, len(ins) == 2 and len(outs) == 1, "takes the past and the new rows and gives one result")
        require_joined(self)


@irdl_op_definition
class SplitOp(LibraryOp):
    """ONNX Split: consecutive chunks of `sizes` elements along `axis`, one result per chunk.

    Example: `%a, %b = kernel.split(%x) {node = "s", axis = 0 : i64, sizes = array<i64: 2, 1>} : (X) -> (A, B)`
    """

    name = "kernel.split"
    PARAMS: ClassVar[dict[str, type]] = {"axis": int, "sizes": tuple}

    def verify_kernel(self) -> None:
        ins, outs = library_types(self)
        sizes = self.param("sizes")
        require(self, len(ins) == 1 and len(outs) == len(sizes), "takes one operand and gives one result per size")


@irdl_op_definition
class SliceOp(LibraryOp):
    """ONNX Slice, normalised: per axis `counts[i]` elements from `starts[i]`, every `steps[i]`.

    Example: `%y = kernel.slice(%x) {node = "s", starts = array<i64: 1>, counts = array<i64: 2>,
    steps = array<i64: 1>} : (X) -> Y`; over a symbolic axis the starts and counts may be extents
    (`starts = [#shape_poly.extent<N - 2>]`), the steps are numbers.
    """

    name = "kernel.slice"
    PARAMS: ClassVar[dict[str, type]] = {"starts": tuple, "counts": tuple, "steps": tuple}

    def verify_kernel(self) -> None:
        ins, outs = library_types(self)
        require(self, len(ins) == 1 and len(outs) == 1, "takes one operand and gives one result")
        starts, counts, steps = self.param("starts"), self.param("counts"), self.param("steps")
        require(self, len(starts) == len(counts) == len(steps), "starts, counts and steps differ in length")
        require(self, all(isinstance(s, int) and s != 0 for s in steps), "a step is 0 or not a number")
        out = outs[0]
        if out is not None:
            require(self, len(out) == len(counts), "the result's rank differs from the slice's")
            same = all(e == Poly.lift(c) for e, c in zip(out, counts, strict=True))
            require(self, same, "the result's extents are not the counts")


@irdl_op_definition
class PadOp(LibraryOp):
    """ONNX Pad: `pads` (begins, then ends, per axis; negative crops) in mode constant/reflect/edge/wrap.

    An optional second operand is the constant fill computed at run time; otherwise `value` is.
    Example: `%y = kernel.pad(%x) {node = "p", pads = array<i64: 1, 1>, mode = "constant", value = 0.0 : f64}`
    """

    name = "kernel.pad"
    PARAMS: ClassVar[dict[str, type]] = {"pads": tuple, "mode": str, "value": float}
    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"value"})

    def verify_kernel(self) -> None:
        ins, outs = library_types(self)
        require(self, len(ins) in (1, 2) and len(outs) == 1, "takes one or two operands and gives one result")
        mode = self.param("mode")
        require(self, mode in ("constant", "reflect", "edge", "wrap"), f"unknown mode '{mode}'")
        x = ins[0]
        if x is not None:
            require(self, len(self.param("pads")) == 2 * len(x), "pads needs two entries per axis")


@irdl_op_definition
class TileOp(LibraryOp):
    """ONNX Tile: the operand repeated `repeats[i]` times along axis i.

    Example: `%y = kernel.tile(%x) {node = "t", repeats = array<i64: 2, 1>} : (X) -> Y`
    """

    name = "kernel.tile"
    PARAMS: ClassVar[dict[str, type]] = {"repeats": tuple}

    def verify_kernel(self) -> None:
        ins, outs = library_types(self)
        require(self, len(ins) == 1 and len(outs) == 1, "takes one operand and gives one result")
        x = ins[0]
        if x is not None:
            require(self, len(self.param("repeats")) == len(x), "repeats needs one entry per axis")


@irdl_op_definition
class TriluOp(LibraryOp):
    """ONNX Trilu over the last two axes: `upper` (1) or lower (0) triangle from diagonal `offset`.

    An optional second operand is the diagonal offset `k` computed at run time.
    Example: `%y = kernel.trilu(%x) {node = "t", upper = 1 : i64, offset = 0 : i64} : (X) -> Y`
    """

    name = "kernel.trilu"
    PARAMS: ClassVar[dict[str, type]] = {"upper": int, "offset": int}
    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"offset"})

    def verify_kernel(self) -> None:
        ins, outs = library_types(self)
        require(self, len(ins) in (1, 2) and len(outs) == 1, "takes one or two operands and gives one result")
        require(self, ins[0] is None or len(ins[0]) >= 2, "the operand needs rank 2 or more")


@irdl_op_definition
class ReverseSequenceOp(LibraryOp):
    """ONNX ReverseSequence: along `time_axis`, the first lens[b] entries of each batch entry b (along
    `batch_axis`) reversed, the rest kept; the second operand is lens.

    Example: `%y = kernel.reverse_sequence(%x, %lens) {node = "r", batch_axis = 1 : i64, time_axis = 0 : i64}
    : (X, L) -> X`
    """

    name = "kernel.reverse_sequence"
    PARAMS: ClassVar[dict[str, type]] = {"batch_axis": int, "time_axis": int}

    def verify_kernel(self) -> None:
        ins, outs = library_types(self)
        require(self, len(ins) == 2 and len(outs) == 1, "takes x and the lengths and gives one result")
        rank = kernel_rank(self, self.inputs[0])
        check_axes(self, [self.param("batch_axis"), self.param("time_axis")], rank)


@irdl_op_definition
class ExpandToOp(LibraryOp):
    """ONNX Expand to a shape only the run gives (the second operand): the first operand broadcast
    with it; the result's extents it decides are lengths only the run knows.

    Example: `%y = kernel.expand_to(%x, %shape) {node = "e"} : (X, S) -> Y`
    """

    name = "kernel.expand_to"


@irdl_op_definition
class ReshapeToOp(LibraryOp):
    """ONNX Reshape to a shape only the run gives (the second operand): a 0 copies the data's extent
    (unless `allowzero`), a -1 takes what is left; the result's extents are lengths only the run knows.

    Example: `%y = kernel.reshape_to(%x, %shape) {node = "r", allowzero = 0 : i64} : (X, S) -> Y`
    """

    name = "kernel.reshape_to"
    PARAMS: ClassVar[dict[str, type]] = {"allowzero": int}


@irdl_op_definition
class TileByOp(LibraryOp):
    """ONNX Tile by repeats only the run gives (the second operand, one count per axis).

    Example: `%y = kernel.tile_by(%x, %repeats) {node = "t"} : (X, R) -> Y`
    """

    name = "kernel.tile_by"


@irdl_op_definition
class SliceByOp(LibraryOp):
    """ONNX Slice by bounds only the run gives: data, starts, ends, then the optional axes and steps
    `present` names (bit 1: axes, 2: steps), with ONNX's from-the-end bounds and clamping.

    Example: `%y = kernel.slice_by(%x, %starts, %ends) {node = "s", present = 0 : i64} : (X, S, E) -> Y`
    """

    name = "kernel.slice_by"
    PARAMS: ClassVar[dict[str, type]] = {"present": int}

    def verify_kernel(self) -> None:
        ins, outs = library_types(self)
        present = self.param("present")
        given = 3 + bin(present).count("1") if 0 <= present <= 3 else -1
        require(self, len(ins) == given and len(outs) == 1, "takes data, starts, ends and the operands `present` names")


@irdl_op_definition
class SplitByOp(LibraryOp):
    """ONNX Split by sizes only the run gives (the second operand): `parts` chunks along `axis`.

    Example: `%a, %b = kernel.split_by(%x, %sizes) {node = "s", axis = 0 : i64, parts = 2 : i64} : (X, S) -> (A, B)`
    """

    name = "kernel.split_by"
    PARAMS: ClassVar[dict[str, type]] = {"axis": int, "parts": int}

    def verify_kernel(self) -> None:
        ins, outs = library_types(self)
        require(self, len(ins) == 2 and len(outs) == self.param("parts"), "takes data and sizes, gives `parts` results")


@irdl_op_definition
class PadByOp(LibraryOp):
    """ONNX Pad by widths only the run gives: data, pads (begins then ends of `axes`), then the
    constant fill when `present` is 1; `mode` as Pad's.

    Example: `%y = kernel.pad_by(%x, %pads) {node = "p", present = 0 : i64, mode = "constant",
    axes = array<i64: 0, 1>} : (X, P) -> Y`
    """

    name = "kernel.pad_by"
    PARAMS: ClassVar[dict[str, type]] = {"present": int, "mode": str, "axes": tuple}

    def verify_kernel(self) -> None:
        ins, outs = library_types(self)
        require(self, len(ins) == 2 + self.param("present") and len(outs) == 1, "takes data, pads and the fill")
        rank = kernel_rank(self, self.inputs[0])
        check_axes(self, list(self.param("axes")), rank)


@irdl_op_definition
class DropoutOp(LibraryOp):
    """ONNX Dropout whose training_mode only the run gives: data, training_mode, then the ratio when
    `present` is 1 (else 0.5).  The result is the data; training with a ratio other than 0 would drop
    random elements, and the kernel refuses it.

    Example: `%y = kernel.dropout(%x, %mode) {node = "d", present = 0 : i64} : (X, M) -> X`
    """

    name = "kernel.dropout"
    PARAMS: ClassVar[dict[str, type]] = {"present": int}

    def verify_kernel(self) -> None:
        ins, outs = library_types(self)
        require(self, len(ins) == 2 + self.param("present") and len(outs) == 1, "takes data, training_mode, ratio")


@irdl_op_definition
class BitCastOp(LibraryOp):
    """ONNX BitCast: the operand's bits read as the result's type `to` (numpy's name), of equal width.

    Example: `%y = kernel.bitcast(%x) {node = "b", to = "int32"} : (!tensor_axes.tensor<f32, [N: 3]>)
    -> !tensor_axes.tensor<i32, [N: 3]>`
    """

    name = "kernel.bitcast"
    PARAMS: ClassVar[dict[str, type]] = {"to": str}

    def verify_kernel(self) -> None:
        ins, outs = library_types(self)
        require(self, len(ins) == 1 and len(outs) == 1, "takes one operand and gives one result")


MOVEMENT_OPS: tuple[type[LibraryOp], ...] = (
    ConcatOp, AppendStateOp, SplitOp, SliceOp, PadOp, TileOp, TriluOp, ReverseSequenceOp, BitCastOp, ExpandToOp,
    ReshapeToOp, TileByOp, SliceByOp, SplitByOp, PadByOp, DropoutOp,
)  # fmt: skip
