"""Finite decisions: a question framed from a request's fields, answered as a distribution over a closed set.

A decision package's `model.json` declares, besides its one stage:

- `answers`: the closed set.  For a language-model stage, an object of label -> continuation text (or a list
  of labels, each its own continuation), each tokenized with the package's tokenizer; for a classifier
  stage, a list of labels (a label's place is its class index), an object of label -> class index, or the
  path of a text file with one label a line.
- `framing` (language model only): the question as a template over the request's fields, `{name}` for a
  field (`{{` and `}}` for braces), e.g. `"Review: {input}\\nSentiment:"`.
- `scores` (classifier only): whether the stage's first output holds `logits` (the default) or
  `probabilities` over its classes.

The stage kind follows from the graph: a decoder (`input_ids`, `logits`, pasts) is scored as the text role
reads it (`loam.serve.text`: the framed question once, each answer's continuation on a fork of its state,
all in one cohort); any other graph is a classifier over one image (or feature) input, run on a cohort of
inputs of one shape (a classifier stage may `specialize`: each shape runs on a build made for its dims,
`loam.serve.specialize`).  Either way the answer is computed from final outputs only: an LM answer's
probability is the softmax over the answers' sequence log-probabilities given the question, a
classifier's is the head's probability (a softmax of its logits, in float64) renormalized over the
declared answers.  `FramedDecisions` is the role's built-in control; a package's own CONTROL provides
`prepare` and `frame` (`DecisionControl`).
"""

from __future__ import annotations

import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, cast, runtime_checkable

import numpy as np

from loam.serve.decoder_stage import DecoderStage
from loam.serve.metrics import ModelMetrics
from loam.serve.residency import array_bytes, module_pool, weight_arrays
from loam.serve.scheduler import Event, Request, ServeError, Worker
from loam.serve.spec import Capacities, Control, Package, PackageError, PackageTokenizer, Stage, refuse_control
from loam.serve.specialize import Specialization, SpecializationCache, request_axes
from loam.serve.text import TextControl, TextWorker

SCORES = ("logits", "probabilities")


@dataclass(frozen=True)
class Answer:
    """One answer of the closed set: its label and what scores it (an LM's continuation, a classifier's class)."""

    label: str
    text: str = ""
    index: int = -1


@dataclass(frozen=True)
class DecisionState:
    """What a decision control settles at registration: the stage kind, the framing and the answers."""

    kind: str  # "lm" or "classifier"
    answers: tuple[Answer, ...]
    framing: str = ""
    fields: tuple[str, ...] = ()
    continuations: tuple[tuple[int, ...], ...] = ()  # an LM's answers, tokenized
    scores: str = "logits"
    tokenizer: PackageTokenizer | None = None
    image: tuple[str, np.dtype, tuple[int | None, ...]] | None = None  # a classifier's input: name, dtype, shape


@runtime_checkable
class DecisionControl(Control, Protocol):
    """What a decision package's control provides (the built-in one is `FramedDecisions`): `prepare` settles a
    `DecisionState`; `frame` gives an LM stage's question from a request's fields."""

    def prepare(self, package: Package) -> DecisionState: ...
    def frame(self, state: DecisionState, fields: Mapping[str, str], param: str) -> str: ...


