"""Text generation with a compiled decoder: the prompt in one pass, then one token per step through the past.

    decoder = Decoder.load("smollm2.py", "SmolLM2-135M-Instruct.Q4_1.gguf")
    for piece in generate(decoder, tokenizer, tokenizer.encode("The capital of France is"), max_new_tokens=16):
        print(piece, end="")

A decoder is a module Loam built from a causal language model exported with its past (Hugging Face's
names: `input_ids`, `attention_mask`, optional `position_ids`, `past_key_values.N.key/value` in,
`logits` and `present.N.key/value` out).  The prompt goes through it with an empty past (extent 0),
then each new token with the past the last call returned.  Decoding is greedy unless a temperature
is given; sampling then draws from the softmax of the logits over the temperature with a seeded
generator, so a run repeats.  `GenerationStats` times the prompt and the steps apart.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import numpy as np

from loam.core.errors import LoamError
from loam.text.decoder import DecoderInterface, DecoderModule, DecodeState, state_symbols
from loam.text.pick import pick_token
from loam.text.tokenizer import Tokenizer


class GenerateError(LoamError):
    """A module is not a decoder `loam generate` can drive, or a generation option is out of range."""


@dataclass
class GenerationStats:
    """Tokens and seconds of the prompt's one pass and of the steps after it."""

    prompt_tokens: int = 0
    prompt_seconds: float = 0.0
    new_tokens: int = 0
    step_seconds: list[float] = field(default_factory=list[float])

    def text(self) -> str:
        prefill = self.prompt_tokens / self.prompt_seconds if self.prompt_seconds else 0.0
        decode_s = sum(self.step_seconds)
        decode = len(self.step_seconds) / decode_s if decode_s else 0.0
        return (
            f"prefill: {self.prompt_tokens} tokens in {self.prompt_seconds:.3f} s ({prefill:.1f} tokens/s); "
            f"decode: {len(self.step_seconds)} steps in {decode_s:.3f} s ({decode:.1f} tokens/s)"
        )


STATE_CAPACITY = 256
"""Positions a Decoder's DecodeState holds at first; it doubles whenever a step needs more."""


