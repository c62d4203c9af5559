"""The recognition role: Whisper transcribing continuing audio, on the continuing-request contract.

A request is a stream of 16 kHz mono float32 samples ending with an explicit end of input; packet
boundaries mean nothing to it.  Whisper hears 30 s windows: window k covers samples [480,000·k,
480,000·(k+1)), and each window is one transcript segment (segment k).  A window is transcribed once all
its samples have arrived; the last one, at the end of input, holds what there is, zero-padded as Whisper
pads (`loam.serve.whisper_features`).  Where the request asks for revisions (`revision_seconds`), the open
window is also transcribed provisionally each time that much new audio has arrived, so a live client reads
the text before the window completes; a provisional transcript is a revision with `final` false, and the
window's last revision is final: its text never changes again.  A window's samples are acknowledged
(their input credit returned) only when its final transcript is published, and the request is done when
its last window is.

One transcription (a `Pass`) runs optimum's three graphs as transformers' greedy `generate` does:

    encode                 the window's log-mel features through the encoder: [1500, width] states
    detect (no language)   the decoder on <|startoftranscript|> alone; the language token of highest logit
    prompt                 the decoder on [<|startofprev|> prompt...] <|startoftranscript|> <|lang|> <|task|>
                           <|notimestamps|>: the first token's logits and the KV cache (self and cross)
    decode                 the decoder with past, one token a call, until <|endoftext|> or `max_length` tokens

Every pick is the argmax of the logits with the model's `suppress_tokens` removed, and at the first pick its
`begin_suppress_tokens` too (`loam.serve.whisper_tokens`).  The cache is the request's own: its arrays live in
its `Pass` from the prompt to the last token, and a cohort concatenates its members' along the batch axis.

Cohorts (`Work.tag`): `encode` (windows of any requests share one encoder call), `detect`, `prompt:N`
(prompts of N tokens) and `decode:P` (a past of P tokens).  The decoder with past takes one
`cache_position` for the whole batch and no attention mask, so only rows whose pasts have the same length
can share its call exactly: `decode:P` says so, and rows at other positions wait for their own cohort.
Rows of one cohort never see each other (every attention is within its row), so a request's tokens do
not depend on its cohort; numpy's batched products may round differently in the last bits, which the
tests show leaves every greedy token the same.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from loam.serve.metrics import ModelMetrics
from loam.serve.scheduler import ServeError
from loam.serve.spec import Control, Package, PackageError, PackageTokenizer, Stage, refuse_control
from loam.serve.speech_gate import Heard, SpeechGate
from loam.serve.stream import Completion, InputView, Member, StreamControl, StreamWorker, Work
from loam.serve.whisper_features import SAMPLE_RATE, WINDOW_SAMPLES, log_mel
from loam.serve.whisper_tokens import WhisperTokens, read_whisper_tokens

STAGES = ("encoder", "decoder", "decoder_with_past")
ACTIVITY = "activity"
"""The optional fourth stage: Silero VAD, which gates each window (`loam.serve.speech_gate`)."""
INPUT_WINDOW = 2 * WINDOW_SAMPLES
"""Unacknowledged samples a request may hold (its input credit): the window being transcribed and the next."""
RECORDING_SECONDS = 3600.0
"""The default longest recording (`model.json`'s `recording_seconds`)."""
PROMPT_TOKENS = 223
"""The most tokens of previous text a prompt keeps (its last ones): half the decoder's 448, less <|startofprev|>."""


@dataclass(frozen=True)
class RecognitionParams:
    """What a transcription request asks: `language` a code such as "en" (None: detect it in the first window),
    `prompt` previous text, `temperature` (0 only: greedy), `revision_seconds` (None: final transcripts only),
    `activity` (publish the VAD's activity events too, before each window's final transcript)."""

    language: str | None = None
    prompt: str = ""
    temperature: float = 0.0
    revision_seconds: float | None = None
    task: str = "transcribe"
    activity: bool = False


@dataclass(frozen=True)
class TranscriptEvent:
    """Segment `segment`'s text as of revision `revision`, covering input samples [start, end).  A final event
    is the segment's last: its text never changes after it."""

    segment: int
    revision: int
    start: int
    end: int
    text: str
    final: bool

    @property
    def nbytes(self) -> int:
        return 64 + len(self.text.encode("utf-8"))


@dataclass
class Pass:
    """One transcription of samples [start, end) of window `segment`, from the encoder to its last token."""

    segment: int
    start: int
    end: int
    final: bool  # the window is complete (or the input has ended): this transcript is the segment's last
    last: bool  # the input ends with this window: the request is done once it is published
    phase: str = "encode"
    samples: np.ndarray | None = None  # the window's samples, kept from the VAD's phase to the encoder's
    states: np.ndarray | None = None  # the encoder's [frames, width]
    language: int = -1
    prompt: list[int] = field(default_factory=list)  # the decoder's input before the first pick
    cache: dict[str, np.ndarray] = field(default_factory=dict)  # present/past name -> [heads, length, head]
    tokens: list[int] = field(default_factory=list)  # picked so far
    began: float = field(default_factory=time.monotonic)  # when its encoder cohort was packed


@dataclass
class RecognitionRequest:
    """A request's retained state: its conditioning, the window it is on and the transcription in progress."""

    language: int | None  # the language token (None: detect it)
    previous: list[int]  # <|startofprev|> and the prompt's tokens (empty without a prompt)
    task: str
    revision_samples: int  # 0: no provisional transcripts
    activity: bool = False  # the request asked for the VAD's events
    window: int = 0  # the window whose final transcript comes next
    acknowledged: int = 0  # samples acknowledged (the start of that window)
    revisions: int = 0  # transcripts published of that window
    revised: int = 0  # the end of the last provisional transcript's samples
    current: Pass | None = None
    heard: int = 0  # samples the VAD has read (with a gate, the next acknowledgement ends there)
    pending: tuple[object, ...] = ()  # activity events published with the window's final transcript
    row: int = -1  # the resident row it holds once it has run


@dataclass
class RecognitionState:
    """What `WhisperRecognition.prepare` settles: the three stages, the model's tokens and the tokenizer."""

    stages: dict[str, Stage]
    tokens: WhisperTokens
    tokenizer: PackageTokenizer
    layers: int
    recording_seconds: float
    gate: SpeechGate | None = None
    metrics: ModelMetrics | None = None


@dataclass
class Plan:
    """A cohort of one phase: its members' requests and rows in cohort order and the stage's inputs."""

    phase: str
    requests: list[RecognitionRequest]
    passes: list[Pass]
    feeds: dict[str, np.ndarray] = field(default_factory=dict)
    samples: list[np.ndarray] = field(default_factory=list)  # encode: each window's samples; activity: the VAD's
    starts: list[int] = field(default_factory=list)  # activity: the absolute position of each member's samples
    rows: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Result:
    """The phase's outputs, batch row i being member i's."""

    outputs: dict[str, np.ndarray]
    picks: np.ndarray  # [n]: the token each member picks (detect: its language)
    heard: list[Heard] = field(default_factory=list)  # activity: what the VAD made of each member's samples


def encode_window(segment: int, start: int, final: bool, last: bool, origin: int, samples: np.ndarray) -> bytes:
    """`Work.data` of a window's first phase: the pass's header and its samples from `origin` (the window's start,
    or for the VAD the first sample it has not read), which the request's input lends only to `prepare_work`.
    Segment -1 is no window: the VAD's last samples at the end of input."""
    header = np.array([segment, start, int(final), int(last), origin], "<i8").tobytes()
    return header + np.ascontiguousarray(samples, "<f4").tobytes()


def decode_window(data: bytes) -> tuple[Pass, int, np.ndarray]:
    segment, start, final, last, origin = (int(v) for v in np.frombuffer(data, "<i8", count=5))
    samples = np.frombuffer(data, "<f4", offset=40)
    return Pass(segment, start, origin + len(samples), bool(final), bool(last)), origin, samples


class WhisperRecognition:
    """The recognition role's built-in control: optimum's three Whisper graphs, decoded greedily."""

    def prepare(self, package: Package) -> RecognitionState:
        where = package.spec.folder / "model.json"
        if set(package.stages) - {ACTIVITY} != set(STAGES):
            raise PackageError(
                f"{where}: key 'stages' names {sorted(package.stages)}; a recognition package has the stages "
                f"{', '.join(STAGES)} (optimum's encoder_model, decoder_model and decoder_with_past_model), and "
                f"optionally {ACTIVITY} (Silero VAD)"
            )
        generation = package.spec.role_keys.get("generation")
        if not isinstance(generation, str) or not (package.spec.folder / generation).is_file():
            raise PackageError(
                f"{where}: key 'generation' must name the model's generation_config.json in the package, "
                f"got {generation!r}"
            )
        tokens = read_whisper_tokens(package.spec.folder / generation)
        if package.tokenizer is None:
            raise PackageError(f"{where}: key 'tokenizer': a recognition package needs the model's tokenizer")
        seconds = package.spec.role_keys.get("recording_seconds", RECORDING_SECONDS)
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds < float("inf"):
            raise PackageError(f"{where}: key 'recording_seconds' must be a positive number, got {seconds!r}")
        names = [name for name, _, _ in package.stages["decoder_with_past"].inputs]
        layers = sum(1 for name in names if name.endswith(".decoder.key"))
        want = ["input_ids", *past_names(layers), "cache_position"]
        if not layers or sorted(names) != sorted(want):
            raise PackageError(
                f"{where}: stage 'decoder_with_past' takes {names}; optimum's decoder with past takes input_ids, "
                "past_key_values.L.decoder/encoder.key/value and cache_position"
            )
        gate = SpeechGate(package, ACTIVITY) if ACTIVITY in package.stages else None
        return RecognitionState(dict(package.stages), tokens, package.tokenizer, layers, float(seconds), gate)

    def prepare_request(self, state: object, params: object) -> RecognitionRequest:
        assert isinstance(state, RecognitionState) and isinstance(params, RecognitionParams)
        tokens = state.tokens
        language = None
        if params.language is not None:
            code = params.language.strip().lower()
            if code not in tokens.languages:
                raise ServeError(
                    f"'language' must be one of this model's languages ({', '.join(sorted(tokens.languages))}), "
                    f"got {params.language!r}",
                    param="language",
                )
            language = tokens.languages[code]
        if params.task not in tokens.tasks:
            raise ServeError(f"'task' must be one of {', '.join(tokens.tasks)}, got {params.task!r}", param="task")
        if params.temperature != 0.0:
            raise ServeError(
                f"'temperature' must be 0 (this server decodes Whisper greedily), got {params.temperature!r}",
                param="temperature",
            )
        previous: list[int] = []
        if params.prompt.strip():
            ids = state.tokenizer.encode(" " + params.prompt.strip(), add_special_tokens=False)
            previous = [tokens.previous, *ids[-PROMPT_TOKENS:]]
        revision = 0
        if params.revision_seconds is not None:
            if not 0.5 <= params.revision_seconds <= WINDOW_SAMPLES / SAMPLE_RATE:
                raise ServeError(
                    f"'revision_seconds' must lie between 0.5 and 30, got {params.revision_seconds!r}",
                    param="revision_seconds",
                )
            revision = round(params.revision_seconds * SAMPLE_RATE)
        if params.activity and state.gate is None:
            raise ServeError("'activity': this model has no activity stage (Silero VAD)", param="activity")
        return RecognitionRequest(language, previous, params.task, revision, params.activity)

    def prepare_work(self, state: object, request: object, view: InputView) -> Work:
        assert isinstance(state, RecognitionState) and isinstance(request, RecognitionRequest)
        limit = int(state.recording_seconds * SAMPLE_RATE)
        if view.position + len(view.data) > limit:
            raise ServeError(
                f"input: the recording is over {state.recording_seconds:g} s ({limit} samples), the longest this "
                "model takes",
                status=413,
                param="input",
            )
        current = request.current
        if current is not None:
            if current.phase == "prompt":
                return Work(b"", len(current.prompt), f"prompt:{len(current.prompt)}")
            if current.phase == "decode":
                return Work(b"", 1, f"decode:{len(current.prompt) + len(current.tokens) - 1}")
            return Work(b"", 1, current.phase)
        assert view.position == request.acknowledged, "only a window's final transcript acknowledges input"
        start = request.window * WINDOW_SAMPLES
        offset = start - view.position  # with a gate, samples the VAD left before the window (fewer than a chunk)
        held = len(view.data) - offset
        gated = state.gate is not None
        if held >= WINDOW_SAMPLES or (view.eof and held > 0):
            end = offset + min(held, WINDOW_SAMPLES)
            last = view.eof and end == len(view.data)
            if gated:
                data = encode_window(request.window, start, True, last, view.position, view.data[:end])
                return Work(data, 1, ACTIVITY)
            return Work(encode_window(request.window, start, True, last, start, view.data[offset:end]), 1, "encode")
        if view.eof:
            if gated and len(view.data):  # the VAD's last samples, after the last window
                return Work(encode_window(-1, start, True, True, view.position, view.data), 1, ACTIVITY)
            return Work(b"", 1, "end")  # nothing left to transcribe: the work only ends the request
        if request.revision_samples and held - request.revised >= request.revision_samples:
            return Work(encode_window(request.window, start, False, False, start, view.data[offset:]), 1, "encode")
        return Work(b"", 0, "encode")

    def prepare_batch(self, state: object, members: Sequence[Member]) -> Plan:
        assert isinstance(state, RecognitionState)
        requests = []
        for member in members:
            assert isinstance(member.request, RecognitionRequest)
            requests.append(member.request)
        phase = members[0].work.tag.split(":")[0]
        if phase == "end":
            return Plan(phase, requests, [])
        rows = [member.row for member in members]
        if phase == ACTIVITY:
            decoded = [decode_window(member.work.data) for member in members]
            return Plan(phase, requests, [p for p, _, _ in decoded], samples=[s for _, _, s in decoded],
                        starts=[o for _, o, _ in decoded], rows=rows)  # fmt: skip
        if phase == "encode":
            passes, samples = [], []
            for member, request in zip(members, requests, strict=True):
                if member.work.data:
                    current, _, window = decode_window(member.work.data)
                else:  # a window the VAD heard speech in: the request keeps its samples
                    assert request.current is not None and request.current.samples is not None
                    current, window = request.current, request.current.samples
                passes.append(current)
                samples.append(window)
            return Plan(phase, requests, passes, samples=samples, rows=rows)
        passes = []
        for request in requests:
            assert request.current is not None and request.current.phase == phase
            passes.append(request.current)
        plan = Plan(phase, requests, passes)
        if phase == "detect":
            states = np.stack([p.states for p in passes if p.states is not None])
            plan.feeds = {"input_ids": np.full((len(passes), 1), state.tokens.start, np.int64)}
            plan.feeds["encoder_hidden_states"] = states
        elif phase == "prompt":
            plan.feeds = {
                "input_ids": np.array([p.prompt for p in passes], np.int64),
                "encoder_hidden_states": np.stack([p.states for p in passes if p.states is not None]),
            }
        else:
            past = len(passes[0].prompt) + len(passes[0].tokens) - 1
            plan.feeds = {"input_ids": np.array([[p.tokens[-1]] for p in passes], np.int64)}
            for name in past_names(state.layers):
                # One member reads its cache in place (a view with the batch axis added); a cohort copies its
                # members' side by side, the cross-attention's 1500 rows included.
                caches = [p.cache[name] for p in passes]
                plan.feeds[name] = caches[0][None] if len(caches) == 1 else np.stack(caches)
            plan.feeds["cache_position"] = np.array([past], np.int64)
        return plan

    def generate(self, state: object, plan: object) -> Result | None:
        assert isinstance(state, RecognitionState) and isinstance(plan, Plan)
        if plan.phase == "end":
            return None
        if plan.phase == ACTIVITY:
            assert state.gate is not None
            eof = [current.last for current in plan.passes]
            return Result({}, np.zeros(0, np.int64), state.gate.run(plan.rows, plan.samples, plan.starts, eof))
        if plan.phase == "encode":
            features = np.stack([log_mel(samples) for samples in plan.samples])
            return Result(run(state.stages["encoder"], {"input_features": features}), np.zeros(0, np.int64))
        stage = state.stages["decoder_with_past" if plan.phase == "decode" else "decoder"]
        outputs = run(stage, plan.feeds)
        logits = np.asarray(outputs["logits"], np.float32)[:, -1]
        if plan.phase == "detect":
            languages = np.array(list(state.tokens.languages.values()), np.int64)
            return Result(outputs, languages[np.argmax(logits[:, languages], axis=1)])
        return Result(outputs, pick(logits, state.tokens, first=plan.phase == "prompt"))

    def complete(self, state: object, plan: object, result: object, ordinal: int) -> Completion:
        assert isinstance(state, RecognitionState) and isinstance(plan, Plan)
        request = plan.requests[ordinal]
        if plan.phase == "end":
            return Completion(0, (), True)
        assert isinstance(result, Result)
        tokens = state.tokens
        if plan.rows:
            request.row = plan.rows[ordinal]
        if plan.phase == ACTIVITY:
            return self._heard(state, request, plan, result.heard[ordinal], ordinal)
        if plan.phase == "encode":
            current = plan.passes[ordinal]
            current.samples = None
            current.states = np.asarray(result.outputs["last_hidden_state"][ordinal])
            current.language = request.language if request.language is not None else -1
            current.phase = "detect" if request.language is None else "prompt"
            if request.language is not None:
                current.prompt = [*request.previous, *tokens.prompt(request.language, request.task)]
            request.current = current
            return Completion()
        current = plan.passes[ordinal]
        if plan.phase == "detect":
            request.language = int(result.picks[ordinal])  # the first window's language holds for the request
            current.language = request.language
            current.prompt = [*request.previous, *tokens.prompt(request.language, request.task)]
            current.phase = "prompt"
            return Completion()
        names = list(result.outputs)
        for name in names:
            if name.startswith("present."):
                key = "past_key_values." + name.removeprefix("present.")
                if plan.phase == "prompt" or ".decoder." in name:
                    current.cache[key] = np.asarray(result.outputs[name][ordinal])
        current.states = None  # the cross-attention cache holds what the decoder reads of it from now on
        token = int(result.picks[ordinal])
        current.phase = "decode"
        if token != tokens.end:
            current.tokens.append(token)
        if token == tokens.end or len(current.prompt) + len(current.tokens) >= tokens.max_length:
            return self._publish(state, request, current)
        return Completion()

    def _heard(
        self, state: RecognitionState, request: RecognitionRequest, plan: Plan, heard: Heard, ordinal: int
    ) -> Completion:
        """Keep what the VAD heard; a window with speech goes on to the encoder, one without is final and empty."""
        assert state.gate is not None
        state.gate.commit(request.row, heard)
        request.heard = plan.starts[ordinal] + heard.covered
        if request.activity:
            request.pending += heard.events
        current = plan.passes[ordinal]
        if current.segment < 0:  # the samples after the last window: only the VAD's events
            return self._acknowledge(state, request, current, ())
        if heard.speech:
            current.samples = plan.samples[ordinal][current.start - plan.starts[ordinal] :].copy()
            current.phase = "encode"
            request.current = current
            return Completion()
        return self._publish(state, request, current)

    def _publish(self, state: RecognitionState, request: RecognitionRequest, current: Pass) -> Completion:
        """The pass's transcript as the segment's next revision; a final one acknowledges the window."""
        text = state.tokenizer.decode(current.tokens, skip_special_tokens=True)
        event = TranscriptEvent(current.segment, request.revisions, current.start, current.end, text, current.final)
        request.current = None
        if not current.final:
            request.revisions += 1
            request.revised = current.end - current.start
            return Completion(0, (event,))
        return self._acknowledge(state, request, current, (event,))

    def _acknowledge(
        self, state: RecognitionState, request: RecognitionRequest, current: Pass, events: tuple[object, ...]
    ) -> Completion:
        """A window is final: acknowledge its samples (with a gate, those the VAD has read, whose events go first)."""
        end = request.heard if state.gate is not None else current.end
        consumed = end - request.acknowledged
        request.acknowledged = end
        request.window += 1
        request.revisions = request.revised = 0
        if state.metrics is not None:
            state.metrics.audio_input(consumed / SAMPLE_RATE, time.monotonic() - current.began)
        events, request.pending = (*request.pending, *events), ()
        return Completion(consumed, events, current.last)

    def release(self, state: object, request: object) -> None:
        """Drop the request's cache and encoder states, and clear its row's VAD state."""
        assert isinstance(state, RecognitionState) and isinstance(request, RecognitionRequest)
        request.current = None
        if state.gate is not None and request.row >= 0:
            state.gate.clear(request.row)
            request.row = -1


def past_names(layers: int, sides: tuple[str, ...] = ("decoder", "encoder")) -> list[str]:
    """The decoder with past's cache inputs, in optimum's order."""
    return [f"past_key_values.{i}.{side}.{kv}" for i in range(layers) for side in sides for kv in ("key", "value")]


def run(stage: Stage, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The stage on `feeds` (by input name): its outputs by name."""
    outputs = stage.forward(*(feeds[name] for name, _, _ in stage.inputs))
    return {name: np.asarray(value) for name, value in zip(stage.outputs, outputs, strict=True)}


def pick(logits: np.ndarray, tokens: WhisperTokens, first: bool) -> np.ndarray:
    """Each row's greedy token: the argmax with the suppressed tokens (and at the first pick the begin-suppressed
    ones) removed, as transformers' SuppressTokens and SuppressTokensAtBegin processors remove them."""
    scores = logits.copy()
    scores[:, tokens.suppress[tokens.suppress < scores.shape[1]]] = -np.inf
    if first:
        scores[:, tokens.begin_suppress[tokens.begin_suppress < scores.shape[1]]] = -np.inf
    return np.argmax(scores, axis=1).astype(np.int64)


def serve_recognition(package: Package, control: Control, metrics: ModelMetrics) -> StreamWorker:
    """The recognition role's worker for `package`, once its control is seen to provide the continuing contract."""
    if not isinstance(control, StreamControl):
        raise refuse_control(package, StreamControl)
    state = control.prepare(package)
    if isinstance(state, RecognitionState):
        state.metrics = metrics
    return StreamWorker(package.spec.name, metrics, control, state, package.spec.capacities, input_limit=INPUT_WINDOW)
