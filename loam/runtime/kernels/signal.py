"""Library kernels of the signal family (see `loam/runtime/kernels/__init__.py`): `kernel.dft` and
`kernel.stft`, ONNX's discrete and short-time Fourier transforms, and `kernel.mel_weight_matrix`.

ONNX holds a complex value as a trailing axis of two (real, imaginary) and a real one as a trailing
axis of one.  Halves (f16, bf16) are transformed in f32 and the result narrowed to their type; f32
and f64 are transformed in their own precision (complex64, complex128).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from loam.runtime.errors import DataError
from loam.runtime.kernels.common import narrowed, one_integer, room_for, widened


def _complex_of(x: np.ndarray) -> np.ndarray:
    """`x` without its trailing axis, as complex numbers of its (widened) precision: real parts only
    (extent 1), or real and imaginary parts (extent 2)."""
    wide = widened(x)
    c = wide[..., 0].astype(np.result_type(wide.dtype, np.complex64))
    if wide.shape[-1] == 2:
        c.imag = wide[..., 1]
    return c


def _pairs_of(c: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Complex `c` as ONNX holds it: a trailing axis of (real, imaginary), stored as `dtype`."""
    return narrowed(np.stack([c.real, c.imag], axis=-1), dtype)


def kernel_window(size: np.ndarray, *, kind: str, periodic: int, to: str) -> np.ndarray:
    """ONNX HannWindow, HammingWindow or BlackmanWindow (`kind`: hann, hamming, blackman) of the
    length `size` holds (one integer; a negative one is a DataError): w[n] = sum of a * cos(2 pi k n
    / N) over the window's cosine terms (a, k), N the length (`periodic`) or the length - 1, computed
    in float64 and stored as `to` (numpy's name).  A symmetric window of one value is 0 / 0, NaN, as
    ONNX's function body computes it."""
    length = one_integer(size, "the window's size")
    if length < 0:
        raise DataError(f"the window's size is {length}; it must not be negative")
    room_for([length], f"the window's size {length}")
    terms = {
        "hann": ((0.5, 0), (-0.5, 1)),
        "hamming": ((25 / 46, 0), (-(1 - 25 / 46), 1)),
        "blackman": ((0.42, 0), (-0.5, 1), (0.08, 2)),
    }[kind]
    n = np.arange(length, dtype=np.float64)
    span = length if periodic else length - 1
    values = np.zeros(length, dtype=np.float64)
    with np.errstate(all="ignore"):
        for a, k in terms:
            values = values + a * np.cos(2 * np.pi * k * n / span)
    return values.astype(np.dtype(to))


