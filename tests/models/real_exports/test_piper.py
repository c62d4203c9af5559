"""The Piper voice (piper.py), built once, synthesizes two sentences of different lengths as onnxruntime
does with the noise scales at 0; so it does a sentence of one phoneme (4 ids, fewer than the attention's
relative-position window, whose pads then crop) and at another length scale, each waveform a length the
durations give.  With the voice's own noise scales, forward's seed repeats a waveform and another
changes it; the WGSL module, its draws on the host, speaks as onnxruntime does."""

from __future__ import annotations

import json

import numpy as np
import pytest

from loam.testing import build_for, forward_inputs
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


@pytest.mark.parametrize(("phonemes", "length_scale"), [("ɐ", 1.0), ("ɐ", 1.5), (piper.SENTENCES["short"], 1.5)])
def test_one_build_at_other_lengths_and_length_scales(phonemes: str, length_scale: float) -> None:
    exports.require_installed(piper.PACKAGE, bool(piper.exports()))
    (export,) = piper.exports()
    feeds = {**piper.sentence_feeds(phonemes), "scales": np.array([0.0, length_scale, 0.0], np.float32)}
    got, want = exports.call_loam(exports.built(export), feeds), exports.call_onnxruntime(export, feeds)
    exports.compare(export, got, want, f"{phonemes!r} at length scale {length_scale}")
    short = exports.call_loam(exports.built(export), piper.sentence_feeds(piper.SENTENCES["short"]))
    assert got[0].shape != short[0].shape  # another waveform length from the same build


def test_a_seed_repeats_the_noisy_voice() -> None:
    exports.require_installed(piper.PACKAGE, bool(piper.exports()))
    (export,) = piper.exports()
    result = exports.built(export)
    feeds = {**piper.sentence_feeds(piper.SENTENCES["short"]), "scales": np.array([0.667, 1.0, 0.8], np.float32)}
    inputs = [feeds[name] for name in forward_inputs(result)]
    weights = result.module.Weights.embedded()
    first, again, other = (result.module.forward(weights, *inputs, seed=seed) for seed in (1, 1, 2))
    np.testing.assert_array_equal(first, again)
    assert first.shape != other.shape or not np.array_equal(first, other)


def test_the_wgsl_module_with_its_draws_on_the_host_matches_onnxruntime() -> None:
    """The device refuses the noise draws (kernel.random) and the lengths only the run knows; with the
    host fallback the rest runs on the device."""
    pytest.importorskip("wgpu")
    exports.require_installed(piper.PACKAGE, bool(piper.exports()))
    (export,) = piper.exports()
    result = build_for(exports.model_of(export), fuse="dispatch", backend="wgsl", host_fallback=True)
    assert result.fusion is not None and result.fusion.device is not None
    on_host = {entry.split(" (", 1)[0] for entry in result.fusion.device.host}  # "NODE (why)"
    assert {"/dp/RandomNormalLike", "/RandomNormalLike"} <= on_host
    feeds = piper.sentence_feeds("ɐ")
    got, want = exports.call_loam(result, feeds), exports.call_onnxruntime(export, feeds)
    exports.compare(export, got, want, "the WGSL module")
