"""Library kernels of signal processing: ONNX's discrete and short-time Fourier transforms (DFT,
STFT), its windows of a length only the run gives and its mel filter bank (MelWeightMatrix), listed in
`SIGNAL_OPS`.

A complex value is held as ONNX holds it, a trailing axis of two (real, imaginary); a real one as a
trailing axis of one.
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.irdl import irdl_op_definition

from loam.core.poly import Poly
from loam.dialects.kernel.library import LibraryOp, library_types, require


def _is(extent: object, value: int) -> bool:
    """Whether `extent` (a Poly) is the number `value`."""
    return isinstance(extent, Poly) and extent.is_const and extent.const_value == value


def _check_flags(op: LibraryOp, *names: str) -> None:
    for name in names:
        require(op, op.param(name) in (0, 1), f"{name} is {op.param(name)}, not 0 or 1")


@irdl_op_definition
class DftOp(LibraryOp):
    """ONNX DFT along `axis` (never the trailing one) over `dft_length` samples, the axis cut short
    or padded with zeros: the spectrum (`inverse` 0), its first dft_length // 2 + 1 bins of a real
    signal (`onesided`), the signal (`inverse` 1, scaled by 1 / dft_length), or the real signal of
    the first half of a spectrum (`inverse` and `onesided`: the result's trailing extent is 1).

    Example: `%y = kernel.dft(%x) {node = "dft", axis = 1 : i64, dft_length = 16 : i64, inverse = 0 : i64,
    onesided = 1 : i64} : (!tensor_axes.tensor<f32, [B: 2, T: 16, One: 1]>) -> !tensor_axes.tensor<f32, [B: 2,
    F: 9, Complex: 2]>`
    """

    name = "kernel.dft"
    PARAMS: ClassVar[dict[str, type]] = {"axis": int, "dft_length": int, "inverse": int, "onesided": int}

    def verify_kernel(self) -> None:
        ins, outs = library_types(self)
        require(self, len(ins) == 1 and len(outs) == 1, "takes one operand and gives one result")
        _check_flags(self, "inverse", "onesided")
        length = self.param("dft_length")  # over a symbolic axis, its extent (the run's)
        require(self, isinstance(length, Poly) or length >= 1, f"dft_length is {length}")
        x, out = ins[0], outs[0]
        if x is None or out is None:
            return
        axis = self.param("axis")
        require(self, 0 <= axis < len(x) - 1, f"axis {axis} is not a signal axis of rank {len(x)}")
        require(self, len(out) == len(x), "the result's rank is not the operand's")
        require(self, _is(x[-1], 1) or _is(x[-1], 2), "the operand's trailing extent is not 1 or 2")
        real_out = bool(self.param("inverse") and self.param("onesided"))
        require(self, _is(out[-1], 1 if real_out else 2), "the result's trailing extent does not fit the transform")


@irdl_op_definition
class StftOp(LibraryOp):
    """ONNX STFT of a signal [batch, length, 1 or 2] and an optional window [frame_length]: the DFT of
    each frame of `frame_length` samples, one every `frame_step`, times the window, as [batch, frames,
    bins, 2]; bins is frame_length, or frame_length // 2 + 1 when `onesided`.  Without the parameter
    `frame_step` (`frame_length`), an operand holds it as the run gives it, in ONNX's order (signal,
    frame_step, window, frame_length), and the extents it decides are lengths only the run knows.

    Example: `%y = kernel.stft(%s, %w) {node = "stft", frame_step = 8 : i64, frame_length = 16 : i64,
    onesided = 1 : i64} : (S, W) -> !tensor_axes.tensor<f32, [B: 1, Frames: 15, Bins: 9, Complex: 2]>`
    """

    name = "kernel.stft"
    PARAMS: ClassVar[dict[str, type]] = {"frame_step": int, "frame_length": int, "onesided": int}
    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"frame_step", "frame_length"})

    def verify_kernel(self) -> None:
        ins, outs = library_types(self)
        run = [name for name in ("frame_step", "frame_length") if name not in self.attributes]
        require(
            self,
            len(ins) - len(run) in (1, 2) and len(outs) == 1,
            "takes a signal, frame_step unless it is a parameter, an optional window, and frame_length unless it "
            "is a parameter",
        )
        _check_flags(self, "onesided")
        for name in ("frame_step", "frame_length"):
            if name not in run:
                require(self, self.param(name) >= 1, f"{name} is {self.param(name)}")
        signal, out = ins[0], outs[0]
        if signal is not None:
            require(self, len(signal) == 3, "the signal is not [batch, length, 1 or 2]")
        windowed = len(ins) - len(run) == 2
        window = ins[2 if "frame_step" in run else 1] if windowed else None
        if window is not None and "frame_length" not in run:
            require(self, len(window) == 1 and _is(window[0], self.param("frame_length")), "the window's extent")
        if out is not None:
            require(self, len(out) == 4 and _is(out[-1], 2), "the result is not [batch, frames, bins, 2]")


@irdl_op_definition
class MelWeightMatrixOp(LibraryOp):
    """ONNX MelWeightMatrix from its run-time scalars `(sample_rate, lower_edge_hertz, upper_edge_hertz)`:
    the [dft_length // 2 + 1, num_mel_bins] triangles of the mel bands, stored as numpy `dtype`.
    Where the run gives num_mel_bins and dft_length they lead the operands, and the parameters are absent.

    Example: `%w = kernel.mel_weight_matrix(%r, %lo, %hi) {node = "mel", num_mel_bins = 8 : i64,
    dft_length = 16 : i64, dtype = "float32"} : (R, L, H) -> !tensor_axes.tensor<f32, [Bins: 9, Mel: 8]>`
    """

    name = "kernel.mel_weight_matrix"
    PARAMS: ClassVar[dict[str, type]] = {"num_mel_bins": int, "dft_length": int, "dtype": str}
    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"num_mel_bins", "dft_length"})

    def verify_kernel(self) -> None:
        ins, outs = library_types(self)
        if len(ins) == 5:  # num_mel_bins and dft_length the run gives, then the scalars
            require(self, len(outs) == 1 and "num_mel_bins" not in self.params, "takes the five operands")
            return
        require(self, len(ins) == 3 and len(outs) == 1, "takes sample_rate, lower_edge_hertz and upper_edge_hertz")
        for name in ("num_mel_bins", "dft_length"):
            require(self, self.param(name) >= 1, f"{name} is {self.param(name)}")
        out = outs[0]
        if out is not None:
            want = (Poly.const(self.param("dft_length") // 2 + 1), Poly.const(self.param("num_mel_bins")))
            require(self, out == want, "the result is not [dft_length // 2 + 1, num_mel_bins]")


WINDOW_KINDS = ("hann", "hamming", "blackman")
"""The windows `kernel.window` computes (ONNX's HannWindow, HammingWindow, BlackmanWindow)."""


@irdl_op_definition
class WindowOp(LibraryOp):
    """ONNX HannWindow, HammingWindow or BlackmanWindow (`kind`) of the length its operand holds at
    run time, `periodic` or symmetric, of type `to` (numpy's name); its extent is a length only the
    run knows.  (A length the build knows folds to a constant: no kernel runs.)

    Example: `%w = kernel.window(%n) {node = "w", kind = "hann", periodic = 1 : i64, to = "float32"}
    : (!tensor_axes.tensor<i64, []>) -> !tensor_axes.tensor<f32, [Frame: w[0]]>`
    """

    name = "kernel.window"
    PARAMS: ClassVar[dict[str, type]] = {"kind": str, "periodic": int, "to": str}

    def verify_kernel(self) -> None:
        ins, outs = library_types(self)
        require(self, len(ins) == 1 and len(outs) == 1, "takes the size and gives one result")
        require(self, self.param("kind") in WINDOW_KINDS, f"kind is {self.param('kind')!r}, not one of {WINDOW_KINDS}")
        _check_flags(self, "periodic")
        if outs[0] is not None:
            require(self, len(outs[0]) == 1, "the result is not a vector")


SIGNAL_OPS: tuple[type[LibraryOp], ...] = (DftOp, StftOp, WindowOp, MelWeightMatrixOp)
