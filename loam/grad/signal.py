"""The grad clauses of the Fourier transforms (`kernel.dft`, `kernel.stft`).

Both are real-linear in the signal once a complex value is read as its (real, imaginary) pair: along the
transformed axis the forward is a fixed real matrix D from (sample, part) to (bin, part), whatever
`inverse`, `onesided` and `dft_length` (padding or cropping) say.  D is built at build time by the
forward's own kernel (`loam.runtime.kernels.signal.kernel_dft`) run in float64 on unit inputs, so every
case the forward computes (an IRFFT ignoring the imaginary part of its first and Nyquist bins included)
has its exact adjoint, D^T.

- `kernel.dft`: dX = g through D^T along the axis and the trailing (real, imaginary) axis: one
  `kernel.einsum` of g and the [bins, parts, samples, parts] table.  dft_length and axis take none.
- `kernel.stft` (frame_step and frame_length known at build time): frame f reads the signal at
  f * step + j (j < frame_length), times the window w[j], then D along j.  With h = g through D^T
  (per frame, [batch, frames, j, parts]): dw[j] = sum over batch, frames and parts of h times the frames
  read (a `kernel.gather` at build-time positions), and dsignal = h * w (h without a window) added back
  to the positions the frames read (`kernel.scatter_nd`, reduction add: frames that overlap sum).
  A frame_step or frame_length only the run gives is refused.

D is dense: bins x samples x 4 entries at most (a few MB for frames of 512).
"""

from __future__ import annotations

import string

import numpy as np
from xdsl.ir import Operation, SSAValue

from loam.dialects.kernel import DftOp, EinsumOp, GatherOp, RegroupOp, ScatterNDOp, StftOp
from loam.dialects.tensor_axes import AxesTensorType, Axis
from loam.grad.base import Backward, Clause, constant, permuted, refuse, static_extent, type_of, zeros_like
from loam.runtime.kernels.signal import kernel_dft


def dft_table(samples: int, parts: int, *, dft_length: int, inverse: int, onesided: int) -> np.ndarray:
    """The transform of `samples` values of `parts` (1: real, 2: complex) as a [bins, parts out, samples,
    parts] array: entry (k, q, j, p) is the derivative of output (k, q) by input (j, p), from the forward's
    kernel run on each unit input in float64."""
    units = np.eye(samples * parts).reshape(samples * parts, samples, parts)
    out = kernel_dft(units, axis=1, dft_length=dft_length, inverse=inverse, onesided=onesided)
    return np.ascontiguousarray(np.moveaxis(out.reshape(samples, parts, *out.shape[1:]), (0, 1), (2, 3)))


def _through_table(b: Backward, g: SSAValue, axis: int, table: np.ndarray, to: AxesTensorType, node: str) -> SSAValue:
    """g (its transformed axis `axis` and trailing parts axis) through `table` [bins, parts out, samples,
    parts in]: the sum over k, q of g[.., k, .., q] table[k, q, j, p], as a tensor of type `to`."""
    t = type_of(g)
    rank = t.rank
    letters = string.ascii_letters[: rank + 2]
    term = letters[:rank]
    new_j, new_p = letters[rank], letters[rank + 1]
    out = term[:axis] + new_j + term[axis + 1 : rank - 1] + new_p
    axes = [t.axes[axis], t.axes[-1], Axis.named("Samples", to.shape[axis]), Axis.named("Parts", to.shape[-1])]
    held = constant(b, table, AxesTensorType(t.elem, axes), node)
    equation = f"{term},{term[axis]}{term[-1]}{new_j}{new_p}->{out}"
    return b.emit(EinsumOp([g, held], [to], f"{node}.grad", equation=equation))


def _dft(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, DftOp)
    x = op.inputs[0]
    t = type_of(x)
    axis = int(op.param("axis"))
    samples, parts = static_extent(op, t, axis), static_extent(op, t, t.rank - 1)
    table = dft_table(
        samples,
        parts,
        dft_length=int(op.param("dft_length")),
        inverse=int(op.param("inverse")),
        onesided=int(op.param("onesided")),
    )
    b.send(x, _through_table(b, g, axis, table, t, node))


def _stft(b: Backward, op: Operation, g: SSAValue, node: str) -> None:
    assert isinstance(op, StftOp)
    if "frame_step" not in op.params or "frame_length" not in op.params:
        raise refuse(op, "no grad clause for an STFT whose frame_step or frame_length only the run gives")
    signal = op.inputs[0]
    window = op.inputs[1] if len(op.inputs) > 1 else None
    step, length = int(op.param("frame_step")), int(op.param("frame_length"))
    st, gt = type_of(signal), type_of(g)
    size, parts = static_extent(op, st, 1), static_extent(op, st, 2)
    frames = (size - length) // step + 1
    batch, frame_axis, part_axis = st.axes[0], gt.axes[1], st.axes[2]
    taps = type_of(window).axes[0] if window is not None else Axis.named("FrameTaps", length)
    table = dft_table(length, parts, dft_length=length, inverse=0, onesided=int(op.param("onesided")))
    per_tap = AxesTensorType(st.elem, [batch, frame_axis, taps, part_axis])
    h = _through_table(b, g, 2, table, per_tap, node)  # d loss / d (windowed frames)
    at = np.arange(frames)[:, None] * step + np.arange(length)  # where frame f's tap j reads the signal
    if window is not None and window in b.needed:  # dw[j] = sum of h * frames over batch, frames, parts
        positions = constant(b, at, AxesTensorType("i64", [frame_axis, taps]), node)
        read = b.emit(GatherOp([signal, positions], [per_tap], f"{node}.grad", axis=1))
        b.send(window, b.emit(EinsumOp([h, read], [type_of(window)], f"{node}.grad", equation="bfjp,bfjp->j")))
    if signal not in b.needed:
        return
    if window is not None:
        h = b.emit(EinsumOp([h, window], [per_tap], f"{node}.grad", equation="bfjp,j->bfjp"))
    # Each frame tap's share added back where it was read: the signal's length axis first (ScatterND's).
    picked = Axis.named("Picked", frames * length)
    updates = b.emit(
        RegroupOp(
            permuted(b, h, [1, 2, 0, 3], node), AxesTensorType(st.elem, [picked, batch, part_axis]), f"{node}.grad"
        )
    )
    indices = constant(b, at.reshape(-1, 1), AxesTensorType("i64", [picked, Axis.named("Unit", 1)]), node)
    zeros = zeros_like(b, permuted(b, signal, [1, 0, 2], node), node)
    added = b.emit(ScatterNDOp([zeros, indices, updates], [type_of(zeros)], f"{node}.grad", reduction="add"))
    b.send(signal, permuted(b, added, [1, 0, 2], node))


CLAUSES: dict[type[Operation], Clause] = {DftOp: _dft, StftOp: _stft}
