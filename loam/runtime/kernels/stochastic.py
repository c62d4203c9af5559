"""The library kernel that draws random values: ONNX RandomNormal, RandomUniform, their Like forms and
Bernoulli (`kernel.random`).

Every draw reads a numpy `Generator`.  forward makes one from its `seed` argument and hands it to each
draw in program order, so one seed repeats a whole run; given no seed, a node's own `seed` attribute
seeds that node's draws (they repeat, as ONNX means the attribute), and a node without one draws
from fresh entropy.  Numbers are numpy's (PCG64), not onnxruntime's: one seed repeats Loam's run,
never onnxruntime's.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from loam.runtime.kernels.common import widened


def kernel_random(
    x: np.ndarray | None,
    rng: np.random.Generator | None,
    *,
    dist: str,
    a: float,
    b: float,
    to: str,
    shape: tuple[int, ...] = (),
    seed: float | None = None,
) -> np.ndarray:
    """Values of type `to` drawn from `dist` over x's extents (`shape` without x): `normal` with mean
    `a` and standard deviation `b`, `uniform` in [`a`, `b`), `bernoulli` 1 where a uniform draw falls
    below x's probability, else 0.  `rng` is forward's generator (None: seeded by `seed` if given)."""
    if rng is None:
        # The node's float seed by its 64 bits: every seed its own stream, a negative one included.
        rng = np.random.default_rng(None if seed is None else np.array([seed], np.float64).view(np.uint64))
    extents = shape if x is None else x.shape
    if dist == "bernoulli":
        assert x is not None  # the op's verifier: Bernoulli reads its probabilities
        return (rng.random(extents) < widened(x)).astype(to)
    wide = np.float64 if np.dtype(to) == np.float64 else np.float32  # f16 is drawn in f32, then narrowed
    if dist == "normal":
        drawn = rng.standard_normal(extents, dtype=wide) * wide(b) + wide(a)
    else:
        drawn = rng.random(extents, dtype=wide) * wide(b - a) + wide(a)
    return drawn.astype(to, copy=False)


PIECES: dict[str, Callable[..., object]] = {"kernel_random": kernel_random}
