"""The activity role: speech probabilities over continuing audio, from Silero VAD (v5).

A request is a stream of mono PCM samples at 16 or 8 kHz, the rates the model takes.  The model reads
the audio in chunks of 512 samples at 16 kHz (256 at 8 kHz), each after the last 64 (32) samples of the
chunk before it (zeros before the first), and carries an LSTM state `[2, batch, 128]` from one chunk to
the next: `SileroActivity` feeds it exactly as silero-vad's own `OnnxWrapper.__call__` does, with the
state and the context samples kept per resident row, so requests at different sample positions share one
batched call.  Each chunk publishes an `ActivityEvent`: the sample interval of real input it covered and
the model's speech probability for it.  A final partial chunk is zero-padded to the chunk's length, as
silero-vad's `get_speech_timestamps` pads it, and its event covers only the real samples; the intervals of
a request partition its input in order.  Turning probabilities into speech segments (a threshold,
minimum durations, padding) is the caller's policy (`loam.serve.speech_segments`), not the control's.

`model.json` names the graph and, optionally, `recording_seconds`: the longest input a request may send
(default one hour); input past it fails the request with a 413 naming `input`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from loam.serve.metrics import ModelMetrics
from loam.serve.scheduler import ServeError
from loam.serve.spec import Control, Package, PackageError, refuse_control
from loam.serve.stream import Completion, InputView, Member, StreamControl, StreamWorker, Work

CHUNK = {16000: 512, 8000: 256}
"""The samples one model call reads at each rate it takes."""
CONTEXT = {16000: 64, 8000: 32}
"""The samples of the chunk before that each call reads first."""
STATE = (2, 128)
"""The LSTM state's extents besides the batch axis (`[2, batch, 128]`)."""
INPUT_WINDOW = 16384
"""Unacknowledged samples a request may hold (its input credit): a second of audio at 16 kHz, and more."""
RECORDING_SECONDS = 3600.0
"""The default longest recording a request may send (`model.json`'s `recording_seconds`)."""


@dataclass(frozen=True)
class ActivityParams:
    """What an activity request gives: its sample rate (validated by `prepare_request`)."""

    sample_rate: object


@dataclass(frozen=True)
class ActivityEvent:
    """The speech probability of input samples [start, end)."""

    start: int
    end: int
    probability: float
    nbytes: int = 48


@dataclass
class ActivityRequest:
    """A request's retained state besides its row's: its rate and the samples it has covered."""

    rate: int
    covered: int = 0  # samples published so far (the start of the next event)
    row: int = -1  # the resident row it holds once it has run (released: -1)


@dataclass
class ActivityState:
    """What `SileroActivity.prepare` settles: the stage, and each resident row's LSTM state and context samples."""

    stage: str
    forward: Callable[..., tuple[object, ...]]
    recording_seconds: float
    states: np.ndarray  # [2, rows, 128]
    contexts: np.ndarray  # [rows, 64]: the last context samples, the rate's count of them first


@dataclass(frozen=True)
class Chunk:
    """One request's next model call, as `prepare_work` describes it."""

    samples: np.ndarray  # the chunk, zero-padded to the rate's length
    real: int  # the samples of actual input in it (the rest are padding)
    final: bool  # the input ends with this chunk

    def encode(self) -> bytes:
        header = np.array([self.real, int(self.final)], "<i4").tobytes()
        return header + self.samples.astype("<f4").tobytes()

    @staticmethod
    def decode(data: bytes) -> Chunk:
        real, final = np.frombuffer(data, "<i4", count=2)
        return Chunk(np.frombuffer(data, "<f4", offset=8), int(real), bool(final))


@dataclass
class Plan:
    """A cohort: each member's request and chunk, in cohort order, and the rows of the batched call."""

    rate: int
    requests: list[ActivityRequest]
    chunks: list[Chunk]
    rows: list[int]
    batch: list[int] = field(default_factory=list)  # the batch index of each member (-1: no model call)
    inputs: np.ndarray | None = None  # [n, context + chunk]
    states: np.ndarray | None = None  # [2, n, 128]


@dataclass(frozen=True)
class Result:
    """The batched call's outputs, by batch index."""

    probabilities: np.ndarray  # [n]
    states: np.ndarray  # [2, n, 128]


