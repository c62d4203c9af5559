"""The optional compiled path of LayerNormalization: a numba row kernel behind `layer_norm_rows`.

`layer_norm` (`loam/runtime/kernels/normalization.py`) takes seven numpy passes over x and about a
dozen numpy calls: at a decode step's [1, 1, 64] the calls are the cost (about 10 us a LayerNorm, a
quarter of a GPT-2 step), and at an encoder's [8, 128, 384] the passes are.  A loop compiled to
machine code reads each row once for its mean, once for its variance (two passes over a row that
stays in cache, as the numpy kernel computes them, where onnxruntime's CPU kernel takes one pass of
E[x^2] - mean^2) and once to write the result.  numba compiles it where it is installed; where it
is not, the module imports nothing more and `layer_norm_rows` calls the numpy kernel, which is also
the compiled kernel's test oracle (tests/runtime/test_norm_compiled.py).

- `_layer_norm_rows(x, scale, bias, epsilon, has_bias, out)`: out[i] = (x[i] - mean) * inv * scale
  (+ bias) over each row of a float32 x [M, N], its mean and variance accumulated in float32 as
  onnxruntime's float kernel accumulates them.
- `_CompiledNorms`: the kernel, compiled on first use in each process (`compiled.jitted`: 0.9 s with
  numba's import, measured at load 5; 0.3 s more for each further layout of x, such as a strided view),
  and whether LayerNorms use it.
- `layer_norm_rows(x, scale, bias, epsilon)`: what the numpy module calls for a float32 LayerNorm
  over the last axis (`layer_norm`'s operands).
- `set_compiled_norms(enabled)`: turns LayerNorm's compiled path off (or back on) for the process;
  `set_compiled(False)` turns every compiled kernel off, this one included.

Sums are float32 in another order than numpy's pairwise ones, so the two agree within float32
rounding of the statistics, not bit for bit (the bound is stated in the tests).  The kernel runs on
its caller's thread and releases the GIL.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from loam.runtime.kernels.compiled import jitted
from loam.runtime.kernels.normalization import layer_norm


def _layer_norm_rows(x: np.ndarray, scale: np.ndarray, bias: np.ndarray, epsilon: np.float32, has_bias: bool,
                     out: np.ndarray) -> None:  # fmt: skip
    """out [M, N] = (x - mean) / sqrt(var + epsilon) * scale (+ bias) per row of x [M, N], all float32;
    the arithmetic of `layer_norm` in its order (the product by the inverse, then scale, then bias)."""
    rows, n = x.shape
    count = np.float32(n)
    for i in range(rows):
        xi, oi = x[i], out[i]
        total = np.float32(0)
        for j in range(n):
            total += xi[j]
        mean = total / count
        squares = np.float32(0)
        for j in range(n):
            d = xi[j] - mean
            squares += d * d
        inv = np.float32(1) / np.sqrt(squares / count + epsilon)
        if has_bias:
            for j in range(n):
                oi[j] = (xi[j] - mean) * inv * scale[j] + bias[j]
        else:
            for j in range(n):
                oi[j] = (xi[j] - mean) * inv * scale[j]


class _CompiledNorms:
    """Whether LayerNorms use the compiled kernel, and the kernel.  A generated module evaluates these
    annotations (it has no `from __future__ import annotations`): builtins only."""

    enabled: bool = True  # this family's own switch (bench.norms times the module with it off and on)

    @classmethod
    def get(cls) -> dict | None:
        """The compiled kernel by name, made on first use (`jitted`, sums reassociated so the loops
        vectorize); None where it or the process's compiled path (`set_compiled`) is off, or numba is not
        installed."""
        return jitted((_layer_norm_rows,)) if cls.enabled else None


def layer_norm_rows(x: np.ndarray, scale: np.ndarray, bias: np.ndarray | None, epsilon: float) -> np.ndarray:
    """LayerNormalization over the last axis of a float32 `x` (of any layout), with float32 `scale` and
    `bias` along it (or None): the compiled kernel where numba is, else `layer_norm` (its oracle)."""
    kernels = _CompiledNorms.get()
    if kernels is None or x.size == 0:
        return layer_norm(x, scale, bias, epsilon)
    n = x.shape[-1]
    rows = x.reshape(-1, n)  # a copy only where x's layout has no such view
    out = np.empty(rows.shape, np.float32)
    kernels["_layer_norm_rows"](
        rows, scale, scale if bias is None else bias, np.float32(epsilon), bias is not None, out
    )
    return out.reshape(x.shape)


def set_compiled_norms(enabled: bool) -> bool:
    """Let LayerNorms use the compiled kernel (numba, where installed) from now on, in the whole process,
    or not; returns whether they were on before.  Without numba the numpy kernel runs either way."""
    if not isinstance(enabled, bool):
        raise ValueError(f"set_compiled_norms: enabled must be True or False, not {enabled!r}")
    before, _CompiledNorms.enabled = _CompiledNorms.enabled, enabled
    return before


PIECES: dict[str, Callable[..., object]] = {
    "_layer_norm_rows": _layer_norm_rows,
    "_CompiledNorms": _CompiledNorms,
    "layer_norm_rows": layer_norm_rows,
    "set_compiled_norms": set_compiled_norms,
}
