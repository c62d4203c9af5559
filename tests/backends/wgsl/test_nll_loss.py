"""The WGSL nll_loss kernel against the numpy kernel `kernel_nll_loss`, as in `test_library_kernels.py`.

The numpy kernel is itself checked against onnxruntime (tests/ops/) and ONNX's node cases; here the
shader must give its results: every reduction, with and without weights, with ignore_index (a
negative one, one past the classes, one no target holds, one outside i32), x of rank 2 to 5, halves,
i32 targets, more targets than one workgroup (and than one invocation's share), every target ignored
(mean is NaN), and no targets at all.
"""

from __future__ import annotations

import numpy as np
import pytest

from loam.backends.wgsl_kernels import losses
from loam.core.errors import UnsupportedError
from loam.runtime.kernels import PIECES as NP
from tests.backends.wgsl.test_library_kernels import check, floats, run

CASES = [
    # x extents
    (3, 5),
    (2, 4, 3),
    (2, 3, 4, 5),
    (1, 2, 2, 3, 2),
    (70, 6),  # past one workgroup
    (9, 4, 300),  # many targets per invocation of the reducing workgroup
    (0, 3),  # no targets
]


def targets(rng: np.random.Generator, xs: tuple[int, ...], ignore_index: int | None, dtype: str) -> np.ndarray:
    """Targets in [0, C), about a quarter of them `ignore_index` where one is given."""
    shape = (xs[0], *xs[2:])
    t = rng.integers(0, xs[1], shape)
    if ignore_index is not None:
        t = np.where(rng.random(shape) < 0.25, ignore_index, t)
    return t.astype(dtype)


@pytest.mark.parametrize("xs", CASES)
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore_index", [None, -1, 1, 7])
def test_nll_loss(xs: tuple[int, ...], reduction: str, weighted: bool, ignore_index: int | None) -> None:
    rng = np.random.default_rng(sum(xs) + weighted + (ignore_index or 0))
    x = floats(rng, xs)
    t = targets(rng, xs, ignore_index, "int64")
    operands = [x, t] + ([rng.uniform(0.2, 2.0, xs[1]).astype(np.float32)] if weighted else [])
    kw = dict(reduction=reduction, ignore_index=ignore_index or 0, ignores=int(ignore_index is not None))
    with np.errstate(invalid="ignore"):  # the mean of no targets: 0 / 0
        want = NP["kernel_nll_loss"](*operands, **kw)
    (got,) = run(losses, "nll_loss", operands, [want], **kw)
    check(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_halves(dtype: str, reduction: str) -> None:
    rng = np.random.default_rng(5)
    x = floats(rng, (4, 3, 6), dtype)
    w = floats(rng, (3,), dtype)
    t = targets(rng, (4, 3, 6), -100, "int32")
    kw = dict(reduction=reduction, ignore_index=-100, ignores=1)
    want = NP["kernel_nll_loss"](x, t, w, **kw)
    (got,) = run(losses, "nll_loss", [x, t, w], [want], **kw)
    check(got, want)


def test_every_target_ignored() -> None:
    x = floats(np.random.default_rng(6), (3, 4))
    t = np.full(3, 2, np.int64)
    for reduction, expected in (("none", [0.0] * 3), ("sum", 0.0), ("mean", np.nan)):
        kw = dict(reduction=reduction, ignore_index=2, ignores=1)
        with np.errstate(invalid="ignore"):
            want = NP["kernel_nll_loss"](x, t, **kw)
        np.testing.assert_array_equal(want, np.asarray(expected, np.float32))
        (got,) = run(losses, "nll_loss", [x, t], [want], **kw)
        np.testing.assert_array_equal(got, want)


def test_an_ignore_index_outside_i32_ignores_no_target() -> None:
    x = floats(np.random.default_rng(8), (5, 3))
    t = np.array([0, 1, 2, 1, 0], np.int64)
    kw = dict(reduction="none", ignore_index=2**32, ignores=1)  # its low 32 bits are 0, a target here
    want = NP["kernel_nll_loss"](x, t, **kw)
    np.testing.assert_array_equal(want, -x[np.arange(5), t])
    (got,) = run(losses, "nll_loss", [x, t], [want], **kw)
    np.testing.assert_array_equal(got, want)


def test_refusals() -> None:
    with pytest.raises(UnsupportedError, match="targets of element type f32"):
        losses.source_nll_loss([("f32", 2), ("f32", 1)], [("f32", 1)], reduction="none")
    with pytest.raises(UnsupportedError, match="x of element type i32"):
        losses.source_nll_loss([("i32", 2), ("i64", 1)], [("i32", 1)], reduction="none")
