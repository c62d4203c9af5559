"""Whisper's three exports (tests/models/whisper): one build per graph, run at two extents, equal to onnxruntime.

The graphs are optimum's encoder, decoder and decoder with past for a tiny random Whisper
(scripts/export_whisper.py wrote them; the folder's README.md says how).  Each is built once as a user
builds it: the layout `loam layout` drafts, unedited, and the graph's safetensors checkpoint.  That one
module then runs at two extents (batch; the decoder's token count and the encoder states' length; the
decoder with past's cache length), on numpy and on WGSL, and each output must equal onnxruntime's
(graph optimizations off) on the same fixed-seed inputs.  The encoder's frame count is not free: the
export fixes it at 3000 (30 s of audio), so another count is a ShapeError naming the input.  Last, the
three modules decode a few tokens greedily together, as a recognizer runs them, and pick onnxruntime's
tokens.

Tolerance: rtol 1e-4, atol 1e-4.  The outputs have magnitude up to about 6 and torch and onnxruntime
already differ by up to 5e-6 on them (float32 sums over at most 256 terms in another order); 1e-4
leaves room for Loam's own order, while a dropped bias (0.02·N(0, 1) each) or LayerNorm scale
(1 + 0.1·N(0, 1)) moves an output by far more.

Where Loam's build stops, its case is a strict xfail whose reason is the failure's first line (FAILS),
so it fails (XPASS) the day the build goes through: then the case must match onnxruntime to pass.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from loam.testing import assert_same, run_onnxruntime
from tests.models.graph_folder import Case, GraphFolder

HERE = Path(__file__).parent
RTOL = ATOL = 1e-4
SEED = 0
MELS, FRAMES, LAYERS, HEADS, HEAD, VOCAB = 80, 3000, 2, 4, 16, 1000
START = 1
"""The decoder's start token."""

pytestmark = pytest.mark.xdist_group("whisper")


def encoder_feeds(rng: np.random.Generator, batch: int) -> dict[str, np.ndarray]:
    """Log-mel features of 30 s of audio (standard normal, as Whisper's feature extractor scales them)."""
    return {"input_features": rng.standard_normal((batch, MELS, FRAMES), dtype=np.float32)}


def token_ids(rng: np.random.Generator, batch: int, tokens: int) -> np.ndarray:
    ids = rng.integers(3, VOCAB, (batch, tokens), dtype=np.int64)
    ids[:, 0] = START
    return ids


def decoder_feeds(rng: np.random.Generator, batch: int, tokens: int, states: int) -> dict[str, np.ndarray]:
    """A prompt of `tokens` ids against `states` rows of encoder output (1500 for 30 s of audio)."""
    return {
        "input_ids": token_ids(rng, batch, tokens),
        "encoder_hidden_states": rng.standard_normal((batch, states, HEADS * HEAD), dtype=np.float32),
    }


def past_names(kind: str, sides: tuple[str, ...] = ("decoder", "encoder")) -> list[str]:
    """The cache's names as optimum spells them: `kind`.LAYER.SIDE.key/value, each layer's sides in turn."""
    return [f"{kind}.{layer}.{side}.{kv}" for layer in range(LAYERS) for side in sides for kv in ("key", "value")]


def with_past_feeds(rng: np.random.Generator, batch: int, past: int, states: int) -> dict[str, np.ndarray]:
    """One new token after a cache of `past` tokens, at position `past` (cache_position)."""
    feeds = {"input_ids": token_ids(rng, batch, 2)[:, 1:]}
    for name in past_names("past_key_values"):
        length = past if ".decoder." in name else states
        feeds[name] = rng.standard_normal((batch, HEADS, length, HEAD), dtype=np.float32)
    feeds["cache_position"] = np.array([past], np.int64)
    return feeds


CASES = {
    # The export fixes the frames at 3000: only the batch is free.
    "encoder_model": Case(encoder_feeds, ((1,), (2,))),
    # (batch, tokens, encoder states): 30 s of audio's 1500 states, and a shorter encoder output.
    "decoder_model": Case(decoder_feeds, ((1, 4, 1500), (2, 7, 24))),
    # (batch, past tokens, encoder states).
    "decoder_with_past_model": Case(with_past_feeds, ((1, 3, 1500), (2, 9, 24))),
}


FAILS: dict[str, tuple[type[Exception], str]] = {}
"""Where a build stops today, on both backends: the exception and its first line (the build's own message,
less the graph's path before it)."""


GRAPHS = GraphFolder(HERE, CASES, RTOL, ATOL, fails=FAILS)


