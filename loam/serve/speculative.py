"""Speculative decoding: tokens a cheap proposer guesses, verified by the decoder in one span.

A text package may name a proposer in `model.json` (`"speculative": {...}`, read by `read_speculation`):

- `prompt_lookup`: the request's own context proposes.  The last `ngram` tokens (down to `min_ngram`) are
  looked up in what came before, and the `tokens` that followed their latest earlier occurrence are the
  guess.  No second model: code that repeats an identifier, or an answer quoting its question, is read
  ahead for the price of one decoder call.
- `draft`: a second, smaller decoder `stage` of the same vocabulary guesses `tokens` tokens one at a time
  (`loam.serve.draft`).

A decoding row then carries the span [its last sampled token, p1..pk] instead of the one token, in the
same cohort as other rows' prompt spans and plain steps, and keeps its logits at every position of the
span (as a scored prompt does).  The logits after token i say what the decoder itself would choose next,
so the proposal is verified in one call:

- greedy (`accept_greedy`): the longest prefix of the proposal that equals the decoder's argmax at each
  position is accepted, then the decoder's own next token is added: 1 to k + 1 tokens per call, exactly
  the tokens a plain run picks;
- sampled (`accept_sampled`): p_i is accepted with probability min(1, q(p_i) / r(p_i)) (q the decoder's
  tempered, top-p distribution, r the proposer's: a point mass, r(p_i) = 1, for a prompt lookup), and the
  first rejection draws from normalize(max(0, q - r)); all accepted, the next token draws from q.  Each
  token is then distributed exactly as the decoder's own draw would be (the speculative-sampling argument).

The accepted tokens are delivered one by one as a plain step delivers its one (stop strings, EOS,
`max_tokens` and logprobs as before), and the KV of the positions after the last one kept is rolled
back (`KvPool.rewind`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from loam.serve.kv import KvSequence
from loam.serve.sampling import SamplingParams
from loam.serve.spec import PackageError
from loam.text.pick import token_probs

PROPOSERS = ("prompt_lookup", "draft")
MAX_TOKENS = 16
"""The most tokens a proposer may guess per step (each is a position every verifier call computes)."""


@dataclass(frozen=True)
class Speculation:
    """A text package's proposer: `proposer` (one of `PROPOSERS`), the `tokens` it guesses per step, the n-gram
    lengths a prompt lookup matches (`ngram` down to `min_ngram`) and a draft's `stage`."""

    proposer: str
    tokens: int
    ngram: int = 3
    min_ngram: int = 1
    stage: str | None = None


_KEYS = {"prompt_lookup": ("proposer", "tokens", "ngram", "min_ngram"), "draft": ("proposer", "tokens", "stage")}


def read_speculation(raw: object, where: str, stages: Sequence[str]) -> Speculation | None:
    """The `speculative` key of a text package's `model.json` (`where`), checked: None where it is absent;
    a PackageError naming the key where it is wrong.  `stages` are the package's stage names."""
    if raw is None:
        return None

    def fail(key: str, problem: str) -> PackageError:
        return PackageError(f"{where}: key {key!r} {problem}")

    if not isinstance(raw, dict):
        raise fail("speculative", f"must be an object naming a proposer ({', '.join(PROPOSERS)}), got {raw!r}")
    proposer = raw.get("proposer")
    if proposer not in _KEYS:
        raise fail("speculative.proposer", f"must be one of {', '.join(PROPOSERS)}, got {proposer!r}")
    unknown = [key for key in raw if key not in _KEYS[proposer]]
    if unknown:
        raise fail(f"speculative.{unknown[0]}", f"is not a {proposer} key (known keys: {', '.join(_KEYS[proposer])})")

    def count(key: str, default: int | None, low: int, high: int) -> int:
        value = raw.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise fail(f"speculative.{key}", f"must be an integer from {low} to {high}, got {value!r}")
        return value

    tokens = count("tokens", None, 1, MAX_TOKENS)
    if proposer == "prompt_lookup":
        ngram = count("ngram", 3, 1, 64)
        return Speculation(proposer, tokens, ngram, count("min_ngram", 1, 1, ngram))
    stage = raw.get("stage")
    if not isinstance(stage, str) or stage not in stages:
        raise fail("speculative.stage", f"must name one of the package's stages ({', '.join(stages)}), got {stage!r}")
    if len(stages) != 2:
        raise fail("speculative.stage", f"names the draft of two stages, the decoder and it; the package has {stages}")
    return Speculation(proposer, tokens, stage=stage)


@dataclass(eq=False)
class Guess:
    """One row's request to its proposer: its `context` (every token it holds, the last one sampled and not yet
    read), the most tokens to guess (`room`), how it samples, and what the proposer fills in: the `tokens` and,
    for sampled tokens, the distributions they were drawn from (`probs`; None: point masses or greedy guesses).
    `draft` is a draft model's rows of state for the request, kept by the request between steps."""

    context: list[int]
    room: int
    params: SamplingParams
    rng: np.random.Generator
    draft: KvSequence | None = None
    tokens: list[int] = field(default_factory=list)
    probs: list[np.ndarray] | None = None


