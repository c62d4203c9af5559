"""Signal processing: the window functions HannWindow, HammingWindow and BlackmanWindow, the
Fourier transforms DFT and STFT, and MelWeightMatrix.

A window's one operand is its length: one the build knows lets stage 0 compute the whole window,
which the module carries as a constant (no kernel runs); one only the run gives is a length only it
knows, and `kernel.window` computes the window then (the fold uses the same kernel).

DFT and STFT lower to library kernels (`kernel.dft`, `kernel.stft`) whose numpy pieces also fold
known values.  DFT's dft_length and axis (from opset 20) must be known at build time, as must the
extents of the transformed axis and of the signal: a value known only at run time is refused, naming
the node and the input.  STFT's frame_step and frame_length may come from the run: the kernel reads
them, and the extents they decide (frames, bins) are lengths only the run knows.

MelWeightMatrix's num_mel_bins and dft_length fix its extents (lengths only the run knows where it
gives them); its operands may all come at run time (`kernel.mel_weight_matrix`), and when all are
known stage 0 folds the matrix into a constant.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NotRequired, TypedDict

import numpy as np

from loam.core import derived, dtypes, owed
from loam.core.limits import foldable
from loam.core.poly import Poly
from loam.ops.base import Facts, LowerContext, NodeInfo, OpRule, int_attr, require_arity
from loam.ops.lowering import FLOAT_TYPES
from loam.ops.operands import (
    INDEX_TYPES,
    emit_library,
    given,
    is_symbolic,
    keep_unchanged,
    known_ints,
    operand_facts,
    optional,
    require_elem,
)
from loam.runtime.errors import DataError
from loam.runtime.kernels.signal import kernel_dft, kernel_mel_weight_matrix, kernel_stft, kernel_window

if TYPE_CHECKING:
    from xdsl.ir import SSAValue

    from loam.dialects.tensor_axes import Axis

# Each window operator and the kind `kernel.window` (and the fold, with the same kernel) computes.
WINDOW_KINDS: dict[str, str] = {"HannWindow": "hann", "HammingWindow": "hamming", "BlackmanWindow": "blackman"}


class WindowParams(TypedDict):
    """`kernel.window`'s parameters."""

    kind: str
    periodic: int
    to: str


class DftParams(TypedDict):
    """`kernel.dft`'s parameters; dft_length is an extent (a `Poly`) over a symbolic transformed axis."""

    axis: int
    dft_length: int | Poly
    inverse: int
    onesided: int


class StftParams(TypedDict, total=False):
    """`kernel.stft`'s parameters; frame_step and frame_length are absent where the run gives them."""

    frame_step: int
    frame_length: int
    onesided: int


class MelWeightMatrixParams(TypedDict):
    """`kernel.mel_weight_matrix`'s parameters; num_mel_bins and dft_length are absent where the run
    gives either (the kernel reads both)."""

    num_mel_bins: NotRequired[int]
    dft_length: NotRequired[int]
    dtype: str


class WindowRule(OpRule):
    """ONNX HannWindow, HammingWindow, BlackmanWindow (opset 17): a window of the given length,
    periodic (default) or symmetric, of element type `output_datatype` (f32 by default).

    A length the build knows folds to a constant of the module; one only the run gives makes the
    window's extent a length only it knows (`kernel.window`; a negative one is the module's DataError).
    """

    op_types = tuple(WINDOW_KINDS)
    kernels: tuple[str, ...] = ("kernel.window",)
    attributes = frozenset({"output_datatype", "periodic"})
    first_opset = 17
    elem_types = FLOAT_TYPES
    limitations = "a length from symbolic extents (a Shape) is refused"

    def params(self, node: NodeInfo) -> WindowParams:
        code = int(node.attr("output_datatype", 1))
        elem = dtypes.BY_ONNX.get(code)
        if elem is None or elem.name not in self.elem_types or elem.numpy is None:
            raise node.unsupported(f"output_datatype {code} is not one of {', '.join(self.elem_types)}")
        periodic = int_attr(node, "periodic", 1, (0, 1))
        return {"kind": WINDOW_KINDS[node.op_type], "periodic": periodic, "to": elem.numpy.name}

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 1)
        size = given(node, inputs, 0, "size")
        require_elem(node, size, INDEX_TYPES, "size")
        params = self.params(node)
        elem = dtypes.BY_ONNX[int(node.attr("output_datatype", 1))]
        if size.value is None:  # the run gives the length: a length only it knows
            if size.static_shape() not in ((), (1,)):
                raise node.fail(
                    f"size must be one integer, not a tensor of extents [{', '.join(map(str, size.shape))}]"
                )
            return [Facts(elem, (node.result_length(0, 0),))]
        if is_symbolic(size):
            raise node.unsupported(
                "the window's length depends on symbolic extents; it must be a number or a run-time value"
            )
        flat = np.asarray(size.value).reshape(-1)
        if flat.size != 1 or int(flat[0]) < 0:
            raise node.fail(f"size must be one non-negative integer, not {flat.tolist()}")
        length = int(flat[0])
        if not foldable([length], node.where()):
            raise node.unsupported(f"a window of {length} values is too long to carry as a constant")
        return [Facts(elem, (Poly.const(length),), kernel_window(flat, **params))]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import WindowOp

        size = operands[0]
        assert size is not None
        return emit_library(ctx, WindowOp([size], [ctx.result_types[0]], node.name, **self.params(node)))