def kernel_dft(x: np.ndarray, *, axis: int, dft_length: int, inverse: int, onesided: int) -> np.ndarray:
    """ONNX DFT of `x` ([..., 1] real or [..., 2] complex) along `axis`, over `dft_length` samples
    (the axis cut short or padded with zeros).  Forward: the spectrum, its first dft_length // 2 + 1
    bins when `onesided`.  Inverse: the signal, 1/dft_length times the sum; with `onesided` the real
    signal ([..., 1]) whose spectrum's first half `x` holds (numpy's irfft)."""
    x = np.asarray(x)
    c = _complex_of(x)
    if inverse and onesided:
        real = np.fft.irfft(c, n=dft_length, axis=axis)
        return narrowed(real[..., np.newaxis], x.dtype)
    y = np.fft.ifft(c, n=dft_length, axis=axis) if inverse else np.fft.fft(c, n=dft_length, axis=axis)
    if onesided:
        y = np.take(y, np.arange(dft_length // 2 + 1), axis=axis)
    return _pairs_of(y, x.dtype)


def kernel_stft(
    signal: np.ndarray, *operands: np.ndarray, frame_step: int = 0, frame_length: int = 0, onesided: int
) -> np.ndarray:
    """ONNX STFT of `signal` [batch, length, 1 or 2]: the DFT of each frame of `frame_length` samples,
    starting every `frame_step`, times the window (ones when absent), as [batch, frames, bins, 2] with
    frames = (length - frame_length) // frame_step + 1 and bins the frame's length, or its first
    frame_length // 2 + 1 when `onesided`.

    `operands` are, in ONNX's order: frame_step as the run gives it (only where the parameter is
    absent, 0), the window if any, and frame_length as the run gives it (only where that parameter is
    absent).  A frame_step below 1, a frame_length outside [1, length] or a window of another length
    is a DataError."""
    rest = list(operands)
    if frame_step == 0:
        frame_step = one_integer(rest.pop(0), "STFT's frame_step")
        if frame_step < 1:
            raise DataError(f"STFT's frame_step is {frame_step}; it must be at least 1")
    signal = np.asarray(signal)
    size = signal.shape[1]
    if frame_length == 0:
        frame_length = one_integer(rest.pop(), "STFT's frame_length")
        if not 1 <= frame_length <= size:
            raise DataError(f"STFT's frame_length is {frame_length}; it must lie in [1, {size}], the signal's length")
    window = rest[0] if rest else None
    if window is not None and np.shape(window) != (frame_length,):
        raise DataError(f"STFT's window has extents {list(np.shape(window))}; frame_length is {frame_length}")
    c = _complex_of(signal)
    frames = (size - frame_length) // frame_step + 1
    taken = c[:, np.arange(frames)[:, np.newaxis] * frame_step + np.arange(frame_length)]
    if window is not None:
        taken = taken * widened(window)
    y = np.fft.fft(taken, axis=-1)
    if onesided:
        y = y[..., : frame_length // 2 + 1]
    return _pairs_of(y, signal.dtype)


def kernel_mel_weight_matrix(
    *operands: np.ndarray, num_mel_bins: int = 0, dft_length: int = 0, dtype: str
) -> np.ndarray:
    """ONNX MelWeightMatrix: [dft_length // 2 + 1, num_mel_bins], column m the triangle of mel band m.

    The band edges split [mel(lower), mel(upper)] (mel(f) = 2595 log10(1 + f / 700)) into
    num_mel_bins + 2 equal steps, each point taken back to hertz and then to the spectrogram bin
    floor((dft_length + 1) f / sample_rate).  Band m rises linearly from its left edge to 1 at its
    centre and falls to 0 at its right edge (peaks of 1, as ONNX's reference and onnxruntime
    compute them).  Computes in f64, stored as `dtype`.  DataError: a band edge outside the
    spectrogram's bins, or a sample_rate that is not positive.

    `operands` are (sample_rate, lower_edge_hertz, upper_edge_hertz), or (num_mel_bins, dft_length,
    sample_rate, lower_edge_hertz, upper_edge_hertz) where the run gives those two (a count below 1
    is then a DataError) and the parameters are absent.
    """
    if len(operands) == 5:
        num_mel_bins = one_integer(operands[0], "MelWeightMatrix's num_mel_bins")
        dft_length = one_integer(operands[1], "MelWeightMatrix's dft_length")
        if num_mel_bins < 1 or dft_length < 1:
            raise DataError(
                f"MelWeightMatrix: num_mel_bins ({num_mel_bins}) and dft_length ({dft_length}) must be positive"
            )
        operands = operands[2:]
    sample_rate, lower_edge_hertz, upper_edge_hertz = operands
    rate = int(np.asarray(sample_rate).reshape(-1)[0])
    low, high = (float(np.asarray(v, np.float64).reshape(-1)[0]) for v in (lower_edge_hertz, upper_edge_hertz))
    bins = dft_length // 2 + 1
    if rate <= 0:
        raise DataError(f"MelWeightMatrix: sample_rate is {rate}; it must be positive")
    low_mel, high_mel = (2595 * np.log10(1 + f / 700) for f in (low, high))
    mels = low_mel + np.arange(num_mel_bins + 2, dtype=np.float64) * ((high_mel - low_mel) / (num_mel_bins + 2))
    hertz = 700 * (10 ** (mels / 2595) - 1)
    edges = np.floor((dft_length + 1) * hertz / rate).astype(np.int64)
    if edges.min() < 0 or edges.max() >= bins:
        raise DataError(
            f"MelWeightMatrix: the bands of [{low}, {high}] Hz at sample_rate {rate} reach spectrogram bins "
            f"{int(edges.min())} to {int(edges.max())}, outside the {bins} bins of dft_length {dft_length}"
        )
    j = np.arange(bins, dtype=np.float64)[:, None]
    left, centre, right = (e[None, :].astype(np.float64) for e in (edges[:-2], edges[1:-1], edges[2:]))
    with np.errstate(divide="ignore", invalid="ignore"):
        rise = (j - left) / (centre - left)
        fall = (right - j) / (right - centre)
    out = np.where((j >= left) & (j < centre), rise, 0.0)
    out = np.where((j > centre) & (j < right), fall, out)
    out = np.where(j == centre, 1.0, out)
    return out.astype(dtype)


PIECES: dict[str, Callable[..., object]] = {
    "kernel_window": kernel_window,
    "_complex_of": _complex_of,
    "_pairs_of": _pairs_of,
    "kernel_dft": kernel_dft,
    "kernel_stft": kernel_stft,
    "kernel_mel_weight_matrix": kernel_mel_weight_matrix,
}
