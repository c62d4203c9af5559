"""The continuing-request scheduler (loam.serve.stream) with an arithmetic control whose answers a test can
compute independently: each request sums its input in windows of its own length, carrying a running total in
the row the server gives it, so any mix-up of rows, positions or cohort order shows in the sums."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pytest

from loam.serve.metrics import Metrics
from loam.serve.scheduler import Event, Request, ServeError
from loam.serve.spec import Capacities, Package
from loam.serve.stream import Completion, InputView, Member, StreamControl, StreamRequest, StreamWorker, Work

pytestmark = pytest.mark.xdist_group("stream")


@dataclass
class Summing:
    window: int
    poison: bool = False
    row: int = -1  # the row the server gave it, which the control resets when the request retires


@dataclass(frozen=True)
class Window:
    start: int
    end: int
    total: float  # the running sum of the request's input up to `end`
    nbytes: int = 16


class RunningSums:
    """A control whose numerical work is one batched numpy call per cohort: each member's next window summed,
    added to the running total its row holds."""

    def __init__(self, rows: int) -> None:
        self.totals = np.zeros(rows)
        self.completed: list[tuple[int, int]] = []  # (row, window end) of every completion, cancelled ones included
        self.rows_seen: dict[int, set[int]] = {}  # id(request) -> rows it was given
        self.largest_cohort = 0
        self.released = 0
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()

    def prepare(self, package: Package) -> object:
        return None

    def prepare_request(self, state: object, params: object) -> object:
        assert isinstance(params, dict)
        window = params.get("window")
        if not isinstance(window, int) or window < 1:
            raise ServeError("window: a positive integer", param="window")
        return Summing(window, bool(params.get("poison")))

    def prepare_work(self, state: object, request: object, view: InputView) -> Work:
        assert isinstance(request, Summing)
        take = min(request.window, len(view.data))
        if take < request.window and not (view.eof and take):
            return Work(b"", 0, "")
        last = take < request.window or (view.eof and take == len(view.data))
        header = np.array([view.position, last], np.int64).tobytes()
        return Work(header + np.asarray(view.data[:take], np.float64).tobytes(), take, "sum")

    def prepare_batch(self, state: object, members: Sequence[Member]) -> object:
        for member in members:
            self.rows_seen.setdefault(id(member.request), set()).add(member.row)
        self.largest_cohort = max(self.largest_cohort, len(members))
        return list(members)

    def generate(self, state: object, plan: object) -> object:
        assert isinstance(plan, list)
        self.entered.set()
        self.gate.wait(10)
        if any(isinstance(m.request, Summing) and m.request.poison for m in plan):
            raise ValueError("poisoned input")
        sums = np.array([np.frombuffer(m.work.data[16:], np.float64).sum() for m in plan])
        return self.totals[[m.row for m in plan]] + sums

    def complete(self, state: object, plan: object, result: object, ordinal: int) -> Completion:
        assert isinstance(plan, list) and isinstance(result, np.ndarray)
        member = plan[ordinal]
        start, last = (int(v) for v in np.frombuffer(member.work.data[:16], np.int64))
        end = start + member.work.units
        assert isinstance(member.request, Summing)
        member.request.row = member.row
        self.totals[member.row] = result[ordinal]
        self.completed.append((member.row, end))
        return Completion(member.work.units, (Window(start, end, float(result[ordinal])),), bool(last))

    def release(self, state: object, request: object) -> None:
        assert isinstance(request, Summing)
        self.released += 1
        if request.row >= 0:
            self.totals[request.row] = 0.0


def expected(data: np.ndarray, window: int) -> list[Window]:
    """The windows an independent loop over `data` gives."""
    out, total = [], 0.0
    for start in range(0, len(data), window):
        chunk = data[start : start + window]
        total += float(chunk.sum())
        out.append(Window(start, start + len(chunk), total))
    return out


@pytest.fixture
def control() -> Iterator[RunningSums]:
    yield RunningSums(4)


def worker_for(control: RunningSums, **capacities: int) -> StreamWorker:
    caps = Capacities(**{"batch_units": 64, "resident_requests": 4, "output_bytes": 1 << 16, **capacities})
    assert isinstance(control, StreamControl)
    return StreamWorker("sums", Metrics().model("sums"), control, None, caps, input_limit=1000)


def events_of(
    drain: Iterator[Event], reader: tuple[StreamWorker, StreamRequest] | None = None
) -> tuple[list[Window], Event]:
    """A request's windows and its end; with `reader`, each event is taken as a reader takes it."""
    windows = []
    for event in drain:
        if event.kind == "event":
            assert isinstance(event.value, Window)
            windows.append(event.value)
            if reader is not None:
                reader[0].consumed(reader[1], event.size)
        elif event.kind in ("done", "error"):
            return windows, event
    raise AssertionError("no end")


def run_fed(worker: StreamWorker, data: np.ndarray, window: int, packets: Sequence[int]) -> list[Window]:
    sink, drain = Request.collector()
    request = worker.open({"window": window}, sink)
    at = 0
    for size in packets:
        worker.feed(request, data[at : at + size])
        at += size
    worker.feed(request, data[at:], eof=True)
    windows, end = events_of(drain(20), (worker, request))
    assert end.kind == "done", end.text
    return windows


