"""What a module whose decoder keeps its past in place declares: `DECODE_STATE` and `forward_in_place`.

`decode-state-in-place` leaves a `kernel.append_state` for each past input joined with its new rows and
returned as an output.  The module then declares which inputs those are (`DECODE_STATE`, which the
runtime's `DecodeState` reads to allocate its buffers) and `forward_in_place(weights, state, ...)`, which
takes every other input and runs forward on the state's views of the pasts.

`PAGED_PASTS` says whether a state may keep the pasts in pages instead (a server's block pool): true when
each past input is read only by its `kernel.append_state` and each joined past only by `kernel.attention`
as its keys or values (and by the return), the one kernel that reads keys and values through a state's
block table (`DecodeState.pages`).  Any other reader would see the placeholder a paged state passes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from xdsl.ir import SSAValue

from loam.backends.module_text import axes_type, tuple_py
from loam.dialects.kernel import AppendStateOp, AttentionOp, ProgramOp, ReturnOp

StateInput = tuple[str, str, int, tuple[int | str | None, ...]]
"""A state input: its name, its output's name, its growing axis, and its extents (a number, a symbol's
name, None for the growing one)."""


def state_inputs(program: ProgramOp) -> list[StateInput]:
    """Each state input of the program's top-level block, in the order its ops hold them."""
    ret = program.return_op
    returned = {v: n.data for v, n in zip(ret.outputs, ret.output_names.data, strict=True)}
    inputs: dict[SSAValue, str] = dict(zip(program.block.args, [n.data for n in program.input_names.data], strict=True))
    found = []
    for op in program.block.ops:
        if isinstance(op, AppendStateOp) and op.results[0] in returned:
            axis = op.param("axis")
            t = axes_type(op.operands[0], "kernel.append_state")
            extents = tuple(
                None if i == axis else a.extent.const_value if a.extent.is_const else a.extent.lone_symbol
                for i, a in enumerate(t.axes)
            )
            name = inputs.get(op.operands[0])
            if name is not None:
                found.append((name, returned[op.results[0]], axis, extents))
    return found


def paged_pasts(program: ProgramOp, states: Sequence[StateInput]) -> bool:
    """Whether every state input is read only by its append and every joined past only as an attention's keys
    or values, or returned: what a paged state's placeholders allow (see the module docstring)."""
    pasts = {name for name, *_ in states}
    if not pasts:
        return False
    for arg, name in zip(program.block.args, program.input_names.data, strict=True):
        if name.data not in pasts:
            continue
        for use in arg.uses:
            append = use.operation
            if not (isinstance(append, AppendStateOp) and use.index == 0):
                return False
            for read in append.results[0].uses:
                if not (isinstance(read.operation, ReturnOp) or (
                    isinstance(read.operation, AttentionOp) and read.index in (1, 2)
                )):  # fmt: skip
                    return False
    return True


def decode_state_source(
    program: ProgramOp, states: Sequence[StateInput], idents: Mapping[SSAValue, str], out_fields: Sequence[str]
) -> str:
    """`DECODE_STATE` and `forward_in_place`, whose parameters are forward's (`idents`) less the pasts."""
    pasts = {name for name, *_ in states}
    step = [(n.data, idents[a]) for a, n in zip(program.block.args, program.input_names.data, strict=True)
            if n.data not in pasts]  # fmt: skip
    sig = "".join(f", {ident}: np.ndarray" for _, ident in step)
    result_type = '"Outputs"' if out_fields else "np.ndarray"
    names = ", ".join(name for name, _ in step)
    args = "".join(f"{ident}, " for _, ident in step)
    return (
        "# Each input forward_in_place keeps in a DecodeState: its name, the output that is it joined with the\n"
        "# step's new rows, the axis it grows along, and its other extents (a number, or a symbol to give)\n"
        f"DECODE_STATE = {tuple_py(states)}\n"
        "# Whether a state may keep the pasts in pages: each is read only by kernel.attention, which reads\n"
        "# them through the state's block table (DecodeState.pages)\n"
        f"PAGED_PASTS = {paged_pasts(program, states)}\n\n\n"
        f'def forward_in_place(weights: "Weights", state: "DecodeState"{sig}) -> {result_type}:\n'
        f'    """forward on {names or "no inputs"} and the pasts kept in `state`: each step writes only its new\n'
        "    rows into the state, and the outputs that join a past with them are the state's views (a rewound\n"
        "    state's next steps write over what they showed after the rewind point).\n\n"
        "    Make the state once per conversation (or batch of them) with DecodeState(capacity, symbol=extent,\n"
        '    ...), then call this for the prompt and each next token; state.length counts the positions held."""\n'
        f"    return state.step(weights, ({args}))\n"
    )
