"""A draft model: a second, smaller decoder of the same vocabulary that guesses the tokens a verifier span reads.

The draft keeps its own rows of KV state in a block pool of its own (a `KvSequence` per request, the request
keeping it between steps).  Before guessing, a row's draft state is cut to the longest prefix it shares with
the row's context (the tokens the decoder rejected last step go, as the decoder's own KV does) and catches up
on the rest, the row's last sampled token included; then each of the `room` guesses is one call over every
guessing row at once, greedy rows taking the draft's argmax and sampled rows drawing from its tempered,
top-p distribution with the request's own generator (that distribution is `r` in the verifier's rejection
sampling, `loam.serve.speculative.accept_sampled`).  A row the draft pool cannot hold guesses nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np

from loam.serve.kv import KvPool, KvSequence, PoolExhausted
from loam.serve.spec import Capacities, PackageError
from loam.serve.speculative import Guess, PromptLookup, Proposer, Speculation
from loam.text.pick import token_probs


class DraftReader(Protocol):
    """A decoder stage as the draft calls it (`loam.serve.decoder_stage.DecoderStage`)."""

    @property
    def layers(self) -> Mapping[str, tuple[int, int, np.dtype]]: ...
    @property
    def vocab(self) -> int: ...

    def tag(self, seq: KvSequence) -> str: ...
    def trim(self) -> None: ...
    def run(
        self, pool: KvPool, rows: list[tuple[KvSequence, list[int]]], every: frozenset[int] = frozenset()
    ) -> list[np.ndarray]: ...


class DraftModel:
    """Guesses with a draft decoder stage over a block pool of its own, `blocks` blocks of `block_tokens`."""

    def __init__(self, stage: DraftReader, block_tokens: int, blocks: int) -> None:
        self.stage = stage
        self.pool = KvPool(stage.layers, block_tokens, blocks)

    def propose(self, guesses: Sequence[Guess]) -> None:
        reading = [(guess, self._catch_up(guess)) for guess in guesses]
        spans = [(guess, span) for guess, span in reading if span]
        for guess, _ in spans:
            guess.tokens = []
            guess.probs = [] if guess.params.temperature > 0 else None
        while spans:
            failed: set[int] = set()
            for group in self._groups(spans):
                rows: list[tuple[KvSequence, list[int]]] = []
                try:
                    for guess, span in group:
                        assert guess.draft is not None  # given by the catch-up
                        self.pool.reserve(guess.draft, len(span))
                        rows.append((guess.draft, span))
                    logits = self.stage.run(self.pool, rows)
                except PoolExhausted:  # these rows keep the guesses they have
                    failed.update(id(guess) for guess, _ in group)
                    continue
                for (guess, _), row in zip(group, logits, strict=True):
                    self._pick(guess, row)
            spans = [
                (guess, guess.tokens[-1:])
                for guess, _ in spans
                if id(guess) not in failed and len(guess.tokens) < guess.room
            ]

    def release(self, draft: KvSequence) -> None:
        self.pool.release(draft)

    def nbytes(self) -> int:
        return self.pool.nbytes

    def trim(self) -> None:
        """The draft pool's unheld blocks and the draft stage's kept DecodeStates and pooled intermediates."""
        self.pool.trim()
        self.stage.trim()

    def _catch_up(self, guess: Guess) -> list[int]:
        """The tokens the row's draft state has yet to read ([]: it cannot guess): its state cut to the longest
        prefix it shares with the context, at most all but the last token."""
        context = guess.context
        if guess.draft is None:
            guess.draft = self.pool.match_prefix(context)
        held = guess.draft.tokens
        common = min(len(held), len(context) - 1)
        differ = np.flatnonzero(np.asarray(held[:common]) != np.asarray(context[:common]))
        keep = int(differ[0]) if differ.size else common
        self.pool.rewind(guess.draft, keep)
        return context[keep:]

    def _groups(self, spans: list[tuple[Guess, list[int]]]) -> list[list[tuple[Guess, list[int]]]]:
        """The rows in groups that can share a call (the stage's tags)."""
        groups: dict[str, list[tuple[Guess, list[int]]]] = {}
        for guess, span in spans:
            assert guess.draft is not None
            groups.setdefault(self.stage.tag(guess.draft), []).append((guess, span))
        return list(groups.values())

    def _pick(self, guess: Guess, logits: np.ndarray) -> None:
        """The draft's next guess for the row from its logits, and the distribution it was drawn from."""
        params = guess.params
        if guess.probs is None:
            guess.tokens.append(int(np.argmax(logits)))
            return
        probs = token_probs(logits, params.temperature, params.top_p)
        guess.probs.append(probs)
        guess.tokens.append(int(guess.rng.choice(len(probs), p=probs)))


def make_proposer(
    speculation: Speculation | None, draft: DraftReader | None, vocab: int, where: str, capacities: Capacities
) -> Proposer | None:
    """The proposer a text package names (None: it names none): a prompt lookup, or a `DraftModel` over the `draft`
    stage, refused naming the key where its vocabulary is not the decoder's `vocab` tokens (`where`: model.json)."""
    if speculation is None:
        return None
    if draft is None:
        return PromptLookup(speculation)
    if draft.vocab != vocab:
        raise PackageError(
            f"{where}: key 'speculative.stage' names a draft of {draft.vocab} tokens; the decoder has {vocab}: "
            "a draft guesses in the decoder's vocabulary"
        )
    return DraftModel(draft, capacities.block_tokens, capacities.blocks())
