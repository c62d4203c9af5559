"""Operator rules of the pool family."""

from __future__ import annotations

from loam.ops.base import OpRule

RULES: tuple[OpRule, ...] = ()
