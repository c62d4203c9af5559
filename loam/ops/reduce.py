"""Operator rules of the reduce family."""

from __future__ import annotations

from loam.ops.base import OpRule

RULES: tuple[OpRule, ...] = ()
