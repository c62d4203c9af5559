"""Continuing requests: the contract between the server and a control whose requests advance step by step.

A continuing request holds state across many cohorts: a recognizer's sample clock and decoder cache, a
voice's noise generator and playback position, an image's latents and step index.  Its control offers
the request's next operation, the server packs compatible operations of several requests into one
cohort, and the control publishes what each member's part of the cohort produced:

    prepare_request(state, params) -> request        validate, keep the request's own state
    prepare_work(state, request, view) -> Work       the next operation (units 0: waiting for input)
    prepare_batch(state, members) -> plan            pack a cohort, in original member order
    generate(state, plan) -> result                  the numerical work; changes no request's state
    complete(state, plan, result, ordinal) -> Completion   one member's acknowledged input and events
    release(state, request)                          the request retired: free what it holds

The server (`StreamWorker`) owns what the controls do not:

- resident rows: a request holds one of `resident_requests` rows from its first cohort until it
  retires; a request without a row waits, oldest first.  `Member.row` is stable for a request's life
  and reused after it retires, so a control can keep per-row state in arrays the rows index;
- cohorts: the oldest request with work, then every other request whose work has the same
  compatibility tag, up to `batch_units` units; the worker never waits for requests that might arrive;
- input credit: a request's input (PCM samples for audio; nothing for a request whose input it was given
  whole) arrives in packets of any size through `feed`, at most `input_limit` unacknowledged items; an item
  is acknowledged (its credit returned, a `credit` event sent) only when the work that consumed it has
  completed;
- output credit: a request whose reader is `output_bytes` behind is not eligible, so a stalled reader
  holds back only its own request;
- cancellation and failure: every member a cohort accepted is completed, a cancelled one included (its
  events are dropped), before its row is released; a cohort whose `prepare_batch` or `generate` raises
  runs each member alone, so only the one at fault fails.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from loam.serve.metrics import ModelMetrics
from loam.serve.scheduler import Event, Request, ServeError, Worker, failure
from loam.serve.spec import Capacities, Control


@dataclass(frozen=True)
class InputView:
    """A snapshot of a request's unacknowledged input, lent to `prepare_work` for that call only."""

    data: np.ndarray
    position: int  # the index of data[0] in the request's whole input
    eof: bool  # no more input will come


@dataclass(frozen=True)
class Work:
    """A request's next operation, described without advancing the request."""

    data: bytes  # what the control's prepare_batch reads back
    units: int  # a positive additive bound of its work; 0: nothing to do until more input arrives
    tag: str  # works with equal tags may share a cohort


@dataclass(frozen=True)
class Member:
    """One cohort member as `prepare_batch` receives it."""

    row: int  # the request's resident row
    request: object  # the request's state, as prepare_request returned it
    work: Work


@dataclass(frozen=True)
class Completion:
    """What `complete` publishes for one member: acknowledged input, events, whether the request is done."""

    consumed: int = 0  # input items this work consumed: a prefix of the view prepare_work saw
    events: tuple[object, ...] = ()  # the role's events, in order; each may say its `nbytes` (default 64)
    done: bool = False


@runtime_checkable
class StreamControl(Control, Protocol):
    """What a continuing role's control provides (see the module docstring)."""

    def prepare_request(self, state: object, params: object) -> object: ...
    def prepare_work(self, state: object, request: object, view: InputView) -> Work: ...
    def prepare_batch(self, state: object, members: Sequence[Member]) -> object: ...
    def generate(self, state: object, plan: object) -> object: ...
    def complete(self, state: object, plan: object, result: object, ordinal: int) -> Completion: ...
    def release(self, state: object, request: object) -> None: ...


EVENT_BYTES = 64
"""The output credit an event takes when it does not say its own `nbytes`."""


class StreamRequest(Request):
    """A continuing request: the control's state for it, its resident row and its unacknowledged input."""

    def __init__(self, sink: Callable[[Event], None], state: object, *, param: str = "input") -> None:
        super().__init__(sink)
        self.state = state
        self.param = param  # how errors about its input name it
        self.row: int | None = None
        self.released = False
        self.position = 0  # the index of the first unacknowledged input item
        self.eof = False
        self.buffered = 0
        # The feeder (an HTTP event loop) and the worker share the input under this lock, never the worker's own
        # lock, which a running cohort holds: feeding never waits for numerical work.
        self._input_lock = threading.Lock()
        self._input: list[np.ndarray] = []

    def append(self, data: np.ndarray, eof: bool, limit: int) -> None:
        """Add a packet of input (see `StreamWorker.feed`)."""
        with self._input_lock:
            if self.eof:
                raise ServeError(f"{self.param}: the input has already ended", param=self.param)
            if len(data):
                if self.buffered + len(data) > limit:
                    raise ServeError(
                        f"{self.param}: {self.buffered + len(data)} items unacknowledged; this model holds at most "
                        f"{limit} (wait for credit)",
                        status=413,
                        param=self.param,
                    )
                self._input.append(np.asarray(data))
                self.buffered += len(data)
            self.eof = eof

    def view(self) -> InputView:
        with self._input_lock:
            if len(self._input) > 1:
                self._input = [np.concatenate(self._input)]
            data = self._input[0] if self._input else np.zeros(0, np.float32)
            return InputView(data, self.position, self.eof)

    def acknowledge(self, count: int) -> None:
        """Drop the first `count` unacknowledged items: their credit returns."""
        if count <= 0:
            return
        with self._input_lock:
            data = np.concatenate(self._input) if len(self._input) > 1 else self._input[0]
            self._input = [data[count:]] if count < len(data) else []
            self.position += count
            self.buffered -= count
        self.deliver(Event("credit", value=count))


