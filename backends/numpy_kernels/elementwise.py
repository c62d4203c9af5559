"""Library kernels of the elementwise family (see `backends/numpy_kernels/__init__.py`)."""

from __future__ import annotations

PIECES: dict[str, object] = {}
DEPENDS: dict[str, tuple[str, ...]] = {}