def test_packet_boundaries_change_nothing(control: RunningSums) -> None:
    data = np.random.default_rng(0).standard_normal(103)
    worker = worker_for(control)
    try:
        want = expected(data, 10)
        for packets in ([103], [1] * 50, [7, 3, 11, 40], [10, 10, 10]):
            assert run_fed(worker, data, 10, packets) == want
    finally:
        worker.stop()


def test_requests_at_different_positions_share_cohorts_and_equal_isolated_runs(control: RunningSums) -> None:
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal(n) for n in (95, 40, 130)]
    windows = [5, 8, 3]
    worker = worker_for(control)
    try:
        isolated = [run_fed(worker, x, w, [len(x)]) for x, w in zip(inputs, windows, strict=True)]
        control.gate.clear()  # hold the first cohort so the others arrive at different positions
        control.entered.clear()
        results: list[list[Window]] = [[] for _ in inputs]

        def client(i: int) -> None:
            time.sleep(0.02 * i)
            results[i] = run_fed(worker, inputs[i], windows[i], [17, 1, 30])

        threads = [threading.Thread(target=client, args=(i,)) for i in range(3)]
        for thread in threads:
            thread.start()
        assert control.entered.wait(5)
        time.sleep(0.1)
        control.gate.set()
        for thread in threads:
            thread.join(20)
        assert results == isolated
        assert results[0] == expected(inputs[0], 5)
        assert control.largest_cohort > 1
    finally:
        worker.stop()


def test_rows_are_stable_and_reused(control: RunningSums) -> None:
    worker = worker_for(control, resident_requests=2)
    try:
        for _ in range(3):
            run_fed(worker, np.ones(20), 4, [20])
        assert all(len(rows) == 1 for rows in control.rows_seen.values())
        assert {row for rows in control.rows_seen.values() for row in rows} == {0}
        assert control.released == 3 and worker.free_rows == [0, 1]
    finally:
        worker.stop()


def test_a_cancelled_member_is_completed_then_its_row_reused(control: RunningSums) -> None:
    worker = worker_for(control, resident_requests=1)
    try:
        control.gate.clear()
        sink, drain = Request.collector()
        doomed = worker.open({"window": 4}, sink)
        worker.feed(doomed, np.ones(8))
        assert control.entered.wait(5)
        worker.cancel(doomed)
        control.gate.set()
        windows, end = events_of(drain(10))
        assert end.kind == "error" and end.status == 499 and windows == []  # its events were dropped
        assert (0, 4) in control.completed  # the accepted cohort still completed the cancelled member
        assert run_fed(worker, np.arange(9.0), 4, [9]) == expected(np.arange(9.0), 4)  # row 0, fresh total
    finally:
        worker.stop()


def test_only_the_member_at_fault_fails(control: RunningSums) -> None:
    worker = worker_for(control)
    try:
        control.gate.clear()
        sinks = [Request.collector() for _ in range(3)]
        requests = [
            worker.open({"window": 5, "poison": i == 1}, sink) for i, (sink, _) in enumerate(sinks)
        ]  # fmt: skip
        for request in requests:
            worker.feed(request, np.ones(10), eof=True)
        control.gate.set()
        ends = [events_of(drain(10)) for _, drain in sinks]
        assert [end.kind for _, end in ends] == ["done", "error", "done"]
        assert ends[1][1].status == 500 and "poisoned" in ends[1][1].text
        assert ends[0][0] == expected(np.ones(10), 5)
    finally:
        worker.stop()


def test_input_credit(control: RunningSums) -> None:
    worker = worker_for(control)
    try:
        control.gate.clear()
        sink, drain = Request.collector()
        request = worker.open({"window": 500}, sink)
        worker.feed(request, np.ones(600))
        with pytest.raises(ServeError) as refused:
            worker.feed(request, np.ones(401))
        assert refused.value.status == 413 and request.buffered == 600  # nothing of the refused packet appended
        assert worker.credit(request) == 400
        control.gate.set()
        credits = []
        for event in drain(10):
            if event.kind == "credit":
                credits.append(event.value)
                break
        assert credits == [500] and worker.credit(request) == 900
        worker.feed(request, np.ones(0), eof=True)
        with pytest.raises(ServeError, match="already ended"):
            worker.feed(request, np.ones(1))
    finally:
        worker.stop()


def test_a_stalled_reader_holds_back_only_its_own_request(control: RunningSums) -> None:
    worker = worker_for(control, output_bytes=48)  # three windows' events
    try:
        stalled_sink, stalled_drain = Request.collector()
        stalled = worker.open({"window": 1}, stalled_sink)
        worker.feed(stalled, np.ones(50), eof=True)
        reader = run_fed(worker, np.ones(40), 2, [40])
        assert len(reader) == 20  # the other request ran to its end
        assert isinstance(stalled, StreamRequest) and stalled.position == 3 and not stalled.finished
        worker.consumed(stalled, 10**6)  # the reader catches up: the request runs on
        windows, end = events_of(stalled_drain(10))
        assert end.kind == "done" and len(windows) == 50
    finally:
        worker.stop()


def test_a_bad_request_is_refused_before_it_is_queued(control: RunningSums) -> None:
    worker = worker_for(control)
    try:
        sink, _ = Request.collector()
        with pytest.raises(ServeError) as refused:
            worker.open({"window": 0}, sink)
        assert refused.value.param == "window" and worker.idle()
    finally:
        worker.stop()