def _one_int(node: NodeInfo, f: Facts, what: str, types: Sequence[str] = INDEX_TYPES) -> int:
    """The one integer input `what` holds, which the build must know (`known_ints` refuses otherwise)."""
    values = known_ints(node, f, what, types)
    if len(values) != 1:
        raise node.fail(f"{what} must be one integer, not {values}")
    return values[0]


def _one_int_or_run(node: NodeInfo, f: Facts, what: str) -> int | None:
    """The one integer input `what` holds, or None where only the run gives it (one integer then)."""
    if f.value is None:
        if f.elem.name not in INDEX_TYPES or f.static_shape() not in ((), (1,)):
            raise node.fail(
                f"{what} must be one integer (i32 or i64), not {f.elem.name}[{', '.join(map(str, f.shape))}]"
            )
        return None
    return _one_int(node, f, what)


def _trailing(node: NodeInfo, f: Facts, what: str) -> int:
    """The extent of `f`'s trailing axis: 1 (real values) or 2 (real and imaginary parts)."""
    last = f.shape[-1]
    if not (last.is_const and last.const_value in (1, 2)):
        raise node.fail(f"{what}'s trailing extent is {last}; ONNX takes 1 (real) or 2 (complex: real, imaginary)")
    return last.const_value


def _static(node: NodeInfo, extent: Poly, what: str) -> int:
    """`extent` as a number, which the transform's extents need at build time."""
    if not extent.is_const:
        raise node.unsupported(
            f"{what} has the symbolic extent {extent}; the transform's extents need it as a number at build "
            "time, so fix it with the `dims` option"
        )
    return extent.const_value


