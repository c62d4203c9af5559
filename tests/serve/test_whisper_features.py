"""Whisper's log-mel features (loam.serve.whisper_features) equal transformers' WhisperFeatureExtractor's.

The oracle is transformers 4.46.3 itself: scripts/record_whisper_oracles.py ran its extractor on three
sounds and stored what it computed in tests/serve/whisper/features.npz (speech, a short chirp that is
mostly padding, and 30 s of seeded noise under a tone, every frame of which is audio).  Its numpy path
(what it computes where torch is not installed) is matched exactly: the same float64 steps, rounded to
float32 (and the FFT to complex64) at the same points.  Its torch path (torch.stft in float32, what its
`__call__` takes where torch is installed, and what the recorded transcripts heard) differs from its own
numpy path by up to about 1.5e-5 on values in about [-1.5, 1.5], and is matched within 5e-5.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from loam.serve.whisper_features import FRAMES, MELS, WINDOW_SAMPLES, log_mel, mel_filters

ORACLE = Path(__file__).parent / "whisper" / "features.npz"


def full_window(seed: int) -> np.ndarray:
    """The 30 s of noise and tone the recording script made from the same seed."""
    rng = np.random.default_rng(seed)
    t = np.arange(WINDOW_SAMPLES) / 16000
    return (0.1 * np.sin(2 * np.pi * 440 * t) + 0.05 * rng.standard_normal(WINDOW_SAMPLES)).astype(np.float32)


def test_features_equal_transformers_on_speech_and_on_a_mostly_padded_window() -> None:
    oracle = np.load(ORACLE)
    for name in ("speech", "tone"):
        got = log_mel(oracle[f"{name}_audio"])
        assert got.shape == (MELS, FRAMES) and got.dtype == np.float32
        np.testing.assert_array_equal(got, oracle[name], err_msg=name)
        np.testing.assert_allclose(got, oracle[f"{name}_torch"], rtol=0, atol=5e-5, err_msg=name)


def test_features_equal_transformers_on_a_full_window() -> None:
    oracle = np.load(ORACLE)
    got = log_mel(full_window(int(oracle["full_seed"])))
    np.testing.assert_array_equal(got[:, ::15], oracle["full_every_15th"])
    np.testing.assert_allclose(got[:, ::15], oracle["full_every_15th_torch"], rtol=0, atol=5e-5)


def test_audio_past_thirty_seconds_is_cut_and_a_short_window_is_zero_padded() -> None:
    audio = full_window(3)
    np.testing.assert_array_equal(log_mel(np.concatenate([audio, audio[:1000]])), log_mel(audio))
    short = audio[:16000]
    np.testing.assert_array_equal(log_mel(short), log_mel(np.concatenate([short, np.zeros(5000, np.float32)])))


def test_the_filter_bank_is_slaneys() -> None:
    """Each filter is a triangle of area-normalized height: 80 filters over 201 bins, none empty."""
    filters = mel_filters()
    assert filters.shape == (201, MELS)
    assert np.all(filters.max(axis=0) > 0) and np.all(filters >= 0)
