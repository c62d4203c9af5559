"""Per-request token choice: greedy, temperature, top-p, a seed, stop strings and a token budget.

Each request owns its random generator, seeded from its own `seed` (or from the server's entropy
when it gives none), so a seeded request draws the same tokens whatever shares its cohort: a
request's RNG state never depends on its neighbours.  The choice itself is `loam.text.pick.pick_token`,
the one `loam generate` makes.

`StopMatcher` finds stop strings in the growing text and holds back what could still become the
start of one, so a streamed reply never shows text that the stop later removes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from loam.text.pick import pick_token


@dataclass(frozen=True)
class SamplingParams:
    """How one request picks its tokens.  `temperature` 0 is greedy; `top_p` keeps the smallest set of
    tokens whose probability reaches it; `stop` strings end the reply (and are not part of it)."""

    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False


class Sampler:
    """Picks each next token of one request from its logits."""

    def __init__(self, params: SamplingParams) -> None:
        self.params = params
        self.rng = np.random.default_rng(params.seed)

    def pick(self, logits: np.ndarray) -> int:
        """The next token: the argmax when greedy, else a draw from the tempered, top-p-truncated softmax."""
        return pick_token(logits, self.rng, self.params.temperature, self.params.top_p)


class StopMatcher:
    """The text of a reply as tokens arrive, cut at the first stop string."""

    def __init__(self, stop: Sequence[str]) -> None:
        self.stop = tuple(s for s in stop if s)
        self.hold = max((len(s) for s in self.stop), default=1) - 1
        self.text = ""
        self.sent = 0
        self.stopped = False

    def feed(self, piece: str) -> str:
        """Add `piece`; return the text now safe to show (none of it can start a stop string)."""
        if self.stopped:
            return ""
        self.text += piece
        found = self.found()
        # The earliest stop string wins, once no longer one starting before it can still complete.
        if found is not None and not any(at < found for at in self.open_starts()):
            self.text, self.stopped = self.text[:found], True
            return self.flush()
        safe = max(self.sent, len(self.text) - self.hold)
        out, self.sent = self.text[self.sent : safe], safe
        return out

    def found(self) -> int | None:
        """Where the earliest stop string the text holds begins (None: it holds none)."""
        starts = [at for at in (self.text.find(s, self.sent) for s in self.stop) if at >= 0]
        return min(starts, default=None)

    def open_starts(self) -> list[int]:
        """Where a stop string begins that the text ends inside (more text could complete it)."""
        return [
            at
            for at in range(max(self.sent, len(self.text) - self.hold), len(self.text))
            if any(len(s) > len(self.text) - at and s.startswith(self.text[at:]) for s in self.stop)
        ]

    def flush(self) -> str:
        """The text held back, at the end of the reply (cut at a stop string it holds)."""
        found = None if self.stopped else self.found()
        if found is not None:
            self.text, self.stopped = self.text[:found], True
        out, self.sent = self.text[self.sent :], len(self.text)
        return out