class Decoder:
    """A compiled decoder module and its weights, with the past of the tokens it has read.

    Where the module keeps every past in place (`forward_in_place`, and `in_place` is left on), the
    past lives in a `DecodeState` that each step appends to; otherwise each step's presents are the
    next step's pasts.  The numbers are the same (tests/passes/test_decode_state_in_place.py).
    """

    def __init__(
        self, module: DecoderModule, weights: object, source: str = "the module", *, in_place: bool = True
    ) -> None:
        self.interface = DecoderInterface.of(
            getattr(module, "INPUTS", None), getattr(module, "OUTPUTS", None), source, GenerateError
        )
        self.module, self.weights, self.source, self.in_place = module, weights, source, in_place
        self.order = list(self.interface.order)
        self.outputs = list(self.interface.outputs)
        self.past_names = list(self.interface.past_names)
        self.present_of = dict(self.interface.present_of)
        self.reset()

    @classmethod
    def load(cls, module_path: str | Path, checkpoint: str | Path, packed: bool = True) -> Decoder:
        """Import the module Loam printed at `module_path` and load `checkpoint` into its `Weights`
        (`packed=False`: quantized weights widened to float32 at load, for speed over memory)."""
        path = Path(module_path)
        if not path.is_file():
            raise GenerateError(f"{path}: no such module file")
        spec = importlib.util.spec_from_file_location(f"loam_decoder_{abs(hash(str(path.resolve())))}", path)
        if spec is None or spec.loader is None:
            raise GenerateError(f"{path}: not a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        try:
            weights = module.Weights.load_file(str(checkpoint), packed=packed)
        except ValueError as e:  # the module's LoadError
            raise GenerateError(f"checkpoint {checkpoint}: {e}") from None
        if packed and hasattr(module, "set_compiled"):
            module.set_compiled(True)  # packed products' kernels compiled now, not in the first token
        # A module Loam printed declares the decoder's names; __init__ checks that it is a decoder.
        return cls(cast(DecoderModule, module), weights, str(path))

    def reset(self) -> None:
        """Forget the past: the next `step` reads a new prompt."""
        self._past: dict[str, np.ndarray] = {
            name: np.zeros((1, heads, 0, size), dtype) for name, (heads, size, dtype) in self.interface.layers.items()
        }
        self.length = 0
        # A module that keeps its past in place (decode-state-in-place) for every past input steps
        # through forward_in_place: each step writes its new rows and copies no past.
        symbols = state_symbols(self.module, self.past_names) if self.in_place else None
        self.state: DecodeState | None = None
        if symbols is not None:
            self.state = self.module.DecodeState(STATE_CAPACITY, **dict.fromkeys(symbols, 1))

    @property
    def past(self) -> dict[str, np.ndarray]:
        """Each past input's value after the tokens read so far (the state's views when in place)."""
        if self.state is not None:
            return {name: self.state.past(name) for name in self.past_names}
        return self._past

    def rewind(self, length: int) -> None:
        """Forget every position from `length` on: the next `step` reads after the first `length`."""
        if not 0 <= length <= self.length:
            raise GenerateError(f"cannot rewind {self.length} positions to {length}")
        if self.state is not None:
            self.state.rewind(length)
        else:
            self._past = {name: value[:, :, :length] for name, value in self._past.items()}
        self.length = length

    def step(self, ids: Sequence[int]) -> np.ndarray:
        """Read `ids` after what was read before; return the logits of the last position (float32)."""
        count = len(ids)
        dtypes = self.interface.dtypes
        feeds: dict[str, np.ndarray] = {"input_ids": np.asarray([ids], dtype=dtypes["input_ids"])}
        if "attention_mask" in dtypes:
            feeds["attention_mask"] = np.ones((1, self.length + count), dtypes["attention_mask"])
        if "position_ids" in dtypes:
            positions = np.arange(self.length, self.length + count)[None, :]
            feeds["position_ids"] = positions.astype(dtypes["position_ids"])
        state = self.state
        if state is not None:
            state.reserve(self.length + count)
            step = [feeds[name] for name in self.order if name not in self.present_of]
            result = self.module.forward_in_place(self.weights, state, *step)
        else:
            feeds.update(self._past)
            result = self.module.forward(self.weights, *(feeds[name] for name in self.order))
        values = dict(zip(self.outputs, result if len(self.outputs) > 1 else (result,), strict=True))
        if state is None:
            self._past = {name: values[present] for name, present in self.present_of.items()}
        self.length += count
        return np.asarray(values["logits"])[0, -1].astype(np.float32)


def generate(
    decoder: Decoder,
    tokenizer: Tokenizer,
    prompt_ids: Sequence[int],
    *,
    max_new_tokens: int = 64,
    temperature: float = 0.0,
    seed: int = 0,
    stop_at_eos: bool = True,
    stats: GenerationStats | None = None,
    ids_out: list[int] | None = None,
) -> Iterator[str]:
    """Yield the text of each new token as it is produced (greedy when `temperature` is 0).

    `ids_out`, when given, receives the new token ids; `stats` the timings.
    """
    if not prompt_ids:
        raise GenerateError("the prompt is empty: give at least one token")
    if max_new_tokens < 0:
        raise GenerateError(f"max_new_tokens is {max_new_tokens}; it must be 0 or more")
    if temperature < 0 or not np.isfinite(temperature):
        raise GenerateError(f"temperature is {temperature}; it must be 0 (greedy) or positive")
    rng = np.random.default_rng(seed)
    stats = stats if stats is not None else GenerationStats()
    stream = tokenizer.decode_stream(skip_special_tokens=True)
    decoder.reset()
    start = time.perf_counter()
    logits = decoder.step(list(prompt_ids))
    stats.prompt_tokens, stats.prompt_seconds = len(prompt_ids), time.perf_counter() - start
    for n in range(max_new_tokens):
        token = pick_token(logits, rng, temperature)
        if ids_out is not None:
            ids_out.append(token)
        stats.new_tokens += 1
        if stop_at_eos and token == tokenizer.eos_id:
            break
        piece = stream.step(token)
        if piece:
            yield piece
        if n + 1 == max_new_tokens:
            break
        start = time.perf_counter()
        logits = decoder.step([token])
        stats.step_seconds.append(time.perf_counter() - start)
    rest = stream.finish()
    if rest:
        yield rest
