"""Silero VAD (silero_vad.py): every .onnx file in the `silero-vad` wheel, built once, matches onnxruntime
over three chunks with its state carried, at each sample rate it serves, and refuses a chunk its graph
does not take with a ShapeError naming `input`."""

from __future__ import annotations

import pytest

from tests.models.real_exports import exports, silero_vad

pytestmark = pytest.mark.xdist_group("real_exports_silero_vad")


def test_every_file_of_the_wheel_is_a_case() -> None:
    files = exports.package_files(silero_vad.PACKAGE, ".onnx")
    exports.require_installed(silero_vad.PACKAGE, bool(files))
    assert [e.name for e in silero_vad.exports()] == [f.stem for f in files]
    assert len(files) >= 6 and "silero_vad" in {f.stem for f in files}


@pytest.mark.parametrize(("export", "run"), exports.pytest_params(silero_vad.exports()))
def test_matches_onnxruntime(export: exports.Export, run: exports.Run) -> None:
    exports.check(export, run)
