"""Layout rules: which axis names a tensor of the graph carries, chosen by its name.

Neither an ONNX graph nor a checkpoint says which axis is the batch, so the axis names come from
the build's options.  A layout is an ordered list of rules; a rule is a shell wildcard over a
tensor's name and the axis names it gives, optionally scoped to one graph (the two branches of an
If may name their tensors alike).  The first rule that reaches a tensor wins, so a rule placed
early overrides a broader one after it.

Example::

    >>> rules = [parse_layout_flag("*.weight=In,Out"), LayoutRule("x", ("Batch", "(C H W)"))]
    >>> match_layout(rules, "fc1.weight").axes
    ('In', 'Out')

An axis name is an identifier (`Hidden`) or a merged axis named by its parts as einops writes it
(`(C H W)`); `parse_axis_name` reads both and gives the canonical spelling.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

from loam.core.errors import AxisError, OptionsError

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def is_axis_identifier(name: str) -> bool:
    """Whether `name` is a valid plain axis name (an ASCII identifier)."""
    return _IDENT.fullmatch(name) is not None


def merged_axis_name(parts: Sequence[str]) -> str:
    """The canonical name of the merge of `parts`: `("C", "H", "W")` -> `"(C H W)"`.

    A part that is itself a merge contributes its parts (`("(C H)", "W")` -> `"(C H W)"`): merging
    row-major is associative, and a nested spelling would not read back."""
    flat: list[str] = []
    for part in parts:
        flat.extend(part[1:-1].split() if part.startswith("(") and part.endswith(")") else [part])
    return "(" + " ".join(flat) + ")"


def parse_axis_name(text: str) -> tuple[str, tuple[str, ...]]:
    """Read an axis name: `Hidden` -> `("Hidden", ())`, `( C H  W )` -> `("(C H W)", ("C", "H", "W"))`.

    A merged axis has at least two distinct parts (`(C)` is `C`, so it is refused to keep one
    spelling per axis).  AxisError says what is wrong.
    """
    stripped = text.strip()
    if is_axis_identifier(stripped):
        return stripped, ()
    if stripped.startswith("(") and stripped.endswith(")"):
        parts = tuple(stripped[1:-1].split())
        bad = [p for p in parts if not is_axis_identifier(p)]
        if bad:
            raise AxisError(f"merged axis {text!r}: part {bad[0]!r} is not an identifier")
        if len(parts) < 2:
            hint = f"; write {parts[0]}" if parts else ""
            raise AxisError(f"merged axis {text!r} needs at least two parts{hint}")
        if len(set(parts)) != len(parts):
            raise AxisError(f"merged axis {text!r} names a part twice")
        return merged_axis_name(parts), parts
    raise AxisError(f"axis name {text!r} is neither an identifier nor a merge like (C H W)")


@dataclass(frozen=True)
class LayoutRule:
    """Tensors whose name matches `pattern` (shell glob) carry `axes`; only in `graph` when given."""

    pattern: str
    axes: tuple[str, ...]
    graph: str | None = None

    def __post_init__(self) -> None:
        if not self.pattern:
            raise OptionsError("a layout rule needs a non-empty pattern")
        if self.graph is not None and not self.graph:
            raise OptionsError(f"layout rule {self.pattern!r}: an empty graph name reaches no graph")
        # Canonical axis spellings, so two rules spelling one merge differently compare equal.
        canonical = tuple(parse_axis_name(a)[0] for a in self.axes)
        object.__setattr__(self, "axes", canonical)

    def reaches(self, tensor_name: str, graph_name: str | None = None) -> bool:
        """Whether this rule applies to tensor `tensor_name` of graph `graph_name`."""
        if self.graph is not None and self.graph != graph_name:
            return False
        return fnmatchcase(tensor_name, self.pattern)


def match_layout(rules: Iterable[LayoutRule], tensor_name: str, graph_name: str | None = None) -> LayoutRule | None:
    """The first rule (in order) that reaches `tensor_name` in `graph_name`, or None (`LayoutMatcher`
    answers the same for many names at once)."""
    for rule in rules:
        if rule.reaches(tensor_name, graph_name):
            return rule
    return None


class LayoutMatcher:
    """`match_layout` over one list of rules, for every tensor of a graph.

    An architecture table's build drafts a rule per tensor: thousands of rules, tried against
    thousands of tensors, one glob match each (the quadratic part of a large model's build).  A rule
    whose pattern holds no wildcard names one tensor, so it is found by that name; only the rules
    with wildcards are tried in turn, and only those before the first rule found so (the first rule
    that reaches a tensor wins).
    """

    def __init__(self, rules: Iterable[LayoutRule]) -> None:
        self.rules = tuple(rules)
        self._named: dict[str, list[int]] = {}  # a literal pattern -> the rules with it, in order
        self._globs: list[int] = []
        for i, rule in enumerate(self.rules):
            if any(ch in rule.pattern for ch in "*?["):
                self._globs.append(i)
            else:
                self._named.setdefault(rule.pattern, []).append(i)

    def match(self, tensor_name: str, graph_name: str | None = None) -> LayoutRule | None:
        """The first rule (in order) that reaches `tensor_name` in `graph_name`, or None."""
        first = next((i for i in self._named.get(tensor_name, ()) if self.rules[i].reaches(tensor_name, graph_name)),
                     len(self.rules))  # fmt: skip
        for i in self._globs:
            if i > first:
                break
            if self.rules[i].reaches(tensor_name, graph_name):
                return self.rules[i]
        return self.rules[first] if first < len(self.rules) else None


def parse_layout_flag(text: str) -> LayoutRule:
    """Read one `--layout GLOB=Ax1,Ax2` flag value (`*.weight=In,Out`, `x=Batch,(C H W)`).

    The glob is everything before the last `=` (axis names never hold one).  OptionsError quotes
    the flag and says what is wrong.
    """
    glob, sep, axes_text = text.rpartition("=")
    if not sep:
        raise OptionsError(f"--layout {text!r}: expected GLOB=AXIS,AXIS,... (e.g. '*.weight=In,Out')")
    if not glob.strip():
        raise OptionsError(f"--layout {text!r}: the pattern before '=' is empty")
    if not axes_text.strip():
        raise OptionsError(f"--layout {text!r}: no axis names after '='")
    try:
        axes = tuple(parse_axis_name(a)[0] for a in axes_text.split(","))
    except AxisError as err:
        raise OptionsError(f"--layout {text!r}: {err}") from None
    return LayoutRule(glob.strip(), axes)
