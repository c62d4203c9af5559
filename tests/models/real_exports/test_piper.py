"""The Piper voice (piper.py), built once, synthesizes two sentences of different lengths as onnxruntime
does with the noise scales at 0."""

from __future__ import annotations

import json

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
