"""Loam: Lowered Operators, Ahead-of-time Modules.

The public Python API is `loam.build(...)` and `loam.Options`; see README.md.
"""

from __future__ import annotations

from loam.errors import LoamError

__all__ = ["LoamError"]