class FramedDecisions:
    """The decision role's built-in control: `model.json`'s `framing`, `answers` and `scores`, checked."""

    def prepare(self, package: Package) -> DecisionState:
        spec = package.spec
        where = spec.folder / "model.json"

        def fail(key: str, problem: str) -> PackageError:
            return PackageError(f"{where}: key {key!r} {problem}")

        if len(package.stages) != 1:
            raise fail("stages", "must hold one stage: a decoder or a classifier")
        stage = next(iter(package.stages.values()))
        keys = spec.role_keys
        lm = any(name == "input_ids" for name, _, _ in stage.inputs) and "logits" in stage.outputs
        answers = _answers(keys.get("answers"), lm, spec.folder, fail)
        if lm:
            if "scores" in keys:
                raise fail("scores", "is for a classifier stage; a language model's answers are scored by their text")
            framing = keys.get("framing", "{input}")
            if not isinstance(framing, str) or not framing:
                raise fail(
                    "framing", f"must be a template string such as 'Question: {{input}}\\nAnswer:', got {framing!r}"
                )
            fields = _fields(framing, fail)
            tokenizer = package.tokenizer
            if tokenizer is None:
                raise fail("tokenizer", "is needed: a language model's answers are tokenized with it")
            continuations = tuple(tuple(tokenizer.encode(a.text, add_special_tokens=False)) for a in answers)
            empty = next((a.label for a, ids in zip(answers, continuations, strict=True) if not ids), None)
            if empty is not None:
                raise fail("answers", f"gives answer {empty!r} a continuation of no tokens")
            return DecisionState("lm", answers, framing, fields, continuations, tokenizer=tokenizer)
        if "framing" in keys:
            raise fail("framing", "is for a language-model stage; a classifier takes its input as it is")
        scores = keys.get("scores", "logits")
        if scores not in SCORES:
            raise fail("scores", f"must be one of {', '.join(SCORES)}, got {scores!r}")
        if len(stage.inputs) != 1:
            names = [name for name, _, _ in stage.inputs]
            raise fail("stages", f"has a classifier taking {names}: a classifier stage takes one input")
        name, dtype, shape = stage.inputs[0]
        return DecisionState("classifier", answers, scores=str(scores), image=(name, np.dtype(dtype), tuple(shape)))

    def frame(self, state: DecisionState, fields: Mapping[str, str], param: str) -> str:
        """The question for one input: the framing with each field filled (a missing one is a 400 naming it)."""
        for name in state.fields:
            if name not in fields:
                raise ServeError(f"'{param}' lacks the field '{name}' the model's framing asks for", param=param)
        return state.framing.format_map({name: fields[name] for name in state.fields})


Refusal = Callable[[str, str], PackageError]
"""The refusal of a `model.json` key: `fail(key, problem)`."""


def _fields(framing: str, fail: Refusal) -> tuple[str, ...]:
    """The field names of a framing template: plain names only (no attribute, index or format)."""
    names: list[str] = []
    try:
        parsed = list(string.Formatter().parse(framing))
    except ValueError as err:
        raise fail("framing", f"is not a template: {err}") from None
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if not name.isidentifier() or spec or conversion:
            raise fail("framing", f"has the field {{{name}}}: a field is a plain name such as {{input}}")
        if name not in names:
            names.append(name)
    if not names:
        raise fail("framing", "has no field: a framing takes at least one, such as {input}")
    return tuple(names)


def _answers(raw: object, lm: bool, folder: Path, fail: Refusal) -> tuple[Answer, ...]:
    """`model.json`'s `answers`: label -> continuation (LM) or label -> class index (classifier)."""
    if isinstance(raw, str) and not lm:  # a labels file, one a line
        path = folder / raw
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as err:
            raise fail("answers", f"names {raw!r}, which cannot be read as UTF-8 text ({err})") from None
        raw = [line.strip() for line in lines if line.strip()]
    if isinstance(raw, list):
        if not all(isinstance(label, str) and label for label in raw):
            raise fail("answers", "must list non-empty label strings")
        pairs: list[tuple[str, object]] = [(label, label if lm else i) for i, label in enumerate(raw)]
    elif isinstance(raw, dict):
        pairs = list(raw.items())
    else:
        what = "label -> continuation text" if lm else "label -> class index, a list of labels or a labels file"
        raise fail("answers", f"must be an object of {what}, got {raw!r}")
    if len(pairs) < 2:
        raise fail("answers", f"must give at least 2 answers, got {len(pairs)}")
    if len({label for label, _ in pairs}) != len(pairs):
        raise fail("answers", "repeats a label")
    answers = []
    for label, value in pairs:
        if lm and (not isinstance(value, str) or not value):
            raise fail(f"answers.{label}", f"must be the answer's continuation text, got {value!r}")
        if not lm and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise fail(f"answers.{label}", f"must be a class index (an integer from 0), got {value!r}")
        answers.append(Answer(label, value) if isinstance(value, str) else Answer(label, index=cast(int, value)))
    return tuple(answers)


# -- workers --------------------------------------------------------------------------------------------------------


class DecisionTextWorker(TextWorker):
    """A language-model decision package's worker: the text role's, holding the decision's state too (each
    input is a multiple-choice request over the answers, `TextRequest.continuations`)."""

    decision: DecisionState
    decision_control: DecisionControl


