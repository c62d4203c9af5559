"""draft-layout: name, as `loam layout` would, every axis the module's layout rules leave open.

Why a pass: an architecture table (`--architecture llama`) names a family's inputs and weights, and the
export's thousands of other tensors get drafted names (`loam.driver.draft`).  Drafting reads the graph after
stage 0 (extents as polynomials, constants folded), which is exactly the pipeline's own state after
`stage0`, so the draft runs there, on the graph the build already read, and its rules join the module's
`loam.layout` for `name-axes`.  The given rules keep their names; the drafted ones follow them.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from loam.dialects import build_contract as contract
from loam.driver.draft import draft_graph
from loam.passes.apply_options import main_graph


@dataclass(frozen=True)
class DraftLayoutPass(ModulePass):
    """Name, as `loam layout` would, every axis the module's layout rules leave open (after stage 0)."""

    name = "draft-layout"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        given = contract.LAYOUT.get(op) or ()
        draft = draft_graph(main_graph(op), given)
        contract.LAYOUT.set(op, (*given, *draft.rules))
