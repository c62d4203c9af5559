"""Operator rules of the einsum family."""

from __future__ import annotations

from loam.ops.base import OpRule

RULES: tuple[OpRule, ...] = ()