@pytest.mark.parametrize("model", GRAPHS.params())
def test_one_numpy_build_matches_onnxruntime_at_two_extents(model: str) -> None:
    GRAPHS.matches_onnxruntime(model, "numpy")


@pytest.mark.parametrize("model", GRAPHS.params())
def test_one_wgsl_build_matches_onnxruntime_at_two_extents(model: str) -> None:
    """Every kernel on the device: the build's device summary lists none on the host."""
    pytest.importorskip("wgpu")
    GRAPHS.matches_onnxruntime(model, "wgsl")


def test_audio_of_another_length_is_a_shape_error_naming_the_input() -> None:
    """The export fixes the frames at 3000 (transformers' encoder checks it; optimum declares it): 10 s
    of audio, unpadded, is refused naming input_features, as onnxruntime refuses it, not computed."""
    result = GRAPHS.built("encoder_model", "numpy")
    feeds = {"input_features": np.zeros((1, MELS, FRAMES // 3), np.float32)}
    with pytest.raises(Exception, match="input_features"):
        run_onnxruntime(GRAPHS.reference("encoder_model"), feeds)
    with pytest.raises(result.module.ShapeError, match="input_features"):
        GRAPHS.run(result, "encoder_model", feeds)


def test_a_cache_position_the_mask_cannot_take_is_a_shape_error_where_onnxruntime_stops() -> None:
    """The decoder with past declares input_ids [batch_size, 1] but cache_position [decoder_sequence_length]:
    its causal mask, built for the one new token, broadcasts against two positions (both Loam and
    onnxruntime then give two rows of logits) and not against three, where onnxruntime stops at
    '/model/decoder/layers.0/self_attn/Add'.  The module stops there too, naming cache_position."""
    result = GRAPHS.built("decoder_with_past_model", "numpy")
    feeds = CASES["decoder_with_past_model"].inputs((1, 3, 1500))
    feeds["cache_position"] = np.array([3, 4])
    assert_same(
        GRAPHS.run(result, "decoder_with_past_model", feeds),
        run_onnxruntime(GRAPHS.reference("decoder_with_past_model"), feeds),
        rtol=RTOL,
        atol=ATOL,
    )
    feeds["cache_position"] = np.array([3, 4, 5])
    with pytest.raises(Exception, match=r"layers\.0/self_attn/Add"):
        run_onnxruntime(GRAPHS.reference("decoder_with_past_model"), feeds)
    with pytest.raises(
        result.module.ShapeError, match=r"self_attn/Add.*cache_position axis 0 gives decoder_sequence_length = 3"
    ):
        GRAPHS.run(result, "decoder_with_past_model", feeds)


def test_the_three_modules_decode_as_onnxruntime_does() -> None:
    """A recognizer's loop: the encoder once, the decoder on the start token, then the decoder with past
    on each greedy token.  Each step's logits are onnxruntime's and every token picked is the same.
    (Numpy only: the WGSL modules are each held to onnxruntime above, and their encoder's 30 s of
    attention takes a minute a call on a CPU adapter.)"""
    names = list(CASES)
    results = {name: GRAPHS.built(name, "numpy") for name in names}

    def step(name: str, feeds: dict[str, np.ndarray], loam: bool) -> list[np.ndarray]:
        return GRAPHS.run(results[name], name, feeds) if loam else run_onnxruntime(GRAPHS.reference(name), feeds)

    def decode(loam: bool) -> tuple[list[int], list[np.ndarray]]:
        (states,) = step("encoder_model", encoder_feeds(np.random.default_rng(SEED), 1), loam)
        out = step("decoder_model", {"input_ids": np.array([[START]]), "encoder_hidden_states": states}, loam)
        tokens, logits = [], [out[0]]
        cache = dict(zip(past_names("past_key_values"), out[1:], strict=True))
        for position in range(1, 4):
            tokens.append(int(np.argmax(logits[-1][0, -1])))
            feeds = {"input_ids": np.array([[tokens[-1]]]), "cache_position": np.array([position]), **cache}
            out = step("decoder_with_past_model", feeds, loam)
            logits.append(out[0])
            # The decoder with past returns the self-attention cache; the encoder's stays as it was.
            cache |= dict(zip(past_names("past_key_values", ("decoder",)), out[1:], strict=True))
        return tokens, logits

    got_tokens, got_logits = decode(loam=True)
    want_tokens, want_logits = decode(loam=False)
    assert got_tokens == want_tokens
    for got, want in zip(got_logits, want_logits, strict=True):
        assert_same([got], [want], rtol=RTOL, atol=ATOL)
