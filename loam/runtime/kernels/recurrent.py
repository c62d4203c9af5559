"""Library kernels of the recurrent family (see `loam/runtime/kernels/__init__.py`): `kernel.rnn`,
`kernel.gru` and `kernel.lstm`, ONNX's RNN, GRU and LSTM as onnxruntime computes them.

One loop over the time steps runs every direction at once: the input's products with W (and the
biases that do not depend on the state) for all steps first, then per step one batched product of
the state with R.  A reverse direction reads each batch entry's first `sequence_lens[b]` steps
backwards.  Past its length an entry's state stands still and its outputs are zero; an entry of
length 0 has zero final states, as onnxruntime gives them.  Halves are computed in f32 and narrowed.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from loam.runtime.errors import DataError
from loam.runtime.kernels.common import narrowed, widened
from loam.runtime.kernels.elementwise import rnn_activation


def _rnn_each(v: np.ndarray, acts: list[tuple[str, float, float]], clip: float) -> np.ndarray:
    """`v` [directions, ...] clipped to [-clip, clip] (clip > 0) and put through each direction's
    activation (name, alpha, beta): one call when the directions share it."""
    if clip > 0:
        v = np.clip(v, v.dtype.type(-clip), v.dtype.type(clip))
    if all(a == acts[0] for a in acts):
        return rnn_activation(v, *acts[0])
    return np.stack([rnn_activation(v[d], *act) for d, act in enumerate(acts)])


def _recurrent(
    kind: str,
    x: np.ndarray,
    w: np.ndarray,
    r: np.ndarray,
    extra: tuple[np.ndarray, ...],
    present: int,
    direction: str,
    activations: str,
    alphas: tuple[float, ...],
    betas: tuple[float, ...],
    clip: float,
    layout: int,
    flag: int,
) -> tuple[np.ndarray, ...]:
    """RNN, GRU or LSTM (`kind`), its optional operands `extra` in ONNX order as `present` says
    (bits: 1 B, 2 sequence_lens, 4 initial_h, 8 initial_c, 16 P); `flag` is GRU's
    linear_before_reset or LSTM's input_forget.  Returns Y, Y_h (and Y_c for an LSTM)."""
    operands = iter(extra)
    given = {n: next(operands) for bit, n in enumerate(("b", "lens", "h0", "c0", "p")) if present >> bit & 1}
    dtype = np.asarray(x).dtype
    xs = widened(x)
    ct = xs.dtype
    # astype(copy=False): operands are only read (each state is rebound, never written in place)
    states = [widened(given[n]).astype(ct, copy=False) if n in given else None for n in ("h0", "c0")]
    if layout:
        xs = np.swapaxes(xs, 0, 1)
        states = [None if s is None else np.swapaxes(s, 0, 1) for s in states]
    steps, batch = xs.shape[0], xs.shape[1]
    w, r = widened(w).astype(ct, copy=False), widened(r).astype(ct, copy=False)
    dirs, hidden = w.shape[0], r.shape[-1]
    h, c = (np.zeros((dirs, batch, hidden), ct) if s is None else s for s in states)
    # Without sequence_lens every entry runs every step: no masks, and a reverse direction reads the steps backwards
    ragged = "lens" in given
    if ragged:
        lens = np.asarray(given["lens"], dtype=np.int64)
        outside = np.flatnonzero((lens < 0) | (lens > steps))
        if outside.size:
            first = int(outside[0])
            raise DataError(
                f"{kind.upper()}: sequence_lens[{first}] is {int(lens[first])}; each length must lie in [0, {steps}]"
            )
    else:
        lens = np.full(batch, steps, dtype=np.int64)
    reverse = [direction == "reverse" or d == 1 for d in range(dirs)]
    if ragged:
        # order[b, k]: the step a reverse direction reads k-th (its first lens[b] steps backwards)
        k = np.arange(steps)
        order = np.where(k < lens[:, None], lens[:, None] - 1 - k, k)
        entries = np.arange(batch)
        backwards = [xs[order.T, entries] if rev else xs for rev in reverse]
    else:
        backwards = [xs[::-1] if rev else xs for rev in reverse]
    xd = backwards[0][None] if dirs == 1 else np.stack(backwards)  # [D, S, B, I]
    pre = np.matmul(xd, np.swapaxes(w, 1, 2)[:, None])  # [D, S, B, G*H]
    names = activations.split(",")
    per = len(names) // dirs
    acts = [[(names[d * per + j], alphas[d * per + j], betas[d * per + j]) for d in range(dirs)] for j in range(per)]
    bias = widened(given["b"]).astype(ct, copy=False) if "b" in given else np.zeros((dirs, 2 * w.shape[1]), ct)
    wb, rb = bias[:, : w.shape[1]], bias[:, w.shape[1] :]
    rb_h = rb[:, None, 2 * hidden :]
    if kind == "gru" and flag:  # linear_before_reset: Rb[h] is added to the state's product, inside r
        pre += np.concatenate([wb[:, : 2 * hidden] + rb[:, : 2 * hidden], wb[:, 2 * hidden :]], axis=1)[:, None, None]
    else:
        pre += (wb + rb)[:, None, None]
    rt = np.swapaxes(r, 1, 2)  # [D, H, G*H]
    if "p" in given:  # an LSTM's peepholes
        p = widened(given["p"]).astype(ct, copy=False)
        p_i, p_o, p_f = (p[:, None, j * hidden : (j + 1) * hidden] for j in range(3))
    ys = np.zeros((dirs, steps, batch, hidden), ct)
    zero = ct.type(0)
    run = (int(lens.max()) if ragged else steps) if batch else 0
    for t in range(run):
        if kind == "rnn":
            h_new = _rnn_each(pre[:, t] + np.matmul(h, rt), acts[0], clip)
        elif kind == "gru":
            zr = _rnn_each(pre[:, t, :, : 2 * hidden] + np.matmul(h, rt[:, :, : 2 * hidden]), acts[0], clip)
            z, reset = zr[..., :hidden], zr[..., hidden:]
            if flag:
                hh = pre[:, t, :, 2 * hidden :] + reset * (np.matmul(h, rt[:, :, 2 * hidden :]) + rb_h)
            else:
                hh = pre[:, t, :, 2 * hidden :] + np.matmul(reset * h, rt[:, :, 2 * hidden :])
            h_new = (1 - z) * _rnn_each(hh, acts[1], clip) + z * h
        else:
            g = pre[:, t] + np.matmul(h, rt)  # gates i, o, f, c
            if "p" in given:
                i = _rnn_each(g[..., :hidden] + p_i * c, acts[0], clip)
                f = 1 - i if flag else _rnn_each(g[..., 2 * hidden : 3 * hidden] + p_f * c, acts[0], clip)
                c_new = f * c + i * _rnn_each(g[..., 3 * hidden :], acts[1], clip)
                o = _rnn_each(g[..., hidden : 2 * hidden] + p_o * c_new, acts[0], clip)
            else:  # no peepholes (as onnxruntime computes them): gates i, o, f through f in one call
                iof = _rnn_each(g[..., : 3 * hidden], acts[0], clip)
                i, o = iof[..., :hidden], iof[..., hidden : 2 * hidden]
                f = 1 - i if flag else iof[..., 2 * hidden :]
                c_new = f * c + i * _rnn_each(g[..., 3 * hidden :], acts[1], clip)
            h_new = o * _rnn_each(c_new, acts[2], 0.0)
            c = np.where((t < lens)[None, :, None], c_new, c) if ragged else c_new
        if ragged:
            active = (t < lens)[None, :, None]
            h = np.where(active, h_new, h)
            ys[:, t] = np.where(active, h_new, zero)
        else:
            h = ys[:, t] = h_new
    for d, rev in enumerate(reverse):
        if rev:
            ys[d] = ys[d][order.T, entries] if ragged else ys[d][::-1].copy()
    finals = [h, c] if kind == "lstm" else [h]
    if ragged or not steps:  # an entry of length 0 has zero final states
        empty = (lens == 0)[None, :, None]
        finals = [np.where(empty, zero, s) for s in finals]
    if layout:
        y = ys.transpose(2, 1, 0, 3)
        finals = [s.transpose(1, 0, 2) for s in finals]
    else:
        y = ys.transpose(1, 0, 2, 3)
    return tuple(narrowed(np.ascontiguousarray(v), dtype) for v in (y, *finals))


