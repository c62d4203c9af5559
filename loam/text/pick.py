"""Choosing the next token from a decoder's logits: the one picker `loam generate` and `loam serve` share.

Greedy (`temperature` 0) is the argmax.  Otherwise the logits are read in float64 (so the choice does not
depend on how a float32 softmax rounds), divided by the temperature, and softmaxed; `top_p` below 1 keeps
the smallest set of most probable tokens whose probability reaches it; the caller's generator draws one.
The generator is drawn from exactly once per sampled token, so a seeded run repeats token for token.
"""

from __future__ import annotations

import numpy as np


def pick_token(logits: np.ndarray, rng: np.random.Generator, temperature: float, top_p: float = 1.0) -> int:
    """The next token: the argmax when `temperature` is 0, else a draw from the tempered, top-p-truncated softmax."""
    if temperature == 0:
        return int(np.argmax(logits))
    probs = token_probs(logits, temperature, top_p)
    return int(rng.choice(len(probs), p=probs))


def token_probs(logits: np.ndarray, temperature: float, top_p: float = 1.0) -> np.ndarray:
    """The distribution `pick_token` draws from (`temperature` above 0): float64, summing to 1.  A speculative
    verifier weighs proposed tokens by it."""
    scaled = np.asarray(logits, dtype=np.float64) / temperature
    scaled -= scaled.max()
    probs = np.exp(scaled)
    probs /= probs.sum()
    if top_p < 1.0:
        order = np.argsort(-probs, kind="stable")
        cumulative = np.cumsum(probs[order])
        keep = order[: int(np.searchsorted(cumulative, top_p)) + 1]
        kept = np.zeros_like(probs)
        kept[keep] = probs[keep]
        probs = kept / kept.sum()
    return probs
