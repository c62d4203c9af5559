"""Whisper's special tokens and suppress lists, read from a recognition package's `generation_config.json`.

The file is the model's generation config in transformers' format (its keys are those of
`WhisperForConditionalGeneration.generation_config`), so a package copies the model's own: the start of
transcript (`decoder_start_token_id`), the end of text (`eos_token_id`), `no_timestamps_token_id`,
`prev_sot_token_id` (`<|startofprev|>`, before a prompt's previous text), `task_to_id`, `lang_to_id`
(`"<|en|>": 50259`, ...), `suppress_tokens` (never picked), `begin_suppress_tokens` (not picked as the
first token after the prompt) and `max_length` (the decoder's tokens, prompt included).  Greedy decoding
over these is what transformers' `generate` does for the model with one beam and no sampling.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loam.serve.spec import PackageError

TASKS = ("transcribe", "translate")


@dataclass(frozen=True)
class WhisperTokens:
    """A Whisper model's special tokens and suppress lists."""

    start: int
    end: int
    no_timestamps: int
    previous: int
    tasks: dict[str, int]
    languages: dict[str, int]  # "en" -> the id of <|en|>
    suppress: np.ndarray
    begin_suppress: np.ndarray
    max_length: int

    def prompt(self, language: int, task: str = "transcribe") -> list[int]:
        """The tokens every transcription starts from: start of transcript, language, task, no timestamps."""
        return [self.start, language, self.tasks[task], self.no_timestamps]

    def language_name(self, token: int) -> str:
        return next(code for code, id_ in self.languages.items() if id_ == token)


def read_whisper_tokens(path: Path) -> WhisperTokens:
    """Read `path` (a generation_config.json); refuse a missing file or key, or a key of the wrong kind, naming it."""
    try:
        table = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise PackageError(f"{path}: cannot read it as JSON ({err})") from None
    if not isinstance(table, dict):
        raise PackageError(f"{path}: must hold a JSON object")

    def integer(key: str) -> int:
        value = table.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise PackageError(f"{path}: key {key!r} must be a token id, got {value!r}")
        return value

    def ids(key: str) -> np.ndarray:
        value = table.get(key)
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise PackageError(f"{path}: key {key!r} must be a list of token ids, got {value!r}")
        return np.array(value, np.int64)

    def table_of(key: str, names: tuple[str, ...] | None = None) -> dict[str, int]:
        value = table.get(key)
        if (
            not isinstance(value, dict)
            or not value
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in value.values())
        ):
            raise PackageError(f"{path}: key {key!r} must be an object of name -> token id, got {value!r}")
        if names is not None and set(value) != set(names):
            raise PackageError(f"{path}: key {key!r} must name {', '.join(names)}, got {sorted(value)}")
        return dict(value)

    languages = {}
    for name, token in table_of("lang_to_id").items():
        if not (name.startswith("<|") and name.endswith("|>")):
            raise PackageError(f"{path}: key 'lang_to_id' names {name!r}; a language token is written <|code|>")
        languages[name[2:-2]] = token
    max_length = integer("max_length")
    if max_length < 5:
        raise PackageError(f"{path}: key 'max_length' must leave room for the prompt and a token, got {max_length}")
    return WhisperTokens(
        start=integer("decoder_start_token_id"),
        end=integer("eos_token_id"),
        no_timestamps=integer("no_timestamps_token_id"),
        previous=integer("prev_sot_token_id"),
        tasks=table_of("task_to_id", TASKS),
        languages=languages,
        suppress=ids("suppress_tokens"),
        begin_suppress=ids("begin_suppress_tokens"),
        max_length=max_length,
    )
