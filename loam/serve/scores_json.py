"""Token scores (`loam.serve.scoring.TokenScore`) in the shapes the completions API gives them.

- OpenAI's legacy `logprobs` of a completion choice: `{tokens, token_logprobs, top_logprobs, text_offset}`,
  one entry a token: its text, its log-probability, its most probable alternatives (text -> log-probability,
  the token itself among them) and where its text starts in the choice's text.  With `echo` the prompt's
  tokens come first, the first of them with null scores (nothing precedes it).
- vLLM's `prompt_logprobs`: one entry a prompt token, null for the first, else a map from token id (a
  string, as JSON keys are) to `{logprob, rank, decoded_token}` holding the prompt's token and the
  `prompt_logprobs` most probable alternatives.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from loam.serve.scoring import TokenScore

TokenText = Callable[[int], str]
"""A token id's text (the tokenizer's decoding of that token alone)."""


@dataclass
class LegacyLogprobs:
    """OpenAI's legacy `logprobs` object, built a token at a time (a stream sends each chunk's tokens)."""

    text: TokenText
    offset: int = 0  # where the next token's text starts in the choice's text
    tokens: list[str] = field(default_factory=list)
    token_logprobs: list[float | None] = field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = field(default_factory=list)
    text_offset: list[int] = field(default_factory=list)

    def add(self, token: int, scored: TokenScore | None) -> None:
        """One token: `scored` is None for a prompt's first token."""
        piece = self.text(token)
        self.tokens.append(piece)
        self.text_offset.append(self.offset)
        self.offset += len(piece)
        if scored is None:
            self.token_logprobs.append(None)
            self.top_logprobs.append(None)
            return
        self.token_logprobs.append(scored.logprob)
        top = {self.text(t): lp for t, lp in scored.top}
        top.setdefault(piece, scored.logprob)
        self.top_logprobs.append(top)

    def add_prompt(self, prompt: Sequence[int], scores: Sequence[TokenScore]) -> None:
        """The prompt's tokens (`echo`), each with its score: the first unscored unless `scores` holds one for
        every token (a prompt appended to a session, whose first token its history predicts)."""
        lead = len(prompt) - len(scores)
        for k, token in enumerate(prompt):
            self.add(token, scores[k - lead] if k >= lead else None)

    def take(self) -> dict[str, Any]:
        """The entries added since the last `take`, as the JSON object (the offsets go on from there)."""
        out = {
            "tokens": self.tokens,
            "token_logprobs": self.token_logprobs,
            "top_logprobs": self.top_logprobs,
            "text_offset": self.text_offset,
        }
        self.tokens, self.token_logprobs, self.top_logprobs, self.text_offset = [], [], [], []
        return out


def prompt_logprobs(prompt: Sequence[int], scores: Sequence[TokenScore], text: TokenText) -> list[Any]:
    """vLLM's `prompt_logprobs` for `prompt`, whose tokens after the first are scored by `scores` (every token,
    the first with null, unless `scores` holds one for each: a prompt appended to a session)."""
    out: list[Any] = [None] * (len(prompt) - len(scores))
    for scored in scores:
        entry = {str(t): {"logprob": lp, "rank": rank, "decoded_token": text(t)} for rank, (t, lp) in
                 enumerate(scored.top, start=1)}  # fmt: skip
        entry[str(scored.token)] = {"logprob": scored.logprob, "rank": scored.rank, "decoded_token": text(scored.token)}
        out.append(entry)
    return out
