"""The Piper voice (piper.py), built once, synthesizes two sentences of different lengths as onnxruntime
does with the noise scales at 0."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.models.real_exports import exports, piper

pytestmark = pytest.mark.xdist_group("real_exports_piper")


def test_the_voice_is_installed() -> None:
    exports.require_installed(piper.PACKAGE, bool(piper.exports()))


def test_phoneme_ids_follow_the_voice_map() -> None:
    """`^`, each phoneme and the pad, `$`: the two sentences differ in length, and every id is the map's."""
    config = exports.package_file(piper.PACKAGE, piper.MODEL + ".json")
    exports.require_installed(piper.PACKAGE, config is not None)
    assert config is not None
    id_map = json.loads(config.read_text(encoding="utf-8"))["phoneme_id_map"]
    short, long = (piper.sentence_feeds(text)["input"] for text in piper.SENTENCES.values())
    assert short.shape[1] == 2 * len(piper.SENTENCES["short"]) + 2 < long.shape[1]
    assert short[0, 0] == id_map["^"][0] and short[0, -1] == id_map["$"][0] and short[0, 2] == id_map["_"][0]


@pytest.mark.parametrize(("export", "run"), exports.pytest_params(piper.exports()))
def test_matches_onnxruntime(export: exports.Export, run: exports.Run) -> None:
    exports.check(export, run)


def test_with_the_noise_scales_at_zero_onnxruntime_repeats_itself() -> None:
    """The oracle: RandomNormalLike draws afresh each run, and with noise_scale and noise_w at 0 none of
    its draw reaches the waveform, so two runs agree to the bit (with the package's scales they do not)."""
    exports.require_installed(piper.PACKAGE, bool(piper.exports()))
    (export,) = piper.exports()
    feeds = piper.sentence_feeds(piper.SENTENCES["short"])
    first, second = (exports.call_onnxruntime(export, feeds)[0] for _ in range(2))
    assert first.size > 1000 and (first == second).all()
    noisy = {**feeds, "scales": np.array([0.667, 1.0, 0.8], np.float32)}
    a, b = (exports.call_onnxruntime(export, noisy)[0] for _ in range(2))
    assert a.shape != b.shape or not (a == b).all()