class DftRule(OpRule):
    """ONNX DFT (opset 17; `axis` an input from 20): the discrete Fourier transform of a real ([..., 1])
    or complex ([..., 2]) input along one axis over dft_length samples (the axis cut short or padded
    with zeros), forward or `inverse`; `onesided` keeps the first dft_length // 2 + 1 bins of a real
    input's spectrum, or (inverse) makes a real signal of dft_length samples from them (IRFFT)."""

    op_types = ("DFT",)
    kernels: tuple[str, ...] = ("kernel.dft",)
    attributes = frozenset({"axis", "inverse", "onesided"})
    first_opset = 17
    elem_types = FLOAT_TYPES
    limitations = (
        "dft_length and the axis input must be known at build time, and the transformed axis's extent a number; "
        "an inverse one-sided DFT needs dft_length // 2 + 1 bins along the axis (with others onnxruntime departs "
        "from ONNX's definition)"
    )

    @staticmethod
    def check_irfft_bins(node: NodeInfo, axis: int, bins: Poly, length: int) -> None:
        """An inverse one-sided DFT of `length` samples reads length // 2 + 1 bins: the axis must hold
        that many (a symbolic axis owes it)."""
        if not bins.is_const:
            owed.require_equal(
                bins, Poly.const(length // 2 + 1), node, f"the bins axis {axis} holds for dft_length {length}"
            )
            return
        if length // 2 + 1 != bins.const_value:
            fits = " or ".join(str(n) for n in (2 * (bins.const_value - 1), 2 * bins.const_value - 1) if n >= 1)
            raise node.unsupported(
                f"dft_length {length} reads {length // 2 + 1} bins of a one-sided spectrum but axis {axis} holds "
                f"{bins}; onnxruntime computes such an inverse differently from ONNX's definition, so Loam takes "
                f"only dft_length {fits} here"
            )

    def plan(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> tuple[DftParams, tuple[Poly, ...]]:
        """The kernel's parameters and the output's extents, from the input and the operands the
        build knows (stage 0 and lowering both ask).  Over a symbolic transformed axis without a
        dft_length input, dft_length is that axis's extent (a `Poly` the module computes at run time)."""
        x = given(node, inputs, 0, "input")
        require_elem(node, x, self.elem_types)
        if x.rank < 2:
            raise node.fail(f"the input has rank {x.rank}; ONNX takes [signal axes..., 1 or 2]")
        parts = _trailing(node, x, "the input")
        inverse = int_attr(node, "inverse", 0, (0, 1))
        onesided = int_attr(node, "onesided", 0, (0, 1))
        if onesided and not inverse and parts == 2:
            raise node.fail("a one-sided DFT takes a real input (trailing extent 1), not a complex one")
        if onesided and inverse and parts == 1:
            raise node.fail("a one-sided inverse DFT (IRFFT) takes a complex input (trailing extent 2), not a real one")
        rank = x.rank
        if node.since >= 20:
            axis_input = optional(inputs, 2)
            axis = -2 if axis_input is None else _one_int(node, axis_input, "axis", ("i64",))
        else:
            axis = int_attr(node, "axis", 1)
        if not (-rank <= axis <= -2 or 0 <= axis <= rank - 2):
            raise node.fail(
                f"axis {axis} is out of range for rank {rank}: it must lie in [{-rank}, -2] or [0, {rank - 2}] "
                "(the trailing axis holds the real and imaginary parts)"
            )
        axis %= rank
        bins = x.shape[axis]
        irfft = bool(inverse and onesided)
        length_input = optional(inputs, 1)
        length: int | Poly
        if length_input is not None:
            length = _one_int(node, length_input, "dft_length")
            if length < 1:
                raise node.fail(f"dft_length is {length}; it must be at least 1")
            if irfft:
                self.check_irfft_bins(node, axis, bins, length)
        else:  # the axis's own samples: over a symbolic axis a length the run's input decides
            whole = 2 * (bins - 1) if irfft else bins
            if whole.is_const and whole.const_value < 1:
                raise node.fail(f"dft_length is {whole}; it must be at least 1")
            if not whole.is_const:
                owed.owe(whole - 1, node, f"dft_length {whole} of axis {axis} is at least 1")
            length = whole.const_value if whole.is_const else whole
        out = Poly.lift(length) if irfft or not onesided else derived.floordiv(length, 2) + 1
        shape = (*x.shape[:axis], out, *x.shape[axis + 1 : -1], Poly.const(1 if irfft else 2))
        return {"axis": axis, "dft_length": length, "inverse": inverse, "onesided": onesided}, shape

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 1, 3 if node.since >= 20 else 2)
        params, shape = self.plan(node, inputs)
        x = given(node, inputs, 0, "input")
        value = None
        length = params["dft_length"]
        if x.value is not None and not is_symbolic(x) and isinstance(length, int):  # a value has numbers as extents
            value = kernel_dft(
                x.value, axis=params["axis"], dft_length=length, inverse=params["inverse"], onesided=params["onesided"]
            )
        return [Facts(x.elem, shape, value)]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        assert inputs[0] is not None
        return [keep_unchanged(inputs[0], outputs[0])]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import DftOp

        x = operands[0]
        assert x is not None
        params, _ = self.plan(node, operand_facts(operands))
        return emit_library(ctx, DftOp([x], [ctx.result_types[0]], node.name, **params))


class StftRule(OpRule):
    """ONNX STFT (opset 17): the DFT of each frame of a real or complex signal [batch, length, 1 or 2],
    frames of frame_length samples one every frame_step, each times the window (ones when absent), as
    [batch, frames, bins, 2]; `onesided` (the default) keeps the first frame_length // 2 + 1 bins."""

    op_types = ("STFT",)
    kernels: tuple[str, ...] = ("kernel.stft",)
    attributes = frozenset({"onesided"})
    first_opset = 17
    elem_types = FLOAT_TYPES
    limitations = (
        "frame_step and frame_length from symbolic extents (a Shape) are refused, as is a window of a symbolic "
        "extent; a window or frame_length must be given (without either onnxruntime fails); the signal has rank 3"
    )

    def plan(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> tuple[StftParams, tuple[Poly, ...]]:
        """The kernel's parameters and the output's extents (stage 0 and lowering both ask).

        frame_step or frame_length only the run gives is left out of the parameters (the kernel
        reads its operand), and the extents it decides are lengths only the run knows."""
        signal = given(node, inputs, 0, "signal")
        require_elem(node, signal, self.elem_types, "the signal")
        if signal.rank == 2:
            raise node.unsupported("the signal has rank 2; Loam takes [batch, length, 1 or 2], as ONNX defines it")
        if signal.rank != 3:
            raise node.fail(f"the signal has rank {signal.rank}; ONNX takes [batch, length, 1 or 2]")
        _trailing(node, signal, "the signal")
        size = signal.shape[1]
        step = _one_int_or_run(node, given(node, inputs, 1, "frame_step"), "frame_step")
        if step is not None and step < 1:
            raise node.fail(f"frame_step is {step}; it must be at least 1")
        window, length_input = optional(inputs, 2), optional(inputs, 3)
        length = None if length_input is None else _one_int_or_run(node, length_input, "frame_length")
        length_run = length_input is not None and length is None  # the kernel reads it (and checks a window's)
        if window is not None:
            if window.elem != signal.elem:
                raise node.fail(f"the window has element type {window.elem.name} and the signal {signal.elem.name}")
            if window.rank != 1:
                raise node.fail(f"the window has rank {window.rank}; ONNX takes a vector")
            extent = _static(node, window.shape[0], "the window")
            if length is not None and length != extent:
                raise node.fail(f"the window holds {extent} values but frame_length is {length}; ONNX needs them equal")
            length = extent
        if length is None and not length_run:
            raise node.unsupported(
                "neither a window nor frame_length is given: ONNX then frames the whole signal, which onnxruntime "
                "refuses; give frame_length"
            )
        if length is not None and length < 1:
            raise node.fail(f"frame_length is {length}; it must be at least 1")
        if length is not None and size.is_const and length > size.const_value:
            raise node.fail(f"frame_length is {length}; it must lie in [1, {size}], the signal's length")
        if length is not None and not size.is_const:  # the run's signal must hold one frame
            owed.owe(size - length, node, f"the signal's length (axis 1) holds a frame of {length} samples")
        onesided = int_attr(node, "onesided", 1, (0, 1))
        params: StftParams = {}
        if step is not None:
            params["frame_step"] = step
        if length is not None and not length_run:
            params["frame_length"] = length
        params["onesided"] = onesided
        frames = node.result_length(0, 1)
        if step is not None and length is not None:
            frames = derived.floordiv(size - length, step) + 1
        bins = node.result_length(0, 2) if length is None else Poly.const(length // 2 + 1 if onesided else length)
        shape = (signal.shape[0], frames, bins, Poly.const(2))
        return params, shape

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 2, 4)
        params, shape = self.plan(node, inputs)
        signal, window = given(node, inputs, 0, "signal"), optional(inputs, 2)
        value = None
        known = [f for f in (signal, window) if f is not None]
        if len(params) == 3 and all(f.value is not None and not is_symbolic(f) for f in known):
            value = kernel_stft(*[np.asarray(f.value) for f in known], **params)
        return [Facts(signal.elem, shape, value)]

    def axes(
        self, node: NodeInfo, inputs: Sequence[tuple[Axis, ...] | None], outputs: Sequence[Facts]
    ) -> list[tuple[Axis | None, ...]]:
        signal = inputs[0]
        assert signal is not None
        parts = signal[2] if signal[2].extent == outputs[0].shape[3] else None
        return [(signal[0], None, None, parts)]  # frames and bins are new: the layout names them

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import StftOp

        signal = operands[0]
        assert signal is not None
        params, _ = self.plan(node, operand_facts(operands))
        step = None if "frame_step" in params else operands[1]  # the run gives it: the kernel reads it
        window = operands[2] if len(operands) > 2 else None
        length = operands[3] if "frame_length" not in params and len(operands) > 3 else None
        present = [v for v in (signal, step, window, length) if v is not None]
        return emit_library(ctx, StftOp(present, [ctx.result_types[0]], node.name, **params))


# MelWeightMatrix's output types, as numpy names the kernel stores them in.
_MEL_TYPES = {"f32": "float32", "f64": "float64", "f16": "float16"}


class MelWeightMatrixRule(OpRule):
    """ONNX MelWeightMatrix (opset 17): the [dft_length // 2 + 1, num_mel_bins] weights that turn a
    linear spectrogram into mel bands, of element type `output_datatype` (f32 by default)."""

    op_types = ("MelWeightMatrix",)
    kernels: tuple[str, ...] = ("kernel.mel_weight_matrix",)
    attributes = frozenset({"output_datatype"})
    first_opset = 17
    elem_types = tuple(_MEL_TYPES)
    limitations = "with every operand known the matrix is a constant of the module; output_datatype f32, f64 or f16"

    def params(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> MelWeightMatrixParams:
        """The `kernel.mel_weight_matrix` parameters, from the extent operands and the attribute:
        without num_mel_bins and dft_length where the run gives either (the kernel reads both)."""
        mel = _one_int_or_run(node, given(node, inputs, 0, "num_mel_bins"), "num_mel_bins")
        dft = _one_int_or_run(node, given(node, inputs, 1, "dft_length"), "dft_length")
        if (mel is not None and mel < 1) or (dft is not None and dft < 1):
            raise node.fail(f"num_mel_bins ({mel}) and dft_length ({dft}) must be positive")
        code = int(node.attr("output_datatype", 1))
        elem = dtypes.BY_ONNX.get(code)
        if elem is None or elem.name not in _MEL_TYPES:
            raise node.unsupported(f"output_datatype {code} is not one of {', '.join(_MEL_TYPES)}")
        if mel is None or dft is None:
            return {"dtype": _MEL_TYPES[elem.name]}
        return {"num_mel_bins": mel, "dft_length": dft, "dtype": _MEL_TYPES[elem.name]}

    def infer(self, node: NodeInfo, inputs: Sequence[Facts | None]) -> list[Facts]:
        require_arity(node, inputs, 5)
        params = self.params(node, inputs)
        rate = given(node, inputs, 2, "sample_rate")
        require_elem(node, rate, ("i32", "i64"), "sample_rate")
        edges = [given(node, inputs, i, what) for i, what in ((3, "lower_edge_hertz"), (4, "upper_edge_hertz"))]
        for f, what in zip(edges, ("lower_edge_hertz", "upper_edge_hertz"), strict=True):
            require_elem(node, f, FLOAT_TYPES, what)
        scalars = [rate, *edges]
        for f, what in zip(scalars, ("sample_rate", "lower_edge_hertz", "upper_edge_hertz"), strict=True):
            if any(d != Poly.const(1) for d in f.shape):
                raise node.fail(f"{what} must be one value, got extents [{', '.join(map(str, f.shape))}]")
        value = None
        if "num_mel_bins" not in params:  # lengths only the run knows
            elem = dtypes.by_name(next(k for k, v in _MEL_TYPES.items() if v == params["dtype"]))
            return [Facts(elem, (node.result_length(0, 0), node.result_length(0, 1)))]
        if all(f.value is not None and not is_symbolic(f) for f in scalars):
            try:
                value = kernel_mel_weight_matrix(*(np.asarray(f.value) for f in scalars), **params)
            except DataError as err:
                raise node.fail(str(err)) from None
        elem = dtypes.by_name(next(k for k, v in _MEL_TYPES.items() if v == params["dtype"]))
        shape = (Poly.const(int(params["dft_length"]) // 2 + 1), Poly.const(int(params["num_mel_bins"])))
        return [Facts(elem, shape, value)]

    def lower(self, ctx: LowerContext, node: NodeInfo, operands: Sequence[SSAValue | None]) -> list[SSAValue]:
        from loam.dialects.kernel import MelWeightMatrixOp

        params = self.params(node, operand_facts(operands))
        scalars = [v for v in operands[0 if "num_mel_bins" not in params else 2 :] if v is not None]
        return emit_library(ctx, MelWeightMatrixOp(scalars, ctx.result_types[:1], node.name, **params))


RULES: tuple[OpRule, ...] = (WindowRule(), DftRule(), StftRule(), MelWeightMatrixRule())
