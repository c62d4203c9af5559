"""Retained text: a decoder's conversations as rows of KV state, advanced together in mixed cohorts.

A conversation's KV state lives in `loam.serve.kv`'s block pool; a request holds a `KvSequence` (its
block table) and the tokens still to be read (`pending`: the rest of its prompt, or the token it
sampled last, whose KV the next step writes).  Each step takes the oldest eligible request and fills
the cohort with others up to `batch_units` tokens and `resident_requests` rows: a cohort mixes
prompt spans (a long prompt is read in chunks of what is left of the units, and of at most
`prefill_units` prompt tokens while streams are decoding, so it never stalls them) and single decode
steps, of requests at different positions.

How one decoder call serves rows at different positions is `loam.serve.decoder_stage`'s.

Retained state outlives a request: full blocks are published for prefix reuse, so a request whose
prompt starts with tokens some earlier request read (a chat's next turn, a fork of a conversation, a
rewind to an earlier point) skips that prefill and reports them as `cached_tokens`.  A `Session`
keeps a conversation's state explicitly: `fork` shares its blocks without copying them, `rewind`
truncates them, and a request on a session appends to it.

Known tokens are scored without sampling (`loam.serve.scoring`): a request with `targets` keeps its logits at
every position of its prompt spans and scores the token each position precedes (teacher forcing), reading its
prompt whole since a cached prefix has no logits; `logprobs` scores each sampled token.  A multiple-choice
request (`continuations`) reads its prompt once, then each continuation as a branch on a fork of the prompt's
blocks (shared, never copied), all in the next cohort, and ends with each continuation's log-probability.

A package that names a proposer (`loam.serve.speculative`) has a decoding row read its last token and the tokens
proposed after it as one verifier span, its logits kept at every position as a scored prompt's are; the tokens
the decoder accepts are delivered one by one, as a plain step delivers its one, and the rest roll back.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from loam.core.errors import LoamError
from loam.serve.decoder_stage import DecoderStage
from loam.serve.draft import make_proposer
from loam.serve.flags import ADD_SPECIAL_TOKENS, NO_SPECIAL_TOKEN_MATCHING
from loam.serve.image_text import ImageInput, ImageText, image_component
from loam.serve.kv import KvPool, KvSequence, PoolExhausted
from loam.serve.metrics import ModelMetrics
from loam.serve.residency import array_bytes, module_pool
from loam.serve.sampling import Sampler, SamplingParams, StopMatcher
from loam.serve.scheduler import Event, Request, ServeError, Worker
from loam.serve.scoring import TokenScore, log_softmax, score
from loam.serve.spec import (
    Capacities,
    Control,
    Package,
    PackageTokenizer,
    TextStream,
    refuse_control,
)
from loam.serve.speculative import Guess, GuessBudget, Proposer, accept, read_speculation


@dataclass(frozen=True)
class TextState:
    """What `TextControl.prepare` settles at registration."""

    tokenizer: PackageTokenizer | None
    eos: frozenset[int]


@runtime_checkable
class GenerationControl(Control, Protocol):
    """What a text package's control provides (the built-in one is `TextControl`): `prepare` settles a
    `TextState`; `encode` and `encode_chat` give a request's prompt ids."""

    def prepare(self, package: Package) -> TextState: ...
    def encode(self, state: TextState, prompt: object, flags: int, param: str) -> list[int]: ...
    def encode_chat(self, state: TextState, messages: list[dict[str, object]], param: str) -> list[int]: ...


class TextControl:
    """The text role's built-in control: the request framing (prompt ids from text, token ids or chat messages,
    with the tokenizer flags of `loam.serve.flags`) and the tokens that end a reply."""

    def prepare(self, package: Package) -> TextState:
        tokenizer = package.tokenizer
        eos = getattr(tokenizer, "eos_id", None)
        return TextState(tokenizer, frozenset() if eos is None else frozenset({int(eos)}))

    def encode(self, state: TextState, prompt: object, flags: int, param: str) -> list[int]:
        """The ids of a completion prompt: text (encoded with `flags`) or a list of token ids."""
        if isinstance(prompt, str):
            if state.tokenizer is None:
                raise ServeError("this model has no tokenizer: give the prompt as token ids", param=param)
            return state.tokenizer.encode(
                prompt,
                add_special_tokens=bool(flags & ADD_SPECIAL_TOKENS),
                special_token_matching=not flags & NO_SPECIAL_TOKEN_MATCHING,
            )
        if isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return list(prompt)
        raise ServeError("must be a string or an array of token ids", param=param)

    def encode_chat(self, state: TextState, messages: list[dict[str, object]], param: str) -> list[int]:
        """The ids of a conversation rendered by the tokenizer's chat template, ready for the assistant's reply."""
        if state.tokenizer is None or getattr(state.tokenizer, "chat_template", None) is None:
            raise ServeError("this model has no chat template: use /v1/completions", param=param)
        try:
            return state.tokenizer.encode_chat(messages)
        except LoamError as err:
            raise ServeError(str(err), param=param) from None


