"""forward's check of one input, as lines of its prologue.

A well-formed input is checked by forward's own comparisons (its class, dtype, rank, each fixed
extent, each symbol an earlier axis bound) and binds its new symbols inline; `_check_input`, the
runtime piece that words a refusal, runs only where a comparison fails.  Called on every forward,
so a few statements per input instead of the piece's loop (the tiny GPT-2's decode step: 123
statements fewer).
"""

from __future__ import annotations

from collections.abc import Sequence

from loam.backends.module_text import tuple_py


def input_check(
    name: str, ident: str, dtype: str, axes: Sequence[tuple[str, int | str | None]], bound: set[str], check: str
) -> str:
    """An input's check as the comparisons a well-formed input passes (its class, dtype, rank, each
    fixed extent, each symbol an earlier axis bound) and the bindings of its new symbols, with
    `_check_input` (which words the refusal) only where a comparison fails: a few statements per input
    instead of the piece's loop, on every call."""
    tests = [f"{ident}.__class__ is np.ndarray", f"{ident}.dtype == {dtype}", f"{ident}.ndim == {len(axes)}"]
    binds: list[tuple[str, int]] = []
    first: dict[str, int] = {}
    for i, (_, extent) in enumerate(axes):
        if isinstance(extent, int):
            tests.append(f"{ident}.shape[{i}] == {extent}")
        elif isinstance(extent, str) and extent in first:
            tests.append(f"{ident}.shape[{i}] == {ident}.shape[{first[extent]}]")
        elif isinstance(extent, str) and extent in bound:
            tests.append(f"{ident}.shape[{i}] == _env[{extent!r}]")
        elif isinstance(extent, str):
            first[extent] = i
            binds.append((extent, i))
    if all(isinstance(extent, int) for _, extent in axes):
        # A fixed shape: the common case costs three comparisons.
        fixed = tuple_py([extent for _, extent in axes])
        return f"if not ({tests[0]} and {tests[1]} and {ident}.shape == {fixed}):\n    {check}"
    lines = [f"if {' and '.join(tests)}:"]
    for symbol, i in binds:
        lines.append(f"    _env[{symbol!r}] = {ident}.shape[{i}]")
        lines.append(f"    _src[{symbol!r}] = {f'{name} axis {i}'!r}")
    if not binds:
        lines.append("    pass")
    lines += ["else:", f"    {check}"]
    return "\n".join(lines)