@dataclass(eq=False)
class ClassifyRequest(Request):
    """One classifier input: its array (one item, no batch axis) and the class indices it is answered over."""

    pixels: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    indices: tuple[int, ...] = ()
    param: str = "input"
    dims: dict[str, int] = field(default_factory=dict)  # the dims this input fixes (StageSpec.specialize), if any
    specialization: Specialization | None = None  # held from the request's first step until it is retired


class ClassifierWorker(Worker):
    """A classifier decision package's worker: cohorts of inputs of one shape (at most `resident_requests`),
    stacked on the stage's batch axis where it is free, else run one call each.  A stage that `specialize`s
    runs each shape on its own build, made on first use (`loam.serve.specialize`): the cohort waits for it
    while the worker runs the shapes that are built."""

    def __init__(self, package: Package, control: DecisionControl, state: DecisionState, metrics: ModelMetrics) -> None:
        assert state.image is not None
        self.stage: Stage = next(iter(package.stages.values()))
        self.decision = state
        self.decision_control = control
        self.capacities: Capacities = package.spec.capacities
        self.batched = state.image[2][:1] == (None,)
        self.axes = request_axes(package, self.stage)
        super().__init__(package.spec.name, metrics, self.capacities.output_bytes)
        self.specializations: SpecializationCache | None = None
        if self.axes:
            assert package.specialize is not None, "registration gives a package its specialized builds"
            capacity = self.capacities.specialization_cache
            self.specializations = SpecializationCache(package.specialize, self.stage, capacity, metrics, self.poke)

    def prepare(
        self, pixels: np.ndarray, indices: tuple[int, ...], param: str, sink: Callable[[Event], None]
    ) -> ClassifyRequest:
        """A request for one input, checked against the stage's input (a refusal names `param`)."""
        assert self.decision.image is not None
        name, dtype, shape = self.decision.image
        item = shape[1:]
        if pixels.ndim != len(item) or any(
            want is not None and want != got for want, got in zip(item, pixels.shape, strict=True)
        ):
            wanted = " x ".join("?" if n is None else str(n) for n in item)
            raise ServeError(
                f"'{param}' has shape {list(pixels.shape)}; the model's {name!r} takes {wanted}", param=param
            )
        dims = {symbol: int(pixels.shape[axis - 1]) for symbol, (_, axis) in self.axes.items()}
        return ClassifyRequest(
            sink=sink, tag=str(pixels.shape), pixels=pixels.astype(dtype), indices=indices, param=param, dims=dims
        )

    def stalled(self, request: Request) -> bool:
        return False  # a decision delivers once, after its cohort

    def retire(self, request: Request) -> None:
        assert isinstance(request, ClassifyRequest)
        if request.specialization is not None and self.specializations is not None:
            self.specializations.release(request.specialization)
            request.specialization = None

    def trim(self) -> None:
        """Drop the kept specialized builds no request holds, and the modules' pooled intermediates."""
        if self.specializations is not None:
            self.specializations.trim()
        for stage in self._stages():
            module_pool(stage.module).clear()

    def resident_bytes(self) -> dict[str, int]:
        """The stages' pooled intermediates, and the kept specialized builds' weights (the registered stage's are
        the model's `weights`)."""
        stages = self._stages()
        built = [weight_arrays(stage.weights) for stage in stages[1:]]
        return {"kv": 0, "workspace": array_bytes([*built, *(module_pool(stage.module) for stage in stages)])}

    def _stages(self) -> list[Stage]:
        """The registered stage, then the specialized builds kept."""
        return [self.stage, *(self.specializations.stages() if self.specializations is not None else [])]

    def step(self, eligible: list[Request]) -> bool:
        if self.specializations is not None:
            eligible = list(self._built(eligible, self.specializations))
            if not eligible:
                return False
        oldest = eligible[0]
        cohort: list[ClassifyRequest] = []
        for request in eligible:
            assert isinstance(request, ClassifyRequest)
            if request.tag != oldest.tag:
                continue
            if len(cohort) >= self.capacities.resident_requests:
                break
            cohort.append(request)
            self.cohort.append(request)
        self.run_cohort(cohort, self._compute, self._collect, self._fail)
        return True

    def _built(self, eligible: list[Request], cache: SpecializationCache) -> list[ClassifyRequest]:
        """The eligible requests whose specialization is built, each holding its own (acquired on its first step);
        a request whose build failed fails with the refusal, naming its input."""
        built = []
        for request in eligible:
            assert isinstance(request, ClassifyRequest)
            if request.specialization is None:
                request.specialization = cache.acquire(self.stage.spec.name, request.dims)
            entry = request.specialization
            if not entry.done.is_set():
                continue
            if entry.stage is None:
                shown = ", ".join(f"{symbol} {value}" for symbol, value in request.dims.items())
                message = f"'{request.param}' asks for {shown}, which the model cannot be built for: {entry.error}"
                request.deliver(Event("error", text=message, status=entry.status, param=request.param))
                self.metrics.finished("error")
                continue
            built.append(request)
        return built

    def _compute(self, cohort: Sequence[ClassifyRequest]) -> list[np.ndarray]:
        """Each input's scores over every class (float64), from the stage's first output (the cohort's
        specialized build, where the stage has them)."""
        entry = cohort[0].specialization
        stage = entry.stage if entry is not None and entry.stage is not None else self.stage
        if self.batched:
            outputs = [np.asarray(stage.forward(np.stack([r.pixels for r in cohort]))[0])]
        else:
            outputs = [np.asarray(stage.forward(r.pixels[None])[0]) for r in cohort]
        rows = np.concatenate([o.reshape(o.shape[0], -1) for o in outputs]).astype(np.float64)
        if rows.shape[0] != len(cohort):
            raise ServeError(f"the classifier gave {rows.shape[0]} rows for {len(cohort)} inputs", status=500)
        return list(rows)

    def _collect(self, cohort: Sequence[ClassifyRequest], results: list[np.ndarray]) -> None:
        self.cohorts += 1
        self.metrics.cohort_size.observe(len(cohort))
        for request, scores in zip(cohort, results, strict=True):
            if max(request.indices) >= scores.shape[0]:
                self._fail(request, 500, f"the package's answers name class {max(request.indices)}; the classifier "
                           f"gives {scores.shape[0]} classes")  # fmt: skip
                continue
            request.deliver(Event("done", value=head_distribution(scores, request.indices, self.decision.scores)))
            self.metrics.decisions.inc()
            self.metrics.finished("stop")

    def _fail(self, request: ClassifyRequest, status: int, message: str) -> None:
        request.deliver(Event("error", text=message, status=status, param=request.param if status < 500 else None))
        self.metrics.finished("error")


