"""Finite requests (embeddings): the three-call contract between the server and a package's control.

    prepare_request(state, item) -> Prepared(data, units, tag)
    prepare_batch(state, ranges, data) -> Batch(stage, inputs, plan)
    run: the server calls the stage's module on `inputs`

`prepare_request` does the model's framing and validation (tokenize, check the length) and returns the
request's prepared bytes, a positive additive bound on its work (`units`: tokens here) and a
compatibility tag (equal tags can share a cohort).  The scheduler gives `prepare_batch` the cohort's
prepared bytes concatenated, with each request's (offset, length) range in request order; it packs
them into the stage's inputs and says in a `ResultPlan` which physical output rows (and which
columns of them) belong to each request.  The server maps the output back through the plan alone,
never through an assumed layout: the test package in tests/serve/packages/reversed packs its rows
backwards to prove it.  Pooling and normalization happen inside the stage (`loam.serve.pooling`).

`EmbeddingControl` is the embedding role's built-in control: token ids (int32, little-endian) as the
prepared bytes, right padding to the cohort's longest input, one output row per request.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from loam.serve.flags import ADD_SPECIAL_TOKENS, NO_SPECIAL_TOKEN_MATCHING
from loam.serve.metrics import ModelMetrics
from loam.serve.residency import array_bytes, module_pool
from loam.serve.scheduler import Event, Request, ServeError, Worker
from loam.serve.spec import Capacities, Control, Package, PackageError, PackageTokenizer, Stage, refuse_control


@dataclass(frozen=True)
class EmbeddingInput:
    """One input of an embeddings request: text (with the tokenizer flags) or token ids; `index` is its place
    in the request, `param` how the request names it in errors (`input[2]`)."""

    text: str | None = None
    ids: tuple[int, ...] | None = None
    flags: int = ADD_SPECIAL_TOKENS
    param: str = "input"


@dataclass(frozen=True)
class Prepared:
    data: bytes
    units: int
    tag: str


@dataclass(frozen=True)
class RowSpan:
    """Columns [offset, offset + width) of physical output row `row`."""

    row: int
    offset: int
    width: int


@dataclass(frozen=True)
class ResultPlan:
    """Which output (by index into the stage's outputs), and for each request in order, its row spans."""

    output: int
    rows: tuple[tuple[RowSpan, ...], ...]


@dataclass(frozen=True)
class Batch:
    stage: str
    inputs: tuple[np.ndarray, ...]
    plan: ResultPlan


@runtime_checkable
class FiniteControl(Control, Protocol):
    """What a finite package's control provides (the built-in one is `EmbeddingControl`)."""

    def prepare_request(self, state: object, item: EmbeddingInput) -> Prepared: ...
    def prepare_batch(self, state: object, ranges: Sequence[tuple[int, int]], data: bytes) -> Batch: ...


@dataclass(frozen=True)
class EmbeddingState:
    """What `EmbeddingControl.prepare` settles at registration: the stage, its inputs, the tokenizer."""

    stage: str
    order: tuple[str, ...]
    dtypes: dict[str, np.dtype]
    tokenizer: PackageTokenizer | None
    context: int
    pad: int = 0


class EmbeddingControl:
    """The embedding role's control: a BERT-like encoder taking input_ids, attention_mask and optionally
    token_type_ids, whose stage returns one pooled row per input."""

    def prepare(self, package: Package) -> EmbeddingState:
        if len(package.stages) != 1:
            raise ServeError(f"package {package.spec.name!r}: an embedding package has one stage", status=500)
        stage = next(iter(package.stages.values()))
        names = tuple(name for name, _, _ in stage.inputs)
        allowed = {"input_ids", "attention_mask", "token_type_ids"}
        if "input_ids" not in names or not set(names) <= allowed:
            raise PackageError(
                f"{package.spec.folder / 'model.json'}: stage {stage.spec.name!r} takes {list(names)}; "
                "the embedding control gives input_ids, attention_mask and token_type_ids"
            )
        dtypes = {name: np.dtype(dtype) for name, dtype, _ in stage.inputs}
        return EmbeddingState(stage.spec.name, names, dtypes, package.tokenizer, package.spec.capacities.context_tokens)

    def prepare_request(self, state: object, item: EmbeddingInput) -> Prepared:
        assert isinstance(state, EmbeddingState)
        if item.ids is not None:
            ids = list(item.ids)
        else:
            if state.tokenizer is None:
                raise ServeError(
                    f"{item.param}: this model has no tokenizer; give token ids, not text", param=item.param
                )
            ids = state.tokenizer.encode(
                item.text or "",
                add_special_tokens=bool(item.flags & ADD_SPECIAL_TOKENS),
                special_token_matching=not item.flags & NO_SPECIAL_TOKEN_MATCHING,
            )
        if not ids:
            raise ServeError(f"{item.param} is empty: give at least one token", param=item.param)
        if len(ids) > state.context:
            raise ServeError(
                f"{item.param} is {len(ids)} tokens; this model takes at most {state.context} (context_tokens)",
                param=item.param,
            )
        return Prepared(np.asarray(ids, dtype="<i4").tobytes(), len(ids), "")

    def pack(self, state: EmbeddingState, ranges: Sequence[tuple[int, int]], data: bytes) -> list[np.ndarray]:
        """Each request's ids, in request order."""
        return [np.frombuffer(data, dtype="<i4", count=length // 4, offset=offset) for offset, length in ranges]

    def prepare_batch(self, state: object, ranges: Sequence[tuple[int, int]], data: bytes) -> Batch:
        assert isinstance(state, EmbeddingState)
        inputs = self.pack(state, ranges, data)
        return self.batch(state, inputs, list(range(len(inputs))))

    def batch(
        self,
        state: EmbeddingState,
        inputs: list[np.ndarray],
        row_of: list[int],
        types: Sequence[np.ndarray] | None = None,
    ) -> Batch:
        """The stage's inputs with request i's ids (and its token types, where `types` gives them; else 0) in
        physical row `row_of[i]`, and the plan that says so (each request's spans from `spans`)."""
        longest = max(len(ids) for ids in inputs)
        feeds = {
            "input_ids": np.full((len(inputs), longest), state.pad, state.dtypes["input_ids"]),
            "attention_mask": np.zeros((len(inputs), longest), state.dtypes.get("attention_mask", np.int64)),
            "token_type_ids": np.zeros((len(inputs), longest), state.dtypes.get("token_type_ids", np.int64)),
        }
        for i, (ids, row) in enumerate(zip(inputs, row_of, strict=True)):
            feeds["input_ids"][row, : len(ids)] = ids
            feeds["attention_mask"][row, : len(ids)] = 1
            if types is not None:
                feeds["token_type_ids"][row, : len(ids)] = types[i]
        plan = ResultPlan(0, tuple(self.spans(state, row, len(ids)) for ids, row in zip(inputs, row_of, strict=True)))
        return Batch(state.stage, tuple(feeds[name] for name in state.order), plan)

    def spans(self, state: EmbeddingState, row: int, length: int) -> tuple[RowSpan, ...]:
        """The output a request of `length` ids in physical row `row` owns: here the whole row (one pooled vector)."""
        return (RowSpan(row, 0, -1),)


@dataclass(eq=False)
class FiniteRequest(Request):
    """One embedding input, prepared."""

    prepared: Prepared | None = None
    result: np.ndarray | None = field(default=None)


class FiniteWorker(Worker):
    """Schedules a finite package's requests: cohorts of equal tags up to `batch_units`."""

    def __init__(self, package: Package, control: FiniteControl, capacities: Capacities, metrics: ModelMetrics) -> None:
        self.package = package
        self.control = control
        self.capacities = capacities
        self.state = control.prepare(package)
        super().__init__(package.spec.name, metrics, capacities.output_bytes)

    def prepare(self, item: EmbeddingInput, sink: Callable[[Event], None]) -> FiniteRequest:
        """Frame and check one input on the caller's thread (a refusal is the caller's 4xx)."""
        prepared = self.control.prepare_request(self.state, item)
        if prepared.units < 1:
            raise ServeError(
                f"the control gave {prepared.units} units for {item.param}; units are positive", status=500
            )
        if prepared.units > self.capacities.batch_units:
            raise ServeError(
                f"{item.param} is {prepared.units} units; a cohort of this model holds {self.capacities.batch_units}",
                param=item.param,
            )
        return FiniteRequest(sink=sink, units=prepared.units, tag=prepared.tag, prepared=prepared)

    def stalled(self, request: Request) -> bool:
        return False  # a finite request delivers once, after its cohort

    def workspace_bytes(self) -> int:
        """The largest cohort's input arrays: `batch_units` tokens, 8 bytes each per input its stage takes (the
        stage's own intermediates are the module's, which declares none)."""
        return self.capacities.batch_units * self._token_bytes()

    def request_bytes(self, units: int) -> int:
        """What one request of `units` tokens in all needs besides the weights: its prepared ids (4 bytes a
        token), held until its last input runs, and the input arrays of its largest cohort."""
        return 4 * units + min(self.capacities.batch_units, units) * self._token_bytes()

    def _token_bytes(self) -> int:
        return 8 * max((len(stage.inputs) for stage in self.package.stages.values()), default=1)

    def trim(self) -> None:
        """Drop the modules' pooled intermediates (made again by the next call)."""
        for stage in self.package.stages.values():
            module_pool(stage.module).clear()

    def resident_bytes(self) -> dict[str, int]:
        """The stages' intermediates their modules keep for the next call."""
        pooled = (array_bytes(module_pool(stage.module).values()) for stage in self.package.stages.values())
        return {"kv": 0, "workspace": sum(pooled)}

    def step(self, eligible: list[Request]) -> bool:
        oldest = eligible[0]
        cohort: list[FiniteRequest] = []
        units = 0
        for request in eligible:
            assert isinstance(request, FiniteRequest)
            if request.tag != oldest.tag or units + request.units > self.capacities.batch_units:
                continue
            if len(cohort) >= self.capacities.resident_requests:
                break
            cohort.append(request)
            self.cohort.append(request)
            units += request.units
        self.run_cohort(cohort, self._compute, self._collect, self._fail)
        return True

    def _compute(self, cohort: Sequence[FiniteRequest]) -> list[np.ndarray]:
        """The cohort's results, in request order: its prepared bytes batched by the control, run through the
        stage, and mapped back through the control's result plan."""
        ranges, offset = [], 0
        for request in cohort:
            assert request.prepared is not None
            ranges.append((offset, len(request.prepared.data)))
            offset += len(request.prepared.data)
        data = b"".join(r.prepared.data for r in cohort if r.prepared is not None)
        batch = self.control.prepare_batch(self.state, ranges, data)
        stage: Stage = self.package.stages[batch.stage]
        output = np.asarray(stage.forward(*batch.inputs)[batch.plan.output])
        results = [self._rows(output, spans, batch) for spans in batch.plan.rows]
        if len(results) != len(cohort):
            raise ServeError(f"the result plan maps {len(results)} requests; the cohort has {len(cohort)}", status=500)
        return results

    def _collect(self, cohort: Sequence[FiniteRequest], results: list[np.ndarray]) -> None:
        self.cohorts += 1
        self.metrics.cohort_size.observe(len(cohort))
        self.metrics.cohort_units.observe(sum(r.units for r in cohort))
        self.metrics.tokens(sum(r.units for r in cohort), 0)
        for request, result in zip(cohort, results, strict=True):
            usage: dict[str, object] = {"prompt_tokens": request.units, "total_tokens": request.units}
            request.deliver(Event("done", value=result, usage=usage, finish_reason="stop"))
            self.metrics.finished("stop")

    def _fail(self, request: FiniteRequest, status: int, message: str) -> None:
        request.deliver(Event("error", text=message, status=status))
        self.metrics.finished("error")

    @staticmethod
    def _rows(output: np.ndarray, spans: tuple[RowSpan, ...], batch: Batch) -> np.ndarray:
        parts = []
        for span in spans:
            if not 0 <= span.row < output.shape[0]:
                raise ServeError(f"the result plan names row {span.row} of an output of {output.shape[0]}", status=500)
            row = output[span.row].reshape(-1)
            width = row.shape[0] - span.offset if span.width < 0 else span.width
            parts.append(row[span.offset : span.offset + width])
        return np.concatenate(parts).astype(np.float32) if parts else np.zeros(0, np.float32)


def serve_finite(package: Package, control: Control, metrics: ModelMetrics) -> FiniteWorker:
    """The embedding role's worker for `package`, once its control is seen to provide the finite contract."""
    if not isinstance(control, FiniteControl):
        raise refuse_control(package, FiniteControl)
    return FiniteWorker(package, control, package.spec.capacities, metrics)


def embed(worker: FiniteWorker, items: Sequence[EmbeddingInput], timeout: float = 600.0) -> list[np.ndarray]:
    """Embed `items` on a plain thread (tests and benchmarks): submit them all, wait for each result."""
    requests = []
    for item in items:
        sink, drain = Request.collector()
        request = worker.prepare(item, sink)
        worker.submit(request)
        requests.append(drain)
    deadline = time.monotonic() + timeout
    out = []
    for drain in requests:
        event = next(e for e in drain(max(1.0, deadline - time.monotonic())))
        if event.kind == "error":
            raise ServeError(event.text, status=event.status)
        out.append(np.asarray(event.value))
    return out
