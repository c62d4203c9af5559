"""Running one WGSL kernel on the machine's WebGPU adapter (llvmpipe in CI), for the kernel tests."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import pytest

from loam.backends.wgsl_limits import DEFAULT_LIMITS
from loam.backends.wgsl_runtime import _Gpu

wgpu = pytest.importorskip("wgpu")


@functools.cache
def gpu() -> _Gpu:
    """One device for the whole test process (creating one takes a few tenths of a second), at WebGPU's
    default limits as every module's is."""
    return _Gpu({}, {}, DEFAULT_LIMITS.webgpu())


def run_kernel(
    source: str,
    params: Sequence[int],
    grid: int,
    results: Sequence[tuple[str, tuple[int, ...]]],
    operands: Sequence[np.ndarray],
) -> list[np.ndarray]:
    """Compile `source`, run it once over `operands` (host arrays) with `params` and `grid`
    workgroups, and download `results` (host dtype name, shape) as host arrays."""
    g = gpu()
    name = f"k{hash(source) & 0xFFFFFFFF:x}"
    if name not in g.pipelines:
        g.add(name, source)
    outs = []
    for _, shape in results:
        count = int(np.prod(shape, dtype=np.int64))
        outs.append(g.buffer(count * 4))
    ins = [g.upload(f"operand {i}", a) for i, a in enumerate(operands)]
    g.begin()
    g.dispatch(name, (*outs, *ins), tuple(int(p) for p in params), grid)
    g.end()
    return [g.read(b, dtype, shape) for b, (dtype, shape) in zip(outs, results, strict=True)]
