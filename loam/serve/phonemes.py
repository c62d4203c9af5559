"""Text to a Piper voice's phoneme ids, sentence by sentence, as Piper itself makes them.

Piper voices read espeak-ng's IPA phonemes: espeak splits the text into clauses, each with its phonemes,
its terminator (`.`, `?`, `!`, `,`, `:`, `;`) and whether it ends a sentence.  Piper keeps the terminator
as a phoneme (a comma, colon or semicolon followed by a space, since the sentence goes on), drops
espeak's language-switch marks (`(fr)`), decomposes the text into NFD code points (so an accent is a
phoneme of its own) and speaks each sentence by itself.  A sentence's ids are the voice's
`phoneme_id_map` entries: the start `^`, the pad `_`, each phoneme followed by the pad, then the end
`$`; a phoneme the map lacks is skipped, as Piper skips it.

espeak-ng comes compiled, with its data, in the `piper-tts` wheel (`piper.espeakbridge`, the `speech`
extra): no network and no system package.  espeak is one process-wide engine whose voice is global
state, so every call holds `_LOCK` from choosing the voice to reading the phonemes.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Mapping, Sequence

from loam.core.errors import LoamError

BOS, EOS, PAD = "^", "$", "_"
_SWITCH = re.compile(r"\([^)]+\)")
"""espeak's language-switch marks around a word it reads in another language's voice."""
_CONTINUING = (",", ":", ";")
"""Terminators of a clause that does not end its sentence: a space follows them."""
_LOCK = threading.Lock()
_initialized = False


class PhonemizerError(LoamError):
    """espeak-ng (the piper-tts wheel) is not installed."""


def sentences(text: str, voice: str) -> list[list[str]]:
    """`text`'s phonemes in espeak-ng's `voice` (a voice config's `espeak.voice`), one list per sentence, each
    phoneme one code point."""
    global _initialized
    with _LOCK:
        try:
            from piper import espeakbridge
            from piper.phonemize_espeak import ESPEAK_DATA_DIR
        except ImportError as err:
            raise PhonemizerError(
                f"espeak-ng is not installed ({err}): the speech role reads phonemes through the piper-tts wheel "
                "(pip install 'loam[speech]')"
            ) from None
        if not _initialized:
            espeakbridge.initialize(str(ESPEAK_DATA_DIR))
            _initialized = True
        espeakbridge.set_voice(voice)
        clauses = espeakbridge.get_phonemes(text)
    found: list[list[str]] = []
    sentence: list[str] = []
    for phonemes, terminator, ends in clauses:
        spoken = _SWITCH.sub("", phonemes) + terminator + (" " if terminator in _CONTINUING else "")
        sentence.extend(unicodedata.normalize("NFD", spoken))
        if ends:
            found.append(sentence)
            sentence = []
    if sentence:
        found.append(sentence)
    return found


def phoneme_ids(phonemes: Sequence[str], id_map: Mapping[str, Sequence[int]]) -> list[int]:
    """A sentence's ids: `^`, `_`, each phoneme the map knows followed by `_`, then `$`."""
    ids = [*id_map[BOS], *id_map[PAD]]
    for phoneme in phonemes:
        if phoneme in id_map:
            ids += [*id_map[phoneme], *id_map[PAD]]
    return ids + list(id_map[EOS])
