"""Speech activity inside a recognizer: the activity role's Silero VAD run over each window before Whisper hears it.

A recognition package may add a fourth stage, `activity`: Silero VAD's graph.  Its numerics are the activity
role's control (`loam.serve.activity.SileroActivity`), reused unchanged: each resident row of the recognizer
keeps Silero's LSTM state and context samples in that control's state, and each window's samples run through
its `prepare_work`, `prepare_batch`, `generate` and `complete` one 512-sample chunk at a time, the cohort's
members side by side.  The gate runs on a scratch copy of the members' rows, so `run` changes nothing; `commit`
writes a member's rows back once its work is complete.

Silero's chunks do not divide a 30 s window (480,000 / 512 is 937.5), so the VAD reads the complete chunks of the
samples it is given and leaves the rest for the next window, as a live stream does; at the end of input the last
chunk is zero-padded as silero-vad pads it.  Its events therefore cover the request's input from its start, in
order, each chunk once, and a window counts as speech where any chunk it read scored `THRESHOLD` or more.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from loam.serve.activity import ActivityEvent, ActivityParams, ActivityState, SileroActivity
from loam.serve.spec import Package
from loam.serve.stream import InputView, Member

THRESHOLD = 0.5
"""silero-vad's default speech threshold."""
RATE = 16000


@dataclass(frozen=True)
class Heard:
    """What the VAD made of one member's samples: its events in order, the samples they cover, and the member's
    next LSTM state and context (to commit with `commit`)."""

    events: tuple[ActivityEvent, ...]
    covered: int
    states: np.ndarray  # [2, 128]
    context: np.ndarray  # [64]

    @property
    def speech(self) -> bool:
        return any(event.probability >= THRESHOLD for event in self.events)


class SpeechGate:
    """Silero VAD over a recognizer's rows (one per resident request)."""

    def __init__(self, package: Package, stage: str) -> None:
        """The activity control prepared over `stage` alone (its rows are the recognizer's)."""
        self.control = SileroActivity()
        stages = {stage: package.stages[stage]}
        spec = dataclasses.replace(package.spec, stages={stage: package.spec.stages[stage]}, role_keys={})
        self.state: ActivityState = self.control.prepare(dataclasses.replace(package, spec=spec, stages=stages))

    def run(
        self, rows: Sequence[int], samples: Sequence[np.ndarray], starts: Sequence[int], eof: Sequence[bool]
    ) -> list[Heard]:
        """Each member's samples (member i: row `rows[i]`, absolute position `starts[i]`, the input ending with them
        where `eof[i]`) through the VAD, chunk by chunk, the members batched; the rows' state is read, not written."""
        scratch = dataclasses.replace(
            self.state, states=self.state.states[:, list(rows)].copy(), contexts=self.state.contexts[list(rows)].copy()
        )
        requests = [self.control.prepare_request(scratch, ActivityParams(RATE)) for _ in rows]
        for request, start in zip(requests, starts, strict=True):
            request.covered = start
        events: list[list[ActivityEvent]] = [[] for _ in rows]
        offsets = [0] * len(rows)
        active = list(range(len(rows)))
        while active:
            members = []
            for i in active:
                view = InputView(samples[i][offsets[i] :], starts[i] + offsets[i], eof[i])
                work = self.control.prepare_work(scratch, requests[i], view)
                if work.units:
                    members.append((i, Member(i, requests[i], work)))
            if not members:
                break
            plan = self.control.prepare_batch(scratch, [member for _, member in members])
            result = self.control.generate(scratch, plan)
            for ordinal, (i, _) in enumerate(members):
                completion = self.control.complete(scratch, plan, result, ordinal)
                offsets[i] += completion.consumed
                events[i] += [e for e in completion.events if isinstance(e, ActivityEvent)]
            active = [i for i, _ in members if offsets[i] < len(samples[i])]
        return [
            Heard(tuple(events[i]), offsets[i], scratch.states[:, i].copy(), scratch.contexts[i].copy())
            for i in range(len(rows))
        ]

    def commit(self, row: int, heard: Heard) -> None:
        """Keep what the VAD heard in `row`'s state: its next chunk continues from there."""
        self.state.states[:, row] = heard.states
        self.state.contexts[row] = heard.context

    def clear(self, row: int) -> None:
        """The row's request retired: its next request starts from silence and a zero state."""
        self.state.states[:, row] = 0.0
        self.state.contexts[row] = 0.0
