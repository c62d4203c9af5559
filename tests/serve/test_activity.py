"""The activity role: Silero VAD v5 served over continuing audio.  Its probabilities equal onnxruntime's under
silero-vad's own streaming loop, a request's events are the same alone and in any cohort, and the intervals
partition its input."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest

from loam.serve.activity import ActivityEvent, ActivityParams, ActivityRequest, Result, SileroActivity
from loam.serve.metrics import Metrics
from loam.serve.scheduler import Request, ServeError
from loam.serve.server import Server
from loam.serve.spec import Capacities
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


class Gated(SileroActivity):
    """Silero's control whose numerical work waits for `gate`: a cohort is held accepted while the test acts."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.gate.set()

    def generate(self, state: object, plan: object) -> Result | None:
        self.entered.set()
        assert self.gate.wait(60), "the test never opened the gate"
        return super().generate(state, plan)


def test_a_member_cancelled_in_an_accepted_cohort_is_completed_and_its_row_serves_the_next(server: Server) -> None:
    package = server.model("silero").package
    control = Gated()
    capacities = Capacities(resident_requests=2, batch_units=8)
    worker = StreamWorker("gated", Metrics().model("gated"), control, control.prepare(package), capacities,
                          input_limit=1 << 17)  # fmt: skip
    try:
        speech, after_silence, noisy, *_ = recordings(16000)
        want = {name: run_alone(worker, samples, 16000) for name, samples in
                (("a", speech), ("b", after_silence), ("c", noisy))}  # fmt: skip
        sinks = {name: Request.collector() for name in "ab"}
        control.gate.clear()
        control.entered.clear()
        requests = {name: worker.open(ActivityParams(16000), sinks[name][0]) for name in "ab"}
        worker.feed(requests["a"], speech, eof=True)
        worker.feed(requests["b"], after_silence, eof=True)
        assert control.entered.wait(60)
        worker.cancel(requests["a"])  # while its cohort runs: it is completed, its events dropped, then released
        control.gate.set()
        b = [e.value for e in sinks["b"][1](60) if e.kind == "event"]
        assert_close(b, want["b"])
        a = list(sinks["a"][1](60))
        assert a[-1].kind == "error" and a[-1].status == 499
        assert len([e for e in a if e.kind == "event"]) < len(want["a"])
        assert sorted(worker.free_rows) == [0, 1]
        # Both rows have been held and left: a request given either starts from silence and a zero state.
        assert run_alone(worker, noisy, 16000) == want["c"]
        assert run_alone(worker, speech, 16000) == want["a"]
    finally:
        control.gate.set()
        worker.stop()


def assert_close(got: list[object], want: list[ActivityEvent]) -> None:
    """Events in a cohort against the run alone: the intervals exactly, the probabilities within the tolerance
    tests/serve/test_live_audio.py explains (BATCH_TOLERANCE)."""
    events = [e for e in got if isinstance(e, ActivityEvent)]
    assert len(events) == len(got)
    assert [(e.start, e.end) for e in events] == [(e.start, e.end) for e in want]
    np.testing.assert_allclose([e.probability for e in events], [e.probability for e in want], rtol=0, atol=2e-6)


def test_a_stalled_reader_holds_back_only_its_own_request(server: Server) -> None:
    package = server.model("silero").package
    control = SileroActivity()
    capacities = Capacities(resident_requests=2, output_bytes=20 * 48)  # twenty events
    worker = StreamWorker("stalled", Metrics().model("stalled"), control, control.prepare(package), capacities,
                          input_limit=1 << 17)  # fmt: skip
    try:
        speech, after_silence, *_ = recordings(16000)
        want = run_alone(worker, speech, 16000)
        sink, drain = Request.collector()
        stalled = worker.open(ActivityParams(16000), sink)
        worker.feed(stalled, speech, eof=True)
        deadline = time.monotonic() + 60
        while stalled.unread < capacities.output_bytes:
            assert time.monotonic() < deadline, "the stalled request never filled its output credit"
            time.sleep(0.01)
        held = stalled.delivered
        other = run_alone(worker, after_silence, 16000)  # runs to its end beside the stalled request
        assert_partition(other, len(after_silence), 16000)
        assert stalled.delivered == held and not stalled.finished  # no work while its reader is behind
        events = []
        for event in drain(60):  # its reader takes what waits: it goes on to its end
            if event.kind == "event":
                events.append(event.value)
                worker.consumed(stalled, event.size)
        assert events == want
    finally:
        worker.stop()


def test_a_released_row_starts_from_silence_in_the_control(server: Server) -> None:
    """The control alone: A and B share cohorts on rows 0 and 1; A leaves after its third chunk (completed, then
    released); C takes row 0 and its probabilities are its run alone, B's go on as if A had never been there."""
    package = server.model("silero").package
    control = SileroActivity()
    state = control.prepare(package)
    speech, after_silence, noisy, *_ = recordings(16000)

    def chunks(samples: np.ndarray) -> list[np.ndarray]:
        return [samples[k : k + 512] for k in range(0, len(samples) - 512 + 1, 512)][:8]

    def probabilities(pairs: list[tuple[int, np.ndarray]], requests: list[object]) -> list[float]:
        members = []
        for (row, samples), request in zip(pairs, requests, strict=True):
            assert isinstance(request, ActivityRequest)
            work = control.prepare_work(state, request, InputView(samples, request.covered, False))
            members.append(Member(row, request, work))
        plan = control.prepare_batch(state, members)
        result = control.generate(state, plan)
        completions = [control.complete(state, plan, result, i) for i in range(len(members))]
        events = [c.events[0] for c in completions]
        return [e.probability for e in events if isinstance(e, ActivityEvent)]

    def alone(samples: np.ndarray) -> list[float]:
        request = control.prepare_request(state, ActivityParams(16000))
        out = [probabilities([(2, chunk)], [request])[0] for chunk in chunks(samples)]
        control.release(state, request)
        return out

    a, b, c = (control.prepare_request(state, ActivityParams(16000)) for _ in range(3))
    got_b = []
    for chunk_a, chunk_b in zip(chunks(speech)[:3], chunks(after_silence)[:3], strict=True):
        got_b.append(probabilities([(0, chunk_a), (1, chunk_b)], [a, b])[1])
    control.release(state, a)
    got_c = []
    for chunk_c, chunk_b in zip(chunks(noisy)[:5], chunks(after_silence)[3:], strict=True):
        p_c, p_b = probabilities([(0, chunk_c), (1, chunk_b)], [c, b])
        got_c.append(p_c)
        got_b.append(p_b)
    np.testing.assert_allclose(got_b, alone(after_silence), rtol=0, atol=2e-6)
    np.testing.assert_allclose(got_c, alone(noisy)[:5], rtol=0, atol=2e-6)


def test_a_wrong_sample_rate_is_refused_naming_it(server: Server) -> None:
    worker = worker_of(server)
    for rate in (44100, 16000.0, "16000", True, None):
        with pytest.raises(ServeError) as caught:
            worker.open(ActivityParams(rate), Request.collector()[0])
        assert caught.value.param == "sample_rate" and caught.value.status == 400