def head_distribution(scores: np.ndarray, indices: Sequence[int], kind: str) -> list[float]:
    """A classifier head's distribution over the classes `indices`: its probabilities (a softmax of `logits`,
    taken over every class) renormalized over them."""
    values = np.asarray(scores, np.float64)
    if kind == "logits":
        values = np.exp(values - values.max())
    chosen = values[list(indices)]
    total = chosen.sum()
    if not np.isfinite(total) or total <= 0:
        raise ServeError(f"the classifier's {kind} give the answers no probability ({total})", status=500)
    return [float(p) for p in chosen / total]


def serve_decision(package: Package, control: Control, metrics: ModelMetrics) -> Worker:
    """The decision role's worker for `package`: the text role's worker over its decoder, or a classifier's."""
    if not isinstance(control, DecisionControl):
        raise refuse_control(package, DecisionControl)
    state = control.prepare(package)
    spec = package.spec
    if state.kind == "classifier":
        return ClassifierWorker(package, control, state, metrics)
    stage_spec = next(iter(spec.stages.values()))
    if stage_spec.specialize:
        raise PackageError(
            f"{spec.folder / 'model.json'}: key 'stages.{stage_spec.name}.specialize' is for a classifier stage; "
            "a language model's cohorts run one build"
        )
    stage = DecoderStage(package.stages[stage_spec.name], f"{spec.folder / 'model.json'} stage {stage_spec.name!r}")
    text = TextControl()
    worker = DecisionTextWorker(spec.name, stage, spec.capacities, metrics, text, text.prepare(package))
    worker.decision = state
    worker.decision_control = control
    return worker
