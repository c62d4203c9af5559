"""Log-probabilities of known tokens: what a decoder's logits say of a token it is given, not one it samples.

A position's logits score the token that follows it (teacher forcing): the prompt's token k is scored by
the logits at position k - 1, so a prompt's first token has no score.  `TokenScore` is one token's
log-probability, its rank among the vocabulary (1: the most probable) and the `top` most probable
alternatives, as OpenAI's `logprobs` and vLLM's `prompt_logprobs` report them.

The log-softmax is taken in float64 over the float32 logits: a sequence's log-probability is a sum over
its tokens, and a distribution over answers is a softmax of such sums, so the control's arithmetic
should add nothing to the logits' own float32 error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MAX_LOGPROBS = 20
"""The most alternatives a request may ask for per token (`logprobs`, `prompt_logprobs`), as vLLM allows."""


@dataclass(frozen=True)
class TokenScore:
    """One known token's log-probability under the logits before it, its rank, and the best alternatives."""

    token: int
    logprob: float
    rank: int
    top: tuple[tuple[int, float], ...] = ()  # (token id, log-probability), the most probable first


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """The log-probabilities of one position's logits, in float64."""
    values = np.asarray(logits, np.float64)
    shifted = values - values.max()
    return shifted - np.log(np.exp(shifted).sum())


def score(logits: np.ndarray, token: int, top: int = 0) -> TokenScore:
    """`token`'s score under one position's `logits`, with the `top` most probable tokens."""
    logprobs = log_softmax(logits)
    chosen = float(logprobs[token])
    rank = 1 + int(np.count_nonzero(logprobs > chosen))
    best: tuple[tuple[int, float], ...] = ()
    if top > 0:
        head = np.argpartition(-logprobs, top - 1)[:top]
        head = head[np.argsort(-logprobs[head], kind="stable")]
        best = tuple((int(t), float(logprobs[t])) for t in head)
    return TokenScore(int(token), chosen, rank, best)


def distribution(logprobs: Sequence[float]) -> list[float]:
    """The normalized distribution over answers whose sequence log-probabilities are `logprobs` (a softmax)."""
    values = np.asarray(logprobs, np.float64)
    weights = np.exp(values - values.max())
    return [float(p) for p in weights / weights.sum()]