class SileroActivity:
    """The activity role's built-in control: Silero VAD v5 (`input` [batch, samples], `state` [2, batch, 128],
    `sr`; outputs the speech probability [batch, 1] and the next state)."""

    def prepare(self, package: Package) -> ActivityState:
        where = package.spec.folder / "model.json"
        if len(package.stages) != 1:
            raise PackageError(f"{where}: key 'stages': an activity package has one stage, Silero VAD")
        stage = next(iter(package.stages.values()))
        names = tuple(name for name, _, _ in stage.inputs)
        if names != ("input", "state", "sr") or len(stage.outputs) != 2:
            raise PackageError(
                f"{where}: stage {stage.spec.name!r} takes {list(names)} and gives {list(stage.outputs)}; the "
                "activity control runs Silero VAD v5 (input, state, sr -> probability, state)"
            )
        seconds = package.spec.role_keys.get("recording_seconds", RECORDING_SECONDS)
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds < float("inf"):
            raise PackageError(f"{where}: key 'recording_seconds' must be a positive number, got {seconds!r}")
        rows = package.spec.capacities.resident_requests
        return ActivityState(
            stage.spec.name,
            stage.forward,
            float(seconds),
            np.zeros((STATE[0], rows, STATE[1]), np.float32),
            np.zeros((rows, max(CONTEXT.values())), np.float32),
        )

    def prepare_request(self, state: object, params: object) -> ActivityRequest:
        assert isinstance(params, ActivityParams)
        rate = params.sample_rate
        if not isinstance(rate, int) or isinstance(rate, bool) or rate not in CHUNK:
            raise ServeError(
                f"'sample_rate' must be one of {', '.join(map(str, CHUNK))} (the rates Silero VAD takes), got {rate!r}",
                param="sample_rate",
            )
        return ActivityRequest(rate)

    def prepare_work(self, state: object, request: object, view: InputView) -> Work:
        assert isinstance(state, ActivityState) and isinstance(request, ActivityRequest)
        limit = int(state.recording_seconds * request.rate)
        if view.position + len(view.data) > limit:
            raise ServeError(
                f"input: the recording is over {state.recording_seconds:g} s ({limit} samples at {request.rate} Hz), "
                "the longest this model takes",
                status=413,
                param="input",
            )
        if view.position != request.covered:
            raise ServeError(
                f"the input view starts at {view.position}; the request covered {request.covered}", status=500
            )
        size, tag = CHUNK[request.rate], str(request.rate)
        held = len(view.data)
        if held < size and not view.eof:
            return Work(b"", 0, tag)  # waiting for a whole chunk
        real = min(size, held)
        samples = np.zeros(size, np.float32)
        samples[:real] = view.data[:real]
        # With no input left at its end, the work only ends the request: no model call, no event.
        return Work(Chunk(samples, real, view.eof and real == held).encode(), 1, tag)

    def prepare_batch(self, state: object, members: Sequence[Member]) -> Plan:
        assert isinstance(state, ActivityState)
        requests = []
        for member in members:
            assert isinstance(member.request, ActivityRequest)
            requests.append(member.request)
        chunks = [Chunk.decode(m.work.data) for m in members]
        plan = Plan(requests[0].rate, requests, chunks, [m.row for m in members])
        context = CONTEXT[plan.rate]
        called = [i for i, chunk in enumerate(plan.chunks) if chunk.real > 0]
        plan.batch = [called.index(i) if i in called else -1 for i in range(len(members))]
        if called:
            rows = [plan.rows[i] for i in called]
            plan.inputs = np.stack(
                [
                    np.concatenate([state.contexts[row, :context], plan.chunks[i].samples])
                    for i, row in zip(called, rows, strict=True)
                ]
            )
            plan.states = np.ascontiguousarray(state.states[:, rows])
        return plan

    def generate(self, state: object, plan: object) -> Result | None:
        assert isinstance(state, ActivityState) and isinstance(plan, Plan)
        if plan.inputs is None or plan.states is None:
            return None
        probability, following = state.forward(plan.inputs, plan.states, np.array(plan.rate, np.int64))
        return Result(np.asarray(probability, np.float32).reshape(-1), np.asarray(following, np.float32))

    def complete(self, state: object, plan: object, result: object, ordinal: int) -> Completion:
        assert isinstance(state, ActivityState) and isinstance(plan, Plan)
        request, chunk, row, index = (
            plan.requests[ordinal],
            plan.chunks[ordinal],
            plan.rows[ordinal],
            plan.batch[ordinal],
        )
        request.row = row
        if index < 0:
            return Completion(0, (), chunk.final)
        assert isinstance(result, Result) and plan.inputs is not None
        context = CONTEXT[plan.rate]
        state.states[:, row] = result.states[:, index]
        state.contexts[row, :context] = plan.inputs[index, -context:]
        probability = float(result.probabilities[index])
        if not 0.0 <= probability <= 1.0:
            raise ServeError(f"the model gave a speech probability of {probability}", status=500)
        event = ActivityEvent(request.covered, request.covered + chunk.real, probability)
        request.covered += chunk.real
        return Completion(chunk.real, (event,), chunk.final)

    def release(self, state: object, request: object) -> None:
        """Clear the row the request held, so the next request given it starts from silence and a zero state."""
        assert isinstance(state, ActivityState) and isinstance(request, ActivityRequest)
        if request.row >= 0:
            state.states[:, request.row] = 0.0
            state.contexts[request.row] = 0.0
            request.row = -1


def serve_activity(package: Package, control: Control, metrics: ModelMetrics) -> StreamWorker:
    """The activity role's worker for `package`, once its control is seen to provide the continuing contract."""
    if not isinstance(control, StreamControl):
        raise refuse_control(package, StreamControl)
    state = control.prepare(package)
    return StreamWorker(package.spec.name, metrics, control, state, package.spec.capacities, input_limit=INPUT_WINDOW)
