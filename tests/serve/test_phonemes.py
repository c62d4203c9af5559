"""Loam's phonemizer (loam.serve.phonemes) against Piper's own: the same sentences and, with the Piper voice's
map, the same ids, for prose, numbers, punctuation and several sentences; piper-tts' `PiperVoice.phonemize` and
`phonemes_to_ids` are the independent implementation."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from loam.serve import phonemes
from tests.models.real_exports import exports, piper

if TYPE_CHECKING:
    from piper.voice import PiperVoice

pytest.importorskip("piper.espeakbridge")

TEXTS = [
    "Hello world.",
    "This is a longer sentence, spoken at another length; and: it goes on!",
    "I have 42 apples and 3.5 pears. Dr. Smith paid $1,200 in 2024?",
    "Where's the café? It's naïve to ask... Isn't it.",
    "One. Two! Three? Four",
    "  spaces   and\nnew lines\tand tabs  ",
    "(Brackets) - dashes -- and \"quotes\" 'too'.",
]


def piper_voice() -> tuple[PiperVoice, dict[str, object]]:
    """Piper's own voice object and the voice's config."""
    from piper.voice import PiperVoice

    model = exports.package_file(piper.PACKAGE, piper.MODEL)
    exports.require_installed(piper.PACKAGE, model is not None)
    assert model is not None
    config = json.loads(model.with_name(model.name + ".json").read_text(encoding="utf-8"))
    return PiperVoice.load(str(model)), config


@pytest.mark.parametrize("text", TEXTS)
def test_sentences_and_ids_are_pipers(text: str) -> None:
    voice, config = piper_voice()
    ours = phonemes.sentences(text, voice.config.espeak_voice)
    theirs = voice.phonemize(text)
    assert ours == theirs and len(ours) >= 1
    id_map = config["phoneme_id_map"]
    assert isinstance(id_map, dict)
    assert [phonemes.phoneme_ids(s, id_map) for s in ours] == [voice.phonemes_to_ids(s) for s in theirs]


def test_piper_speaks_sentence_by_sentence() -> None:
    found = phonemes.sentences("One. Two! Three? Four, five; six", "en-us")
    assert len(found) == 4
    assert found[0][-1] == "." and found[1][-1] == "!" and found[2][-1] == "?"
    assert ", " in "".join(found[3]) and "; " in "".join(found[3])


def test_ids_pad_every_phoneme_and_skip_unknown_ones() -> None:
    id_map = {"^": [1], "$": [2], "_": [0], "a": [5], "b": [6]}
    assert phonemes.phoneme_ids(["a", "?", "b"], id_map) == [1, 0, 5, 0, 6, 0, 2]
