"""decode-state-in-place: a decoder's past joined with its new rows becomes `kernel.append_state`, so
the numpy module can keep the past in place between steps.

Why: a decoder exported with its past takes `past_key_values.*` and returns `present.*`, each the
past concatenated with the step's new keys or values along the sequence axis.  Run step by step,
that Concat copies the whole past on every step and in every layer, and the caller copies it again
to feed the next step: a conversation's step cost grows with copies no one asked for (SmolLM2 holds
46 KB of keys and values per position, so 94 MB per step at 2,048 positions).  The module gains
`DecodeState` and `forward_in_place(weights, state, ...)`: the state owns each past's storage with
room to grow, forward is given its views, and the rewritten Concat writes only the new rows after
the past and returns the view of both.  `forward` itself is unchanged: without a state (or given
pasts that are not a state's views) the op concatenates as before.

Input: kernel IR.  A `kernel.concat` of two operands is rewritten when its first operand is a
program input that nothing else reads, its result is returned as a program output, and the input's
extent along the concat axis is not a number (the length that grows step by step); every other extent of that input is a
number or a symbol alone (the state is allocated from them).
Output: `kernel.append_state` with the same operands, axis and result, naming the input (`state`).
The build notes say which inputs became state.  The numpy backend runs this pass; the WGSL module
keeps its buffers on the device and has no host-side past to keep.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import BlockArgument
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from loam.dialects.kernel import AppendStateOp, ConcatOp, ProgramOp
from loam.dialects.tensor_axes import AxesTensorType
from loam.passes.notes import add_notes


@dataclass(frozen=True)
class DecodeStateInPlacePass(ModulePass):
    """Rewrite each past-and-new Concat returned as an output into `kernel.append_state`."""

    name = "decode-state-in-place"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        pairs: list[str] = []
        for program in [p for p in op.walk() if isinstance(p, ProgramOp)]:
            inputs = [n.data for n in program.input_names.data]
            ret = program.return_op
            returned = {v: n.data for v, n in zip(ret.outputs, ret.output_names.data, strict=True)}
            for concat in [o for o in program.block.ops if isinstance(o, ConcatOp)]:
                if len(concat.operands) != 2 or concat.results[0] not in returned:
                    continue
                past = concat.operands[0]
                # The past is read by this Concat alone: forward_in_place gives it from the state.
                if (
                    not isinstance(past, BlockArgument)
                    or past.owner is not program.block
                    or sum(1 for _ in past.uses) != 1
                ):
                    continue
                axis = concat.param("axis")
                past_type = past.type
                if not isinstance(past_type, AxesTensorType) or not isinstance(axis, int):
                    continue
                growing = past_type.axes[axis]
                others = [a for i, a in enumerate(past_type.axes) if i != axis]
                if growing.extent.is_const or any(
                    not a.extent.is_const and a.extent.lone_symbol is None for a in others
                ):
                    continue
                name = inputs[past.index]
                Rewriter.replace_op(
                    concat,
                    AppendStateOp(
                        list(concat.operands), [concat.results[0].type], concat.node.data, axis=axis, state=name
                    ),
                )
                pairs.append(f"'{name}' -> '{returned[concat.results[0]]}' along {growing.name}")
        if pairs:
            add_notes(
                op,
                [
                    f"decode state in place: {len(pairs)} past input(s) joined with their new rows "
                    f"({', '.join(pairs[:2])}{f' and {len(pairs) - 2} more' if len(pairs) > 2 else ''}); "
                    "forward_in_place(weights, DecodeState(capacity, ...), ...) writes only each step's new rows"
                ],
            )