@dataclass
class Session:
    """A retained conversation: its KV state, and the token it sampled last, not yet read (`pending`)."""

    id: str
    seq: KvSequence
    pending: list[int] = field(default_factory=list)
    busy: bool = False

    @property
    def tokens(self) -> list[int]:
        """Every token of the conversation, read or pending."""
        return [*self.seq.tokens, *self.pending]


@dataclass(eq=False)
class TextRequest(Request):
    """A generation request: its prompt ids, how it samples, and where it is."""

    prompt: list[int] = field(default_factory=list)
    params: SamplingParams = field(default_factory=SamplingParams)
    eos: frozenset[int] = frozenset()
    decode: TextStream | None = None  # None: no text, token ids only
    session: Session | None = None
    seq: KvSequence | None = None
    pending: list[int] = field(default_factory=list)
    generated: list[int] = field(default_factory=list)
    cached: int = 0
    first_token_at: float | None = None
    admitted_at: tuple[int, list[int]] | None = None  # a session's length and pending token when admitted
    done: bool = False  # ended as it should (stop or length), not failed or cancelled
    retired: bool = False  # its state is released (or settled in its session)
    sampler: Sampler | None = None
    matcher: StopMatcher | None = None
    # Known-token scoring (`loam.serve.scoring`).  `logprobs`: alternatives reported with each generated token's
    # score (None: no scores).  `targets`: the tokens the logits at each position of `prompt` score (a prompt's
    # own tokens after the first, or all of them after a session's history, `lead`; a continuation's after its
    # first); None: the prompt is read unscored.  Such a request reads its whole prompt (no cached prefix: the
    # positions a cache skips have no logits).
    logprobs: int | None = None
    targets: list[int] | None = None
    prompt_top: int = 0  # alternatives reported with each prompt token's score
    lead: int = 0  # 1: a session's read-again token comes first, so the span's first logits score `targets[0]`
    prompt_scores: list[TokenScore] = field(default_factory=list)
    scores: list[TokenScore] = field(default_factory=list)  # generated tokens' scores not yet delivered
    # Multiple choice: each continuation's log-probability after the prompt, read as a branch (a child request
    # on a fork of the prompt's blocks, `parent` set) in one cohort; the reply is their distribution.
    continuations: list[list[int]] = field(default_factory=list)
    branches: list[TextRequest] = field(default_factory=list)
    continuation_logprobs: list[float] = field(default_factory=list)
    parent: TextRequest | None = None
    branch: int = 0  # a branch's index among its parent's continuations
    speculative: bool = True  # False: never read proposed tokens, though the package names a proposer
    proposal: list[int] = field(default_factory=list)  # the tokens read after `pending` in the running step
    proposal_probs: list[np.ndarray] | None = None  # the distributions they were drawn from (None: point masses)
    draft: KvSequence | None = None  # a draft model's rows of state (`loam.serve.draft`)
    budget: GuessBudget = field(default_factory=GuessBudget)  # how many tokens its proposer guesses next
    images: list[ImageInput] = field(default_factory=list)  # the chat's images (`loam.serve.image_text`), held


