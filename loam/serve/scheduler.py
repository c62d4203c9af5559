"""The cohort scheduler: one worker thread per model, forming cohorts oldest-first and never waiting.

The rule every role shares: start from the oldest prepared request, fill the cohort from the
compatible waiting requests (equal compatibility tags) up to the units capacity, and run it at once,
without waiting for requests that might arrive.  Every member a cohort accepted is collected
after the run, even one whose client has gone: cancellation takes effect at that boundary, never
inside numerical work.  A request whose reader has fallen `output_bytes` behind is not eligible for
the next cohort, so a stalled reader holds back only its own request.

Numerical work runs on the worker, never on the HTTP event loop; results reach a request through its
`sink`, a callable the caller supplies (the HTTP layer hands events to its event loop with
`call_soon_threadsafe`; `Request.events()` collects them on a plain thread).

`Worker` owns the thread, the inbox and the waiting list; `loam.serve.text.TextWorker` and
`loam.serve.finite.FiniteWorker` say what a cohort is and how it runs, through `Worker.run_cohort`,
which runs each member of a failing cohort alone so that only the one at fault fails.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from loam.core.errors import LoamError
from loam.serve.metrics import ModelMetrics


@dataclass
class Event:
    """What a request's sink receives: a piece of output, its end, or its failure."""

    kind: str  # "token" (text + token id), "result" (finite: the request's output), "event" (a continuing role's
    # event, in `value`), "credit" (continuing: `value` input items acknowledged), "done", "error"
    text: str = ""
    token: int = -1
    value: object = None
    finish_reason: str | None = None
    usage: dict[str, object] | None = None
    status: int = 400
    param: str | None = None  # an error's request field, where the worker knows it
    size: int = 0  # the output credit an "event" takes


class ServeError(LoamError):
    """A request the server refuses or fails: `status` is the HTTP status, `param` the request field at fault."""

    def __init__(
        self, message: str, *, status: int = 400, param: str | None = None, kind: str = "invalid_request_error"
    ) -> None:
        super().__init__(message)
        self.status, self.param, self.kind = status, param, kind


def failure(err: Exception) -> tuple[int, str]:
    """The HTTP status and message a request fails with when its numerical work raised `err`: a refusal of its
    input (a LoamError: 400, or the status a ServeError carries) or a bug (500, with the traceback logged)."""
    if isinstance(err, ServeError):
        return err.status, str(err)
    if isinstance(err, LoamError):
        return 400, str(err)
    traceback.print_exc()
    return 500, f"internal error: {type(err).__name__}: {err}"


_ids = itertools.count()

Member = TypeVar("Member")
Result = TypeVar("Result")


@dataclass(eq=False)
class Request:
    """One request a worker schedules.  `arrival` orders requests: lower is older."""

    sink: Callable[[Event], None]
    units: int = 1
    tag: str = ""
    arrival: int = field(default_factory=lambda: next(_ids))
    created: float = field(default_factory=time.monotonic)
    cancelled: bool = False
    finished: bool = False
    # Output bytes handed to the sink and taken by its reader: two counters with one writer each (the worker,
    # the reader), so neither update can be lost between threads.
    delivered: int = 0
    taken: int = 0

    @property
    def unread(self) -> int:
        """Bytes delivered to the sink that its reader has not taken yet."""
        return self.delivered - self.taken

    def deliver(self, event: Event) -> None:
        if event.kind == "token":
            self.delivered += len(event.text.encode("utf-8"))
        elif event.kind == "event":
            self.delivered += event.size
        if event.kind in ("done", "error"):
            self.finished = True
        try:
            self.sink(event)
        except Exception:  # a sink whose loop has closed: the client is gone, the request is collected anyway
            self.cancelled = True

    @staticmethod
    def collector() -> tuple[Callable[[Event], None], Callable[[float], Iterator[Event]]]:
        """A sink for callers on plain threads, and an iterator over its events up to the request's end."""
        events: queue.Queue[Event] = queue.Queue()

        def drain(timeout: float = 600.0) -> Iterator[Event]:
            while True:
                event = events.get(timeout=timeout)
                yield event
                if event.kind in ("done", "error"):
                    return

        return events.put, drain