class StreamWorker(Worker):
    """The worker of a continuing role: rows, cohorts of compatible work, input and output credit."""

    def __init__(
        self,
        name: str,
        metrics: ModelMetrics,
        control: StreamControl,
        state: object,
        capacities: Capacities,
        *,
        input_limit: int = 0,
    ) -> None:
        self.control = control
        self.state = state
        self.batch_units = capacities.batch_units
        self.input_limit = input_limit
        self.free_rows = list(range(capacities.resident_requests))
        super().__init__(name, metrics, capacities.output_bytes)

    # -- what routes call ---------------------------------------------------------------------------------------

    def open(self, params: object, sink: Callable[[Event], None], *, param: str = "input") -> StreamRequest:
        """Prepare a request from `params` on the caller's thread (a refusal raises its ServeError) and submit it."""
        request = StreamRequest(sink, self.control.prepare_request(self.state, params), param=param)
        self.submit(request)
        return request

    def feed(self, request: StreamRequest, data: np.ndarray, eof: bool = False) -> None:
        """Append input to `request`; `eof` ends it.  Past `input_limit` unacknowledged items, or after its end,
        the packet is refused (a 413 or a 400 naming the request's input) and nothing is appended."""
        request.append(data, eof, self.input_limit)
        self.poke()

    def credit(self, request: StreamRequest) -> int:
        """How many more input items `request` may be fed now."""
        return max(0, self.input_limit - request.buffered)

    # -- the scheduler ------------------------------------------------------------------------------------------

    def step(self, eligible: list[Request]) -> bool:
        requests = [r for r in eligible if isinstance(r, StreamRequest)]
        for request in requests:
            if request.row is None and self.free_rows:
                request.row = self.free_rows.pop(0)
        works: dict[StreamRequest, Work] = {}
        for request in requests:
            if request.row is None:
                continue
            try:
                work = self.control.prepare_work(self.state, request.state, request.view())
            except Exception as err:
                self._fail(request, err)
                continue
            if work.units > 0:
                works[request] = work
        if not works:
            return False
        oldest, *rest = works
        tag, units = works[oldest].tag, works[oldest].units
        cohort = [oldest]
        for request in rest:
            if works[request].tag == tag and units + works[request].units <= self.batch_units:
                cohort.append(request)
                units += works[request].units
        self.cohort = list(cohort)
        self.cohorts += 1
        self.metrics.cohort_size.observe(len(cohort))
        self.metrics.cohort_units.observe(units)
        self.run_cohort(cohort, lambda members: self._compute(members, works), self._collect, self._refuse)
        return True

    def _compute(self, members: Sequence[StreamRequest], works: Mapping[StreamRequest, Work]) -> tuple[object, object]:
        plan = self.control.prepare_batch(
            self.state, [Member(_row(r), r.state, works[r]) for r in members]
        )  # fmt: skip
        return plan, self.control.generate(self.state, plan)

    def _collect(self, members: Sequence[StreamRequest], outcome: tuple[object, object]) -> None:
        plan, result = outcome
        for ordinal, request in enumerate(members):
            try:
                completion = self.control.complete(self.state, plan, result, ordinal)
                if not 0 <= completion.consumed <= request.buffered:
                    raise ServeError(
                        f"the control acknowledged {completion.consumed} items of {request.buffered}", status=500
                    )
            except Exception as err:
                self._fail(request, err)
                continue
            request.acknowledge(completion.consumed)
            if request.cancelled:
                continue  # collected; the loop retires it
            for event in completion.events:
                request.deliver(Event("event", value=event, size=int(getattr(event, "nbytes", EVENT_BYTES))))
            if completion.done:
                request.deliver(Event("done"))
                self.metrics.finished("stop")
                self._retire_now(request)

    def _refuse(self, request: StreamRequest, status: int, message: str, param: str | None = None) -> None:
        """End `request` with an error (`run_cohort`'s `fail`, and `_fail`'s end)."""
        request.deliver(Event("error", text=message, status=status, param=param))
        self.metrics.finished("error")
        self._retire_now(request)

    def _fail(self, request: StreamRequest, err: Exception) -> None:
        status, message = failure(err)
        self._refuse(request, status, message, getattr(err, "param", None))

    def _retire_now(self, request: StreamRequest) -> None:
        if request in self.waiting:
            self.waiting.remove(request)
        self.retire(request)

    def retire(self, request: Request) -> None:
        if not isinstance(request, StreamRequest) or request.released:
            return
        request.released = True
        row, request.row = request.row, None
        try:
            self.control.release(self.state, request.state)
        finally:
            if row is not None:
                self.free_rows.append(row)
                self.free_rows.sort()


def _row(request: StreamRequest) -> int:
    assert request.row is not None, "a cohort member holds a row"
    return request.row