def kernel_rnn(
    x: np.ndarray,
    w: np.ndarray,
    r: np.ndarray,
    *extra: np.ndarray,
    direction: str,
    activations: str,
    alphas: tuple[float, ...],
    betas: tuple[float, ...],
    clip: float,
    layout: int,
    present: int,
) -> tuple[np.ndarray, ...]:
    """ONNX RNN: H = f(X W^T + H R^T + Wb + Rb), per direction; `activations` one per direction
    (comma-joined), `alphas`/`betas` one per activation, `clip` 0 for none; `extra` holds B,
    sequence_lens, initial_h where `present` has bits 1, 2, 4.  Returns Y and Y_h."""
    return _recurrent("rnn", x, w, r, extra, present, direction, activations, alphas, betas, clip, layout, 0)


def kernel_gru(
    x: np.ndarray,
    w: np.ndarray,
    r: np.ndarray,
    *extra: np.ndarray,
    direction: str,
    activations: str,
    alphas: tuple[float, ...],
    betas: tuple[float, ...],
    clip: float,
    layout: int,
    linear_before_reset: int,
    present: int,
) -> tuple[np.ndarray, ...]:
    """ONNX GRU (gates z, r, h; activations f, g per direction): z, r = f(X W^T + H R^T + Wb + Rb),
    h~ = g(X Wh^T + (r H) Rh^T + Wbh + Rbh), or with `linear_before_reset` g(X Wh^T + r (H Rh^T +
    Rbh) + Wbh); H = (1 - z) h~ + z H.  Operands as for `kernel_rnn`.  Returns Y and Y_h."""
    return _recurrent(
        "gru", x, w, r, extra, present, direction, activations, alphas, betas, clip, layout, linear_before_reset
    )


def kernel_lstm(
    x: np.ndarray,
    w: np.ndarray,
    r: np.ndarray,
    *extra: np.ndarray,
    direction: str,
    activations: str,
    alphas: tuple[float, ...],
    betas: tuple[float, ...],
    clip: float,
    layout: int,
    input_forget: int,
    present: int,
) -> tuple[np.ndarray, ...]:
    """ONNX LSTM (gates i, o, f, c; activations f, g, h per direction; peepholes P[iof]):
    i = f(.. + Pi C), f = f(.. + Pf C) (1 - i with `input_forget`), C = f C + i g(..),
    o = f(.. + Po C), H = o h(C).  `extra` holds B, sequence_lens, initial_h, initial_c, P where
    `present` has bits 1, 2, 4, 8, 16.  Returns Y, Y_h and Y_c."""
    return _recurrent(
        "lstm", x, w, r, extra, present, direction, activations, alphas, betas, clip, layout, input_forget
    )


PIECES: dict[str, Callable[..., object]] = {
    "_rnn_each": _rnn_each,
    "_recurrent": _recurrent,
    "kernel_rnn": kernel_rnn,
    "kernel_gru": kernel_gru,
    "kernel_lstm": kernel_lstm,
}
