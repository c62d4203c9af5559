"""The activity role: Silero VAD v5 served over continuing audio.  Its probabilities equal onnxruntime's under
silero-vad's own streaming loop, a request's events are the same alone and in any cohort, and the intervals
partition its input."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import pytest

from loam.serve.activity import CHUNK, ActivityEvent, ActivityParams, SileroActivity
from loam.serve.scheduler import ServeError
from loam.serve.server import Server
from loam.serve.stream import InputView, Member, StreamWorker
from tests.serve.activity_audio import (
    activity_package,
    assert_partition,
    recordings,
    reference,
    run_alone,
    silero_path,
)
from tests.serve.serving import serving

pytestmark = pytest.mark.xdist_group("serve-activity")

TOLERANCE = 1e-5
"""Agreement with onnxruntime: the two sum each Conv and LSTM gate in another order, a few ulps that the
carried state grows over a recording; a wrong context, padding or state moves a probability far more."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = activity_package(tmp_path_factory.mktemp("silero"), capacities={"resident_requests": 3})
    with serving(tmp_path_factory, folder) as server:
        yield server


def worker_of(server: Server) -> StreamWorker:
    worker = server.model("silero").worker
    assert isinstance(worker, StreamWorker)
    return worker


@pytest.mark.parametrize("rate", [16000, 8000])
def test_probabilities_equal_onnxruntime_under_silero_streaming(server: Server, rate: int) -> None:
    worker = worker_of(server)
    for samples in recordings(rate):
        events = run_alone(worker, samples, rate)
        assert_partition(events, len(samples), rate)
        want = reference(silero_path(), samples, rate)
        got = [e.probability for e in events]
        np.testing.assert_allclose(got, want, rtol=0, atol=TOLERANCE)


def test_speech_is_told_from_silence_and_noise(server: Server) -> None:
    speech, _, noisy, silence, _ = recordings(16000)
    probabilities = {name: [e.probability for e in run_alone(worker_of(server), samples, 16000)]
                     for name, samples in (("speech", speech), ("noise", noisy), ("silence", silence))}  # fmt: skip
    assert max(probabilities["speech"]) > 0.9 and max(probabilities["silence"]) < 0.1
    assert np.mean(probabilities["speech"]) > 3 * np.mean(probabilities["noise"])
