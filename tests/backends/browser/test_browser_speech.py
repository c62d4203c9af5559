"""Real speech exports in headless Chromium: Silero VAD's page modules give onnxruntime's numbers.

Every .onnx file of the silero-vad wheel (`silero_vad.onnx`, the file people use, takes `sr`, and an
If on it picks the 16 or 8 kHz branch at run time; `silero_vad_op18_ifless.onnx` computes both rates
without one) is built once as a user builds it (`loam layout`'s draft, then the WGSL build the browser
target prints, every kernel on the device) and loaded by a page.  Each run of
tests/models/real_exports/silero_vad.py (its feeds: three chunks of 512 + 64 samples at 16 kHz or
256 + 32 at 8 kHz, batch 1 and 2 where the batch is free) calls the page's forward chunk by chunk, the
LSTM's state the page returned fed to the next call, and every call is held to onnxruntime's session
on the same file, carrying its own state, within the real exports' tolerance.  A chunk the file fixes
otherwise (an 8 kHz chunk where it fixes 576 samples) is the page's ShapeError naming `input`.

The Piper voice speaks its short sentence in the page as onnxruntime does: its page module is built with
host fallback, so the page computes NonZero, Range, the i64 sums and cast and the draws itself
(backends/browser/host.js), and each length they give sizes the device buffers after them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from loam.backends.browser_module import write_browser_module
from loam.testing import forward_inputs
from loam.tools.browser_run import Browser, ModuleError
from tests.models.real_exports import exports, piper, silero_vad

pytestmark = pytest.mark.xdist_group("browser")

WHEEL = (
    "silero_vad", "silero_vad_16k_op15", "silero_vad_16k_sequence", "silero_vad_half", "silero_vad_op18_ifless",
    "silero_vad_openvino_16k",
)  # fmt: skip
"""Every .onnx file of the silero-vad 6.2.3 wheel."""


def page_module(served: Path, export: exports.Export) -> list[str]:
    """Write `export`'s browser module into `served/speech/NAME` (once per session); forward's input names."""
    result = exports.built(export, "wgsl")
    folder = served / "speech" / export.name
    if not (folder / "model.js").exists():
        write_browser_module(folder, result.source, result.module, [], export.name)
    return forward_inputs(result)


def run_in_the_page(browser: Browser, served: Path, export: exports.Export, run: exports.Run) -> float:
    """`run`'s calls through the page and through onnxruntime, each side carrying its own state; the
    largest absolute difference (0 for an extent the graph forbids, once the page refuses it)."""
    names = page_module(served, export)
    where = {"module": f"speech/{export.name}/model.js", "weights": f"speech/{export.name}/weights/"}
    outputs = exports.output_names(export)
    if run.wrong is not None:  # onnxruntime refuses it too (exports.check_refused holds the numpy module to that)
        (feeds,) = run.steps()
        feeds = {**feeds, **run.initial()}
        with pytest.raises(ModuleError) as refused:
            browser.forward([feeds[n] for n in names], **where)
        assert refused.value.name == "ShapeError" and exports.names(refused.value.message, run.wrong), refused.value
        return 0.0
    mine, theirs = run.initial(), run.initial()
    worst = 0.0
    for index, feeds in enumerate(run.steps()):
        page, _ = browser.forward([{**feeds, **mine}[n] for n in names], **where)
        got = [page[name] for name in outputs]
        want = exports.call_onnxruntime(export, {**feeds, **theirs})
        worst = max(worst, exports.compare(export, got, want, f"call {index + 1}"))
        mine, theirs = exports.carry(run, outputs, got), exports.carry(run, outputs, want)
    return worst


def test_every_silero_vad_file_is_installed() -> None:
    exports.require_installed(silero_vad.PACKAGE, bool(silero_vad.exports()))
    assert tuple(e.name for e in silero_vad.exports()) == WHEEL


@pytest.mark.parametrize(("export", "run"), exports.pytest_params(silero_vad.exports()))
def test_silero_vad_in_the_page_matches_onnxruntime_chunk_by_chunk(
    browser: Browser, served: Path, export: exports.Export, run: exports.Run
) -> None:
    graph_inputs = {i.name for i in exports.model_of(export).graph.input}
    assert set(page_module(served, export)) == graph_inputs  # `sr` too: the page picks the rate's branch
    run_in_the_page(browser, served, export, run)


def test_the_piper_voice_speaks_a_sentence_in_the_page_as_onnxruntime_does(browser: Browser, served: Path) -> None:
    """One sentence, noise scales 0 (so onnxruntime's waveform repeats), through the voice's page module."""
    exports.require_installed(piper.PACKAGE, bool(piper.exports()))
    (export,) = piper.exports()
    run = next(r for r in export.runs if r.label == "sentence-short")
    run_in_the_page(browser, served, export, run)
    model = (served / "speech" / export.name / "model.js").read_text(encoding="utf-8")
    assert "function kernel_nonzero(" in model and model.count("await g.host(") == sum(piper.HOST_NODES.values())