class TextWorker(Worker):
    """Schedules a decoder's requests over one block pool; its control frames their prompts."""

    state: TextState

    def __init__(
        self,
        name: str,
        stage: DecoderStage,
        capacities: Capacities,
        metrics: ModelMetrics,
        control: GenerationControl,
        state: TextState,
        proposer: Proposer | None = None,
        speculate: int = 0,
        images: ImageText | None = None,
    ) -> None:
        self.stage = stage
        self.images = images  # the package's image component, when it has one
        self.proposer = proposer
        self.speculate = speculate  # the most tokens the proposer guesses per step
        self.control = control
        self.state = state
        self.capacities = capacities
        self.pool = KvPool(stage.layers, capacities.block_tokens, capacities.blocks())
        self.sessions: dict[str, Session] = {}
        self.widest = 0  # the most rows one call has carried
        self.mixed = 0  # calls that carried both prompt spans and decode steps
        super().__init__(name, metrics, capacities.output_bytes)

    # -- sessions (retained conversations) ------------------------------------------------------------------------

    def open_session(self, session_id: str) -> Session:
        with self.lock:
            self._check_rows()
            session = Session(session_id, self.pool.new_sequence())
            self.sessions[session_id] = session
            return session

    def fork(self, session: Session, new_id: str) -> Session:
        """A new session sharing `session`'s state (no copy; the first write to a shared block copies it)."""
        with self.lock:
            self._check_idle(session)
            self._check_rows()
            twin = Session(new_id, self.pool.fork(session.seq), list(session.pending))
            self.sessions[new_id] = twin
            return twin

    def rewind(self, session: Session, length: int) -> None:
        """Forget everything after the first `length` tokens of the conversation."""
        with self.lock:
            self._check_idle(session)
            if not 0 <= length <= len(session.tokens):
                raise ServeError(f"rewind to {length} tokens: the session holds {len(session.tokens)}", param="tokens")
            if length <= session.seq.length:
                self.pool.rewind(session.seq, length)
                session.pending = []
            else:
                session.pending = session.pending[: length - session.seq.length]
            self._gauge_pool()

    def close(self, session: Session) -> None:
        with self.lock:
            self._check_idle(session)
            self.pool.release(session.seq)
            self.sessions.pop(session.id, None)
            self._gauge_pool()

    # -- memory (loam.serve.residency) ---------------------------------------------------------------------------

    def kv_bytes(self) -> int:
        return self.pool.nbytes + (self.proposer.nbytes() if self.proposer is not None else 0)

    def workspace_bytes(self) -> int:
        """The largest cohort's working storage: the past of every row it can carry at full context as a step holds
        it outside the pool (`_row_bytes`) and the float32 logits of its units."""
        rows = min(self.capacities.resident_requests, self.capacities.batch_units)
        return self._row_bytes(self.capacities.context_tokens) * rows + self._logits_bytes(self.capacities.batch_units)

    def request_bytes(self, tokens: int, prompt: int) -> int:
        """What one request alone needs besides the weights: the KV blocks of `tokens` positions, its row's past
        gathered at that length and the logits of its prompt's span."""
        blocks = -(-tokens // self.capacities.block_tokens)
        span = min(prompt, self.capacities.batch_units)
        return blocks * self.pool.block_bytes + self._row_bytes(tokens) + self._logits_bytes(span)

    def _row_bytes(self, positions: int) -> int:
        """A row's past at `positions` as a step holds it outside the pool: every layer's, gathered; where the step
        reads the pool in place (`DecoderStage.paged`), the one key and value layer a prefill's attention reads
        gathered at a time."""
        layers = self.stage.layers.values()
        sizes = sorted(heads * positions * size * np.dtype(dtype).itemsize for heads, size, dtype in layers)
        return sum(sizes[-2:] if self.stage.paged else sizes)

    def _logits_bytes(self, units: int) -> int:
        return units * self.stage.vocab * 4

    def resident_bytes(self) -> dict[str, int]:
        """The blocks holding state (held or cached); the gathered pasts and the module's intermediates kept for the
        next step."""
        stats = self.pool.stats()
        scratch = sum(rows * self._row_bytes(positions) for rows, positions in self.stage.scratch_extents())
        pooled = array_bytes(module_pool(self.stage.stage.module).values())
        images = self.images.resident_bytes() if self.images is not None else 0  # their pixels, rows and stages' pools
        kv = (stats["used"] + stats["cached"]) * self.pool.block_bytes
        return {"kv": kv, "workspace": scratch + pooled + images}

    def trim(self) -> None:
        self.pool.trim()
        self.stage.trim()
        if self.proposer is not None:
            self.proposer.trim()
        if self.images is not None:
            self.images.trim()
        self._gauge_pool()

    def _check_idle(self, session: Session) -> None:
        if session.busy:
            raise ServeError(f"session {session.id!r} has a request running", status=409, param="session")

    def _check_rows(self) -> None:
        if len(self.sessions) >= self.capacities.resident_requests:
            raise ServeError(
                f"model {self.name!r} holds {len(self.sessions)} sessions, its resident_requests capacity", status=429
            )

    # -- submission ---------------------------------------------------------------------------------------------

    def check(self, request: TextRequest) -> None:
        """Refuse what can never run: an empty prompt, a context past the capacity."""
        held = len(request.session.tokens) if request.session is not None else 0
        if not request.prompt and not (request.session is not None and request.session.pending):
            raise ServeError("the prompt is empty: give at least one token", param="prompt")
        if request.session is not None and request.continuations:
            raise ServeError("a request on a session cannot weigh choices", param="session")
        total = held + len(request.prompt) + max((len(c) for c in request.continuations), default=0)
        context = self.capacities.context_tokens
        if total >= context:
            raise ServeError(
                f"the prompt is {total} tokens; model {self.name!r} takes at most {context - 1} "
                f"(context_tokens {context}, one left for the reply)",
                param="prompt",
            )
        if request.session is not None:
            if request.session.busy:
                raise ServeError(f"session {request.session.id!r} has a request running", status=409, param="session")
            request.session.busy = True

    def submit(self, request: Request) -> None:
        assert isinstance(request, TextRequest)
        self.check(request)
        request.sampler = Sampler(request.params)
        request.matcher = StopMatcher(request.params.stop)
        if self.images is not None:
            self.images.hold(request.images)  # until it retires: its images' rows stay for its spans
        try:
            super().submit(request)
        except ServeError:
            if request.session is not None:
                request.session.busy = False
            if self.images is not None:
                self.images.release(request.images)
            raise

    # -- one step -------------------------------------------------------------------------------------------------

    def _admit(self, request: TextRequest) -> bool:
        """Give `request` its rows of state: its session's, or the longest retained prefix of its prompt.

        A request on a session takes the row its session already holds (counted in `sessions`); any other
        needs a free one."""
        held = sum(1 for r in self.waiting if isinstance(r, TextRequest) and r.seq is not None and r.session is None)
        if request.session is None and held + len(self.sessions) >= self.capacities.resident_requests:
            return False
        if request.session is not None:
            request.seq, session = request.session.seq, request.session
            if request.targets is not None and not session.pending and request.seq.length:
                # The logits that score the prompt's first token are its last read token's: read it again.
                session.pending = [request.seq.tokens[-1]]
                self.pool.rewind(request.seq, request.seq.length - 1)
            if request.targets is not None and session.pending:  # every token of the prompt scored
                request.targets, request.lead = list(request.prompt), 1
            request.admitted_at = (request.seq.length, list(session.pending))
            request.pending = [*session.pending, *request.prompt]
            session.pending = []
            request.cached = request.seq.length
        elif request.targets is not None:  # scored from its first token: every position's logits are wanted
            request.seq = self.pool.new_sequence()
            request.pending = list(request.prompt)
        else:
            request.seq = self.pool.match_prefix(request.prompt)
            request.pending = request.prompt[request.seq.length :]
            request.cached = request.seq.length
        return True

    def step(self, eligible: list[Request]) -> bool:
        units = self.capacities.batch_units
        # Prompt tokens this cohort may read: `prefill_units` while streams are decoding (so a long prompt
        # arriving mid-stream is read in chunks beside them), all the units when none is.
        decoding = any(isinstance(r, TextRequest) and r.generated for r in eligible)
        prefill = self.capacities.prefill_units if decoding and self.capacities.prefill_units else units
        rows: list[tuple[TextRequest, list[int]]] = []
        guesses: list[tuple[TextRequest, Guess]] = []  # decoding rows whose proposer may guess ahead
        tag: str | None = None
        for request in eligible:
            assert isinstance(request, TextRequest)
            if len(rows) >= self.capacities.resident_requests or units == 0:
                break
            if request.branches:  # its continuations are being read as branches of their own
                continue
            if request.seq is None and not self._admit(request):
                continue
            assert request.seq is not None
            if tag is not None and self.stage.tag(request.seq) != tag:
                continue
            reading = not request.generated
            if reading and prefill == 0:
                continue
            span = request.pending[: min(units, prefill) if reading else units]
            try:
                self.pool.reserve(request.seq, len(span))
            except PoolExhausted as err:
                if not rows and all(r.seq is None or r is request for r in self.waiting if isinstance(r, TextRequest)):
                    self._fail(request, f"no room for its state: {err}", 507)
                    return True
                continue
            tag = self.stage.tag(request.seq)
            rows.append((request, span))
            self.cohort.append(request)
            request.proposal = []  # none yet: the proposer fills it in once the rows are chosen
            room = 0 if reading else self._room(request, units - len(span))
            if room and request.sampler is not None:
                context = [*request.seq.tokens, *span]
                guesses.append((request, Guess(context, room, request.params, request.sampler.rng, request.draft)))
            units -= len(span) + room
            prefill -= len(span) if reading else 0
        if not rows:
            return False
        if guesses:
            rows = self._guess(rows, guesses)
        self.run_cohort(rows, self._compute, self._collect, self._fail_row)
        return True

    def _compute(self, rows: Sequence[tuple[TextRequest, list[int]]]) -> list[np.ndarray]:
        """Each row's logits at its last new position, its span's KV appended to its blocks."""
        cohort = []
        for request, span in rows:
            assert request.seq is not None  # admitted before it joined the cohort
            cohort.append((request.seq, span))
        scoring = frozenset(
            i for i, (r, _) in enumerate(rows) if (r.targets is not None and not r.generated) or r.proposal
        )
        return self.stage.run(self.pool, cohort, scoring)

    def _collect(self, rows: Sequence[tuple[TextRequest, list[int]]], logits: list[np.ndarray]) -> None:
        self.cohorts += 1
        self.widest = max(self.widest, len(rows))
        reading = [not r.generated for r, _ in rows]
        self.mixed += any(reading) and not all(reading)  # prompt spans and decode steps in one call
        self.metrics.cohort_size.observe(len(rows))
        self.metrics.cohort_units.observe(sum(len(span) for _, span in rows))
        prompt_tokens = generated = cached = 0
        for (request, span), row_logits in zip(rows, logits, strict=True):
            if request.proposal:  # a verifier span: its logits at every position
                if not (request.cancelled or request.finished):
                    generated += self._verify(request, len(span), row_logits)
                request.proposal = []
                continue
            reading_prompt = not request.generated
            if request.targets is not None and reading_prompt:  # logits at every position of the span
                self._score_span(request, len(request.prompt) - len(request.pending), row_logits)
                row_logits = row_logits[-1]
            request.pending = request.pending[len(span) :]
            if reading_prompt:
                prompt_tokens += len(span)
            if request.pending or request.cancelled or request.finished:  # more to read, or only to be released
                continue
            if request.parent is not None:
                self._branch_read(request)
                continue
            if reading_prompt:
                cached += request.cached
            if request.continuations:
                self._branch(request, row_logits)
            elif reading_prompt and request.params.max_tokens == 0:  # the prompt scored, nothing generated
                self._finish(request, "length")
            else:
                generated += 1
                self._advance(request, row_logits)
        self.metrics.tokens(prompt_tokens, generated, cached)
        self._gauge_pool()

    def _score_span(self, request: TextRequest, read: int, logits: np.ndarray) -> None:
        """Score the known tokens that the logits of a span starting at prompt position `read` predict."""
        assert request.targets is not None
        for k, position in enumerate(logits):
            if 0 <= read + k + request.lead < len(request.targets):
                target = request.targets[read + k + request.lead]
                request.prompt_scores.append(score(position, target, request.prompt_top))

    def _branch(self, request: TextRequest, logits: np.ndarray) -> None:
        """The prompt of a multiple-choice request is read: `logits` score each continuation's first token, and
        each longer continuation is read as a branch on a fork of the prompt's blocks (the prefix is computed
        once and never copied), all of them together in the next cohort."""
        first = log_softmax(logits)
        request.continuation_logprobs = [float(first[c[0]]) for c in request.continuations]
        assert request.seq is not None
        for index, continuation in enumerate(request.continuations):
            if len(continuation) > 1:
                branch = TextRequest(
                    sink=_unheard, prompt=continuation[:-1], params=request.params, seq=self.pool.fork(request.seq),
                    pending=continuation[:-1], targets=continuation[1:], parent=request, branch=index,
                )  # fmt: skip
                request.branches.append(branch)
                self.waiting.append(branch)
        if not request.branches:
            self._finish(request, "stop", {"logprobs": request.continuation_logprobs})

    def _branch_read(self, branch: TextRequest) -> None:
        """A branch has read its continuation: add its tokens' scores to its parent's, which ends with the last."""
        parent = branch.parent
        assert parent is not None
        parent.continuation_logprobs[branch.branch] += sum(s.logprob for s in branch.prompt_scores)
        parent.branches.remove(branch)
        branch.finished = True
        self.retire(branch)
        if not parent.branches:
            self._finish(parent, "stop", {"logprobs": parent.continuation_logprobs})

    def _gauge_pool(self) -> None:
        """Set the KV gauges from the pool: after each cohort, and whenever blocks go back outside one (a request
        cancelled or failed between cohorts, a session closed or rewound), so an idle server shows what it holds."""
        stats = self.pool.stats()
        self.metrics.kv_used.set(stats["used"])
        self.metrics.kv_cached.set(stats["cached"])

    def _room(self, request: TextRequest, units: int) -> int:
        """How many tokens `request`'s proposer may guess after its pending one: no more than the cohort's `units`
        left, the tokens it may still generate and its context leave room for beside that one."""
        if self.proposer is None or not request.speculative or request.seq is None:
            return 0
        left = request.params.max_tokens - len(request.generated)
        room = request.budget.room(self.speculate)
        return max(0, min(room, units, left - 1, self.capacities.context_tokens - request.seq.length - 2))

    def _guess(
        self, rows: list[tuple[TextRequest, list[int]]], guesses: list[tuple[TextRequest, Guess]]
    ) -> list[tuple[TextRequest, list[int]]]:
        """`rows` with the proposer's guesses read after each guessing row's token (a verifier span), where the
        pool has room for them; a row without is a plain step."""
        assert self.proposer is not None
        self.proposer.propose([guess for _, guess in guesses])
        for request, guess in guesses:
            request.draft = guess.draft
            assert request.seq is not None
            try:
                self.pool.reserve(request.seq, 1 + len(guess.tokens))
            except PoolExhausted:
                continue
            request.proposal, request.proposal_probs = guess.tokens, guess.probs
        return [(request, [*span, *request.proposal]) for request, span in rows]

    def _verify(self, request: TextRequest, span: int, logits: np.ndarray) -> int:
        """Take what the decoder accepts of `request`'s proposal from the verifier span's `logits` ([span, vocab]),
        roll back the KV of the positions after it, and deliver the tokens one by one until one ends the request.
        Returns how many were delivered."""
        assert request.sampler is not None and request.seq is not None
        proposal, params = request.proposal, request.params
        start = request.seq.length - span  # where the span began: its first token is the one sampled last
        tokens = accept(logits, proposal, params, request.sampler.rng, request.proposal_probs)
        self.metrics.speculated(len(proposal), len(tokens) - 1)
        request.budget.kept(len(proposal), len(tokens) - 1, self.speculate)
        self.pool.rewind(request.seq, start + len(tokens))  # the rejected positions' KV goes
        for m, token in enumerate(tokens, 1):
            reason = self._deliver(request, token, logits[m - 1], start + m)
            if reason is not None:
                self.pool.rewind(request.seq, start + m)  # what a plain run holds when it ends at this token
                self._finish(request, reason)
                return m
        return len(tokens)

    def _advance(self, request: TextRequest, logits: np.ndarray) -> None:
        """Sample `request`'s next token from `logits`, deliver it, and decide whether the request ends."""
        assert request.sampler is not None and request.seq is not None
        token = request.sampler.pick(logits)
        reason = self._deliver(request, token, logits, request.seq.length)
        if reason is not None:
            self._finish(request, reason)

    def _deliver(self, request: TextRequest, token: int, logits: np.ndarray, length: int) -> str | None:
        """Deliver `token`, picked from `logits` when `request` had read `length` tokens; the reason the request
        ends with it (None: it goes on), its held-back text delivered."""
        assert request.matcher is not None
        if request.logprobs is not None:
            request.scores.append(score(logits, token, request.logprobs))
        now = time.monotonic()
        if request.first_token_at is None:
            request.first_token_at = now
            self.metrics.ttft.observe(now - request.created)
        request.generated.append(token)
        params = request.params
        reason: str | None = None
        if token in request.eos and not params.ignore_eos:
            reason = "stop"
            if request.logprobs is not None:
                request.scores.pop()  # the token that ends the reply shows no text, so it has no entry
        else:
            piece = request.decode.step(token) if request.decode is not None else ""
            shown = request.matcher.feed(piece)
            if request.matcher.stopped:
                reason = "stop"
            if shown or request.decode is None:
                request.deliver(Event("token", text=shown, token=token, value=_delivered(request)))
        if reason is None and len(request.generated) >= params.max_tokens:
            reason = "length"
        if reason is None and length + 1 >= self.capacities.context_tokens:
            reason = "length"
        request.pending = [token]
        if reason is not None:
            if request.decode is not None and not request.matcher.stopped:
                rest = request.matcher.feed(request.decode.finish())
                rest += request.matcher.flush()
                if rest or request.scores:
                    request.deliver(Event("token", text=rest, token=-1, value=_delivered(request)))
        return reason

    def _finish(self, request: TextRequest, reason: str, value: object = None) -> None:
        """End `request`: its usage, and `value` (default: the generated ids) with the done event."""
        prompt = len(request.prompt) + sum(len(c) for c in request.continuations)
        usage: dict[str, object] = {
            "prompt_tokens": prompt,
            "completion_tokens": len(request.generated),
            "total_tokens": prompt + len(request.generated),
            "prompt_tokens_details": {"cached_tokens": request.cached},
        }
        request.done = True
        self.retire(request)  # before the reply: a client's next call sees the session (and the pool) settled
        done = list(request.generated) if value is None else value
        request.deliver(Event("done", finish_reason=reason, usage=usage, value=done))
        self.metrics.finished(reason)

    def _fail_row(self, row: tuple[TextRequest, list[int]], status: int, message: str) -> None:
        request = row[0].parent or row[0]  # a branch's failure is its parent's
        if not request.finished:
            self._fail(request, message, status)

    def _fail(self, request: TextRequest, message: str, status: int) -> None:
        self.retire(request)
        request.deliver(Event("error", text=message, status=status))
        self.metrics.finished("error")

    def retire(self, request: Request) -> None:
        assert isinstance(request, TextRequest)
        if request.retired:
            return
        request.retired = True
        for branch in request.branches:  # a multiple-choice request that ended early takes its branches with it
            branch.finished = True
            self.retire(branch)
        request.branches = []
        if request.draft is not None and self.proposer is not None:
            self.proposer.release(request.draft)
            request.draft = None
        if self.images is not None:
            self.images.release(request.images)
            request.images = []
        session = request.session
        if session is not None:
            # A request that ended keeps what it read and the token it sampled last, for the next request on the
            # session; one that failed or was cancelled leaves the session as it found it.
            if request.done:
                session.pending = list(request.pending)
            elif request.admitted_at is not None:
                length, pending = request.admitted_at
                self.pool.rewind(session.seq, length)
                session.pending = pending
            session.busy = False
        elif request.seq is not None:
            self.pool.release(request.seq)
        request.seq = None
        self._gauge_pool()


def _unheard(event: Event) -> None:
    """A branch's sink: its parent speaks for it."""


def _delivered(request: TextRequest) -> list[TokenScore] | None:
    """The scores of `request`'s tokens not delivered yet, taken for the event that delivers them (None: the
    request asked for none)."""
    if request.logprobs is None:
        return None
    scores, request.scores = request.scores, []
    return scores


def serve_text(package: Package, control: Control, metrics: ModelMetrics) -> TextWorker:
    """The text role's worker for `package`: its control (seen to provide the text contract) prepared, its
    decoder stage checked and probed, and a block pool sized by its capacities."""
    if not isinstance(control, GenerationControl):
        raise refuse_control(package, GenerationControl)
    state = control.prepare(package)
    spec = package.spec
    where = str(spec.folder / "model.json")
    speculation = read_speculation(spec.role_keys.get("speculative"), where, list(spec.stages))
    images = image_component(package, metrics)
    others = {speculation.stage if speculation is not None else "", *(images.stages if images is not None else ())}
    name = next(name for name in spec.stages if name not in others)
    stage = DecoderStage(package.stages[name], f"{where} stage {name!r}", images.embed if images is not None else None)
    draft = None if speculation is None else speculation.stage
    reader = None if draft is None else DecoderStage(package.stages[draft], f"{where} stage {draft!r}")
    proposer = make_proposer(speculation, reader, stage.vocab, where, spec.capacities)
    tokens = speculation.tokens if speculation is not None else 0
    return TextWorker(spec.name, stage, spec.capacities, metrics, control, state, proposer, tokens, images)
