"""The decoder interface: what a compiled causal language model declares, checked once for every decode loop.

A decoder is a module Loam built from a causal language model exported with its past (Hugging Face's
names: `input_ids`, optional `attention_mask` and `position_ids`, `past_key_values.N.key/value` in,
`logits` and `present.N.key/value` out; each past [batch, heads, past, head size] with fixed heads and
size).  `loam generate` (`loam.text.generate.Decoder`) and `loam serve`'s text role
(`loam.serve.text.DecoderStage`) drive the same modules, so both read them through `DecoderInterface.of`,
which refuses a module that is not such a decoder naming the input or output at fault.

Where the module keeps every past in place (decode-state-in-place: `DECODE_STATE` and
`forward_in_place`), the loops give it the pasts in a `DecodeState` instead of as inputs; `state_symbols`
says whether it does, and which extents (the batch) a state is made with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from loam.core.errors import LoamError

PAST = "past_key_values."
PRESENT = "present."
STEP_INPUTS = ("input_ids", "attention_mask", "position_ids")
"""The inputs a decode loop gives besides the pasts."""

Extents = tuple[int | None, ...]
"""A declared input's extents: a number, or None where the call decides."""


class SteppedState(Protocol):
    """What `forward_in_place` steps: `step` runs forward on the inputs but the pasts, the pasts from the state
    (the module's `DecodeState`, or a server's state that keeps them in its block pool)."""

    def step(self, weights: object, inputs: tuple[np.ndarray, ...]) -> object: ...


class DecodeState(SteppedState, Protocol):
    """A decoder's past kept in place, as the generated module's `DecodeState` is: `past(name)` is the state's
    view of a past input's first `length` positions; `reserve` grows the buffers; `rewind` keeps a prefix."""

    length: int

    def past(self, name: str) -> np.ndarray: ...
    def reserve(self, capacity: int) -> None: ...
    def rewind(self, length: int) -> None: ...


class DecodeStateFactory(Protocol):
    """The module's `DecodeState` class: a state of `capacity` positions, each symbolic extent given by name."""

    def __call__(self, capacity: int, /, **extents: int) -> DecodeState: ...


class DecoderModule(Protocol):
    """What the decode loops call on a compiled decoder module (the numpy backend prints these names).

    `forward` returns the one output, or all of them in `OUTPUTS` order; `forward_in_place` and `DecodeState`
    exist only where the module declares `DECODE_STATE` (see `state_symbols`)."""

    INPUTS: tuple[tuple[str, str, Extents], ...]
    OUTPUTS: tuple[str, ...]
    DecodeState: DecodeStateFactory

    def forward(self, weights: object, *inputs: np.ndarray) -> np.ndarray | tuple[np.ndarray, ...]: ...
    def forward_in_place(
        self, weights: object, state: SteppedState, *inputs: np.ndarray
    ) -> np.ndarray | tuple[np.ndarray, ...]: ...


@dataclass(frozen=True)
class DecoderInterface:
    """A checked decoder's inputs and outputs.

    - `order`: the module's inputs in call order; `dtypes` each one's dtype;
    - `past_names`: the `past_key_values.*` inputs, and `present_of` the output that carries each to the
      next step; `layers` each past's (heads, head size, dtype);
    - `outputs`: the module's outputs in order (`logits` among them)."""

    order: tuple[str, ...]
    dtypes: Mapping[str, np.dtype]
    outputs: tuple[str, ...]
    past_names: tuple[str, ...]
    present_of: Mapping[str, str]
    layers: Mapping[str, tuple[int, int, np.dtype]]

    @classmethod
    def of(
        cls,
        inputs: object,
        outputs: object,
        where: str,
        error: type[LoamError],
        needs: Sequence[str] = ("input_ids",),
    ) -> DecoderInterface:
        """Check a module's `INPUTS` and `OUTPUTS` (given as the module declares them) for a decoder taking the
        inputs `needs` names; refuse with `error`, its message starting with `where`."""
        if not isinstance(inputs, tuple) or not isinstance(outputs, tuple) or not inputs or not outputs:
            raise error(f"{where}: the module declares no INPUTS/OUTPUTS: rebuild it with this version of Loam")
        declared: dict[str, tuple[str, Extents]] = {name: (dtype, extents) for name, dtype, extents in inputs}
        order = tuple(declared)
        for needed in needs:
            if needed not in declared:
                raise error(f"{where}: the decoder has no input {needed!r}")
        if "logits" not in outputs:
            raise error(f"{where}: the decoder has no output 'logits'")
        past_names = tuple(n for n in order if n.startswith(PAST))
        if not past_names:
            raise error(f"{where}: the decoder takes no {PAST}*: build it exported with its past")
        unknown = [n for n in order if n not in (*STEP_INPUTS, *past_names)]
        if unknown:
            raise error(f"{where}: input {unknown[0]!r} is not one a decoder step knows how to give")
        dtypes = {name: np.dtype(dtype) for name, (dtype, _) in declared.items()}
        present_of: dict[str, str] = {}
        layers: dict[str, tuple[int, int, np.dtype]] = {}
        for name in past_names:
            present = PRESENT + name.removeprefix(PAST)
            if present not in outputs:
                raise error(f"{where}: input {name!r} has no output {present!r} to carry it to the next step")
            extents = declared[name][1]
            heads, size = (extents[1], extents[3]) if len(extents) == 4 else (None, None)
            if not isinstance(heads, int) or not isinstance(size, int):
                raise error(f"{where}: input {name!r} is not [batch, heads, past, head size] with fixed heads and size")
            present_of[name] = present
            layers[name] = (heads, size, dtypes[name])
        return cls(order, dtypes, tuple(outputs), past_names, present_of, layers)


def state_symbols(module: object, past_names: Sequence[str]) -> set[str] | None:
    """The symbolic extents a DecodeState of `module` is given (its batch), when the module keeps every one of
    `past_names` in place (`DECODE_STATE`, from decode-state-in-place); None when it does not."""
    held = getattr(module, "DECODE_STATE", ())
    if {past for past, *_ in held} != set(past_names):
        return None
    return {e for *_, extents in held for e in extents if isinstance(e, str)}
