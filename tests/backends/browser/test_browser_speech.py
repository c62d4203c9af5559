"""Real speech exports in headless Chromium: Silero VAD's page module gives onnxruntime's numbers.

`silero_vad.onnx` (the file people use: it takes `sr`, and an If on it picks the 16 or 8 kHz branch)
and `silero_vad_op18_ifless.onnx` are each built once as a user builds them (`loam layout`'s draft,
then the WGSL build the browser target prints, every kernel on the device) and loaded by a page.  Each
streaming run of tests/models/real_exports/silero_vad.py (its feeds: three chunks of 512 + 64 samples
at 16 kHz or 256 + 32 at 8 kHz, batch 1 and 2) calls the page's forward chunk by chunk, the LSTM's
state the page returned fed to the next call, and every call is held to onnxruntime's session on the
same file, carrying its own state, within the real exports' tolerance.

The Piper voice is listed too: a strict xfail while its build is refused.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from loam.backends.browser_module import write_browser_module
from loam.core.errors import UnsupportedError
from loam.testing import forward_inputs
from loam.tools.browser_run import Browser
from tests.models.real_exports import exports, piper, silero_vad

pytestmark = pytest.mark.xdist_group("browser")

IN_THE_PAGE = ("silero_vad", "silero_vad_op18_ifless")

PIPER_REFUSAL = "node '/dp/RandomNormalLike' uses operator 'RandomNormalLike', which Loam does not compile"
"""The first line of what stops the Piper voice's WGSL build today."""


def page_module(served: Path, export: exports.Export) -> list[str]:
    """Write `export`'s browser module into `served/speech/NAME` (once per session); forward's input names."""
    result = exports.built(export, "wgsl")
    folder = served / "speech" / export.name
    if not (folder / "model.js").exists():
        write_browser_module(folder, result.source, result.module, [], export.name)
    return forward_inputs(result)


def run_in_the_page(browser: Browser, served: Path, export: exports.Export, run: exports.Run) -> float:
    """`run`'s calls through the page and through onnxruntime, each side carrying its own state; the
    largest absolute difference."""
    names = page_module(served, export)
    where = {"module": f"speech/{export.name}/model.js", "weights": f"speech/{export.name}/weights/"}
    outputs = exports.output_names(export)
    mine, theirs = run.initial(), run.initial()
    worst = 0.0
    for index, feeds in enumerate(run.steps()):
        page, _ = browser.forward([{**feeds, **mine}[n] for n in names], **where)
        got = [page[name] for name in outputs]
        want = exports.call_onnxruntime(export, {**feeds, **theirs})
        worst = max(worst, exports.compare(export, got, want, f"call {index + 1}"))
        mine, theirs = exports.carry(run, outputs, got), exports.carry(run, outputs, want)
    return worst


def cases() -> list[exports.Export]:
    return [e for e in silero_vad.exports() if e.name in IN_THE_PAGE]


def test_the_silero_vad_files_are_installed() -> None:
    exports.require_installed(silero_vad.PACKAGE, sorted(e.name for e in cases()) == sorted(IN_THE_PAGE))


@pytest.mark.parametrize(("export", "run"), exports.pytest_params(cases()))
def test_silero_vad_in_the_page_matches_onnxruntime_chunk_by_chunk(
    browser: Browser, served: Path, export: exports.Export, run: exports.Run
) -> None:
    graph_inputs = {i.name for i in exports.model_of(export).graph.input}
    assert set(page_module(served, export)) == graph_inputs  # `sr` too: the page picks the rate's branch
    run_in_the_page(browser, served, export, run)


@pytest.mark.xfail(strict=True, raises=UnsupportedError, reason=PIPER_REFUSAL)
def test_the_piper_voice_speaks_a_sentence_in_the_page_as_onnxruntime_does(browser: Browser, served: Path) -> None:
    """One sentence, noise scales 0 (so onnxruntime's waveform repeats), through the voice's page module."""
    exports.require_installed(piper.PACKAGE, bool(piper.exports()))
    (export,) = piper.exports()
    run = next(r for r in export.runs if r.label == "sentence-short")
    try:
        run_in_the_page(browser, served, export, run)
    except UnsupportedError as err:  # only the listed refusal is the expected failure
        assert PIPER_REFUSAL in str(err), exports.first_line(err)
        raise
