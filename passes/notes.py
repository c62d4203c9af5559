"""Build notes: what a pass tells the user about a decision the build made for them.

A pass that changes what the module computes in a way a user may want to know (a weight widened at
load instead of kept packed, a BatchNormalization folded into a Conv's weights) leaves a sentence in
the module attribute `loam.notes`; `loam build` prints each one, and `BuildResult.notes` holds them.
Kept on the module, not in a pass's state, so a replay of the dumped IR with `loam-opt` sees them.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import ArrayAttr, ModuleOp, StringAttr

NOTES_ATTR = "loam.notes"
"""Module attribute: the build's notes that passes leave (an array of strings), printed by `loam build`."""


def add_notes(module: ModuleOp, notes: Sequence[str]) -> None:
    """Append `notes` to the module's build notes."""
    module.attributes[NOTES_ATTR] = ArrayAttr([*build_notes(module), *(StringAttr(n) for n in notes)])


def build_notes(module: ModuleOp) -> list[StringAttr]:
    """The module's build notes, in the order the passes left them."""
    found = module.attributes.get(NOTES_ATTR)
    return [n for n in found.data if isinstance(n, StringAttr)] if isinstance(found, ArrayAttr) else []
