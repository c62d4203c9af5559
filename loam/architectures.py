"""Built-in architecture tables: what `architecture = "NAME"` in the options brings to a build.

A published checkpoint is rarely keyed by the exported graph's initializer names: a GGUF calls
`model.layers.0.self_attn.q_proj.weight` `blk.0.attn_q.weight`, and GPT-2's drops the `transformer.`
prefix its export carries.  An architecture table holds, for one model family, the
`[checkpoint_names]` rules that map such a checkpoint onto the graph (consulted after the options'
own rules, so a build can override any of them).  With `architecture` set, a GGUF checkpoint's
`general.architecture` must name the same family.

`ARCHITECTURES` is empty today: issue 8 fills in llama, gpt2 and bert (with the axis layouts they
bring).  Tests register a table of their own by adding to it.
"""

from __future__ import annotations

from dataclasses import dataclass

from loam.errors import OptionsError


@dataclass(frozen=True)
class Architecture:
    """One model family's table."""

    name: str  # as GGUF's `general.architecture` spells it
    checkpoint_names: tuple[tuple[str, str], ...] = ()  # (checkpoint glob, graph name), as in the options


ARCHITECTURES: dict[str, Architecture] = {}


def architecture(name: str) -> Architecture:
    """The table of `name`; OptionsError listing the known ones when there is none."""
    if name in ARCHITECTURES:
        return ARCHITECTURES[name]
    if not ARCHITECTURES:
        # Refused rather than ignored: a build that silently skipped the table would name no axis.
        raise OptionsError(
            f"architecture '{name}': Loam ships no built-in architecture tables yet; name the axes with layout rules"
        )
    raise OptionsError(f"architecture '{name}': no such table (known: {', '.join(sorted(ARCHITECTURES))})")