class Worker:
    """A model's worker thread: takes submitted requests, forms cohorts, runs them, delivers results.

    `state` is what the model's control settled at registration (its `prepare`), which the role's routes
    give the control's other calls."""

    state: object = None

    def __init__(self, name: str, metrics: ModelMetrics, output_bytes: int) -> None:
        self.name = name
        self.metrics = metrics
        self.output_bytes = output_bytes
        self.lock = threading.RLock()  # held for a whole step: state is touched only under it
        self._inbox: list[Request] = []
        self._wake = threading.Condition(threading.Lock())
        self.waiting: list[Request] = []
        # The members the step in progress has accepted: if the step raises, they fail with it (see `_fail_step`).
        self.cohort: list[Request] = []
        self._stopping = False
        self.cohorts = 0
        self.last_active = time.monotonic()  # when a request last arrived or a step last ran
        # Called on this thread, under `lock`, before a step with eligible requests: the server sets it to
        # reactivate a model whose weights it released (`loam.serve.residency`); raising fails those requests.
        self.before_step: Callable[[], None] = lambda: None
        # Called on the caller's thread with what a request needs besides the weights and the request field to name: the
        # server sets it to refuse one that could not fit its memory budget even alone (`Server.admit_request`).
        self.fits: Callable[[int, str], None] = lambda _need, _param: None
        self._thread = threading.Thread(target=self._loop, name=f"loam-serve-{name}", daemon=True)
        self._thread.start()

    # -- what callers use ---------------------------------------------------------------------------------------

    def submit(self, request: Request) -> None:
        with self._wake:
            if self._stopping:
                raise ServeError(f"model {self.name!r} is being unregistered", status=503)
            self._inbox.append(request)
            self.last_active = time.monotonic()
            self._wake.notify()

    def cancel(self, request: Request) -> None:
        """Stop `request` at the next cohort boundary (a cohort that accepted it still collects it)."""
        request.cancelled = True
        self.poke()

    def consumed(self, request: Request, count: int) -> None:
        """The reader of `request` took `count` bytes: a stalled request may run again."""
        request.taken += count
        self.poke()

    def poke(self) -> None:
        with self._wake:
            self._wake.notify()

    def stop(self, timeout: float = 30.0) -> None:
        """Fail what has not run, let the running cohort finish, end the thread."""
        with self._wake:
            self._stopping = True
            self._wake.notify()
        self._thread.join(timeout)

    # -- what subclasses give -----------------------------------------------------------------------------------

    def step(self, eligible: list[Request]) -> bool:
        """Form one cohort from `eligible` (oldest first) and run it; False when nothing could run.  Each member
        the cohort accepts goes in `self.cohort`."""
        raise NotImplementedError

    def retire(self, request: Request) -> None:
        """Release what `request` holds once it has finished or been cancelled."""

    # -- memory (loam.serve.residency) ---------------------------------------------------------------------------

    def idle(self) -> bool:
        """Whether no request is waiting or running (its caller holds `lock`)."""
        with self._wake:
            return not self._inbox and not self.waiting

    def kv_bytes(self) -> int:
        """The bytes of the model's retained state at its capacities (a text model's KV pool)."""
        return 0

    def workspace_bytes(self) -> int:
        """The bytes of the working storage the model's largest cohort uses besides its weights and state."""
        return 0

    def resident_bytes(self) -> dict[str, int]:
        """The bytes the model holds now besides its weights, by kind (`kv`, `workspace`)."""
        return {"kv": 0, "workspace": 0}

    def trim(self) -> None:
        """Give back the pages of storage no request holds (unused KV blocks, pooled workspace); run under `lock`
        when the model is idle."""

    def run_cohort(
        self,
        members: Sequence[Member],
        compute: Callable[[Sequence[Member]], Result],
        collect: Callable[[Sequence[Member], Result], None],
        fail: Callable[[Member, int, str], None],
    ) -> None:
        """Run `members` as one cohort: `compute` does the numerical work (and must leave nothing changed when it
        raises), `collect` hands its result to the members.  Where `compute` raises, each member runs alone, so
        that only the one at fault fails: `fail(member, status, message)`, as `failure` words the error."""
        try:
            result = compute(members)
        except Exception as err:
            if len(members) > 1:
                for member in members:
                    self.run_cohort([member], compute, collect, fail)
                return
            status, message = failure(err)
            fail(members[0], status, message)
            return
        collect(members, result)

    # -- the loop -----------------------------------------------------------------------------------------------

    def stalled(self, request: Request) -> bool:
        return request.unread >= self.output_bytes

    def _fail_step(self, err: Exception, eligible: list[Request]) -> None:
        """A step raised: the members of its cohort that have not ended fail with a 500, since the step may have
        left their state half-updated; requests outside the cohort wait for the next one.  A step that raised before
        accepting any member fails the oldest request, so a fault that repeats cannot stop the worker."""
        message = f"internal error: {type(err).__name__}: {err}"
        for request in self.cohort or eligible[:1]:
            if not request.finished:
                request.deliver(Event("error", text=message, status=500))
                self.metrics.finished("error")

    def _ready(self, eligible: list[Request]) -> bool:
        """Run `before_step`; where it raises (the model cannot be made ready), fail the eligible requests with its
        status and message, and say so."""
        try:
            self.before_step()
        except Exception as err:
            status, message = failure(err)
            for request in eligible:
                self.waiting.remove(request)
                request.deliver(Event("error", text=message, status=status))
                self.metrics.finished("error")
                self.retire(request)
            return False
        return True

    def _loop(self) -> None:
        while True:
            with self._wake:
                self.waiting += self._inbox
                self._inbox.clear()
                stopping = self._stopping
            with self.lock:
                for request in [r for r in self.waiting if r.cancelled or r.finished or stopping]:
                    self.waiting.remove(request)
                    if not request.finished:
                        request.deliver(
                            Event("error", text="the request was cancelled", status=499)
                            if request.cancelled
                            else Event("error", text=f"model {self.name!r} was unregistered", status=503)
                        )
                        self.metrics.finished("cancelled" if request.cancelled else "error")
                    self.retire(request)
                if stopping:
                    return
                self.metrics.queue_depth.set(len(self.waiting))
                eligible = [r for r in self.waiting if not self.stalled(r)]
                ran = False
                if eligible and not self._ready(eligible):
                    continue
                if eligible:
                    self.cohort = []
                    try:
                        ran = self.step(eligible)
                    except Exception as err:  # a bug in Loam: fail the cohort it hit, keep serving the others
                        traceback.print_exc()
                        self._fail_step(err, eligible)
                        ran = True
                    self.cohort = []
                    self.last_active = time.monotonic()
            if not ran:
                with self._wake:
                    if not self._inbox and not self._stopping:
                        self._wake.wait(0.05 if eligible else 1.0)