@dataclass
class GuessBudget:
    """How many tokens a row's proposer may guess next, adapted to what the decoder keeps of its guesses.

    A verifier span costs the decoder about one position per guessed token: cheap beside a decode step's
    fixed cost while the cores wait on one row, nearly its full price once a cohort keeps them busy.  So
    guessing pays where guesses are kept and costs where they are not (prose at 8 streams kept 38% of its
    guesses and ran at 0.67x the plain tokens/s).  As assisted generation does: every guess kept, the
    budget grows by 2 up to the package's `tokens`; one rejected, it shrinks by 1.  At 0 the row takes
    `PAUSE` plain steps, then tries 1 again.  The budget decides only how many tokens are read, never which
    are kept: the output is the same at any budget."""

    limit: int = -1  # -1: not yet used (the first guess may take them all)
    paused: int = 0  # plain steps left before guessing again

    PAUSE = 8

    def room(self, most: int) -> int:
        """The most tokens to guess in this step, at most `most` (0: a plain step)."""
        if self.limit < 0:
            self.limit = most
        if self.limit == 0:
            self.paused -= 1
            if self.paused > 0:
                return 0
            self.limit = 1
        return min(self.limit, most)

    def kept(self, proposed: int, accepted: int, most: int) -> None:
        """A verifier span's `proposed` guesses of which the decoder kept `accepted`."""
        if proposed == 0:
            return
        self.limit = min(most, self.limit + 2) if accepted == proposed else max(0, self.limit - 1)
        if self.limit == 0:
            self.paused = self.PAUSE


class Proposer(Protocol):
    """What guesses tokens for a cohort's decoding rows."""

    def propose(self, guesses: Sequence[Guess]) -> None: ...
    def release(self, draft: KvSequence) -> None: ...
    def nbytes(self) -> int:
        """The bytes of the proposer's own KV pool (0: it keeps none)."""
        ...

    def trim(self) -> None:
        """Give back what the proposer keeps for its next guesses and does not hold (`loam.serve.residency`)."""
        ...


class PromptLookup:
    """Guesses from the row's own context (`prompt_lookup`): no state, no model."""

    def __init__(self, speculation: Speculation) -> None:
        self.speculation = speculation

    def propose(self, guesses: Sequence[Guess]) -> None:
        spec = self.speculation
        for guess in guesses:
            guess.tokens = prompt_lookup(guess.context, guess.room, spec.ngram, spec.min_ngram)

    def release(self, draft: KvSequence) -> None:
        """A prompt lookup keeps no state."""

    def nbytes(self) -> int:
        return 0

    def trim(self) -> None:
        """A prompt lookup keeps nothing."""


def prompt_lookup(context: Sequence[int], tokens: int, ngram: int, min_ngram: int = 1) -> list[int]:
    """At most `tokens` tokens that followed the latest earlier occurrence of `context`'s last n tokens, for the
    longest n from `ngram` down to `min_ngram` that occurs earlier; [] where none does."""
    size = len(context)
    for n in range(min(ngram, size - 1), min_ngram - 1, -1):
        suffix = list(context[size - n :])
        for start in range(size - n - 1, -1, -1):
            if context[start] == suffix[0] and list(context[start : start + n]) == suffix:
                return list(context[start + n : start + n + tokens])
    return []


def accept(
    logits: np.ndarray,
    proposal: Sequence[int],
    params: SamplingParams,
    rng: np.random.Generator,
    proposer: Sequence[np.ndarray] | None = None,
) -> list[int]:
    """The tokens a row takes from its verifier span's `logits` ([k + 1, vocab]): `accept_greedy`'s at temperature
    0, else `accept_sampled`'s against the tempered, top-p distribution `loam.text.pick.pick_token` draws from."""
    if params.temperature == 0:
        return accept_greedy(logits, proposal)
    return accept_sampled(lambda i: token_probs(logits[i], params.temperature, params.top_p), proposal, rng, proposer)


def accept_greedy(logits: np.ndarray, proposal: Sequence[int]) -> list[int]:
    """The tokens a greedy decoder picks from a verifier span's `logits` ([k + 1, vocab], k = len(proposal)):
    the proposal while it equals the argmax, then the argmax after the last accepted token."""
    out: list[int] = []
    for position, proposed in zip(logits, proposal, strict=False):
        best = int(np.argmax(position))
        if best != proposed:
            return [*out, best]
        out.append(best)
    return [*out, int(np.argmax(logits[len(proposal)]))]


def accept_sampled(
    target: Callable[[int], np.ndarray],
    proposal: Sequence[int],
    rng: np.random.Generator,
    proposer: Sequence[np.ndarray] | None = None,
) -> list[int]:
    """Speculative rejection sampling: the tokens a sampled row takes from a verifier span.  `target(i)` is the
    decoder's distribution after the span's token i (k + 1 of them for k proposed tokens); `proposer[i]` the
    distribution proposal[i] was drawn from (None: point masses, as a prompt lookup proposes).  Each returned
    token is distributed as a draw from `target` would be."""
    out: list[int] = []
    for i, proposed in enumerate(proposal):
        q = target(i)
        r = proposer[i] if proposer is not None else None
        r_p = 1.0 if r is None else float(r[proposed])
        if rng.random() * r_p < q[proposed]:  # u < q/r, without dividing by a zero r
            out.append(int(proposed))
            continue
        if r is None:
            residual = q.copy()
            residual[proposed] = 0.0
        else:
            residual = np.maximum(q - r, 0.0)
        return [*out, int(rng.choice(len(residual), p=residual / residual.sum()))]
    q = target(len(proposal))
    return [*out, int(rng.choice(len(q), p=q))]
