"""Library kernels of the normalization family (see `backends/numpy_kernels/__init__.py`)."""

from __future__ import annotations

PIECES: dict[str, object] = {}
DEPENDS: dict[str, tuple[str, ...]] = {}
