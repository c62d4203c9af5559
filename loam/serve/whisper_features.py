"""Whisper's log-mel features in numpy: 16 kHz samples to the encoder's `input_features` [80, 3000].

Whisper hears 30 s windows: a window's samples, zero-padded to 480,000, become 3000 frames of 80 mel bins.
The numbers are those of transformers' `WhisperFeatureExtractor` (numpy path), step for step, because the
model was trained on them and a recognizer that computes them otherwise hears slightly different audio:

- the samples as float32, zero-padded (or cut) to 480,000, then reflect-padded by 200 on each side;
- frames of 400 samples every 160 (3001 of them), each times a periodic Hann window, in float64;
- each frame's one-sided FFT, stored as complex64 as transformers stores it, its power |X|² in float64;
- 80 Slaney mel filters (Slaney's mel scale, area-normalized triangles between 0 and 8 kHz) over the
  201 frequency bins, floored at 1e-10, then log10, as float32;
- the last frame dropped (3000 remain), every value floored at the window's maximum minus 8, then (x + 4) / 4.

The floor at maximum − 8 is per window: the features of a window depend on all of its audio, so a window is
computed once its samples are known (a provisional window's features change as audio arrives).
"""

from __future__ import annotations

import functools

import numpy as np

SAMPLE_RATE = 16000
WINDOW_SAMPLES = 480_000
"""30 s of audio: one encoder call."""
N_FFT, HOP, MELS = 400, 160, 80
FRAMES = WINDOW_SAMPLES // HOP


def hertz_to_mel(freq: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear below 1 kHz (3 mels per 200 Hz), logarithmic above."""
    mels = 3.0 * freq / 200.0
    above = freq >= 1000.0
    mels[above] = 15.0 + np.log(freq[above] / 1000.0) * (27.0 / np.log(6.4))
    return mels


def mel_to_hertz(mels: np.ndarray) -> np.ndarray:
    freq = 200.0 * mels / 3.0
    above = mels >= 15.0
    freq[above] = 1000.0 * np.exp((np.log(6.4) / 27.0) * (mels[above] - 15.0))
    return freq


@functools.cache
def mel_filters() -> np.ndarray:
    """The [201, 80] filter bank: triangles centred on 82 points equally spaced in mel between 0 and 8 kHz, each
    scaled by 2 / its width in Hz (Slaney's area normalization)."""
    edges = mel_to_hertz(np.linspace(hertz_to_mel(np.array([0.0]))[0], hertz_to_mel(np.array([8000.0]))[0], MELS + 2))
    bins = np.linspace(0, SAMPLE_RATE // 2, N_FFT // 2 + 1)
    slopes = edges[None, :] - bins[:, None]
    widths = np.diff(edges)
    down = -slopes[:, :-2] / widths[:-1]
    up = slopes[:, 2:] / widths[1:]
    filters = np.maximum(0.0, np.minimum(down, up))
    filters *= 2.0 / (edges[2 : MELS + 2] - edges[:MELS])
    filters.flags.writeable = False
    return filters


@functools.cache
def hann() -> np.ndarray:
    """The periodic Hann window of 400 samples."""
    window = np.hanning(N_FFT + 1)[:-1]
    window.flags.writeable = False
    return window


def log_mel(samples: np.ndarray) -> np.ndarray:
    """The [80, 3000] float32 features of one window: `samples` (at most 480,000, 16 kHz, any float dtype),
    zero-padded to 30 s."""
    audio = np.zeros(WINDOW_SAMPLES, np.float32)
    audio[: min(len(samples), WINDOW_SAMPLES)] = samples[:WINDOW_SAMPLES]
    padded = np.pad(audio, N_FFT // 2, mode="reflect").astype(np.float64)
    frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP] * hann()
    spectrum = np.fft.rfft(frames, axis=1).astype(np.complex64)
    power = np.abs(spectrum, dtype=np.float64) ** 2
    mel = np.maximum(1e-10, mel_filters().T @ power.T)
    spec = np.log10(mel).astype(np.float32)[:, :-1]
    spec = np.maximum(spec, spec.max() - np.float32(8.0))
    return (spec + np.float32(4.0)) / np.float32(4.0)
