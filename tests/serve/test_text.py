"""Retained text on the tiny GPT-2: mixed cohorts, batch invariance, sessions, prefix reuse, failure isolation.

The oracles are independent of the server: the greedy tokens onnxruntime and torch agree on
(tests/models/tiny_gpt2/expected.npz), and `loam.text.generate.Decoder` running the decoder exported WITHOUT
position_ids one request at a time (no padding, no block pool, no cohort).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest

import loam
from loam.driver.options import Options
from loam.serve.decoder_stage import DecoderStage
from loam.serve.kv import KvPool
from loam.serve.paged_state import PagedState
from loam.serve.sampling import SamplingParams
from loam.serve.scheduler import Event, Request
from loam.serve.server import Server
from loam.serve.text import TextRequest, TextWorker
from loam.text import generate as decode_loop
from loam.text.generate import Decoder
from loam.text.tokenizer import Tokenizer
from tests.serve.serving import MODELS, PACKAGES, finish, generate, package_copy, serving, submit

pytestmark = pytest.mark.xdist_group("serve-tiny-gpt2")
HERE = MODELS / "tiny_gpt2"
EXPECTED = np.load(HERE / "expected.npz")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(tmp_path_factory, PACKAGES / "tiny_gpt2") as server:
        yield server


@pytest.fixture(scope="module")
def worker(server: Server) -> TextWorker:
    worker = server.models["tiny-gpt2"].worker
    assert isinstance(worker, TextWorker)
    return worker


@pytest.fixture(scope="module")
def reference() -> Decoder:
    """The decoder exported without position_ids, driven one request at a time by loam.text.generate."""
    options = Options.from_toml(HERE / "decoder_with_past.loam.toml")
    built = loam.build(
        HERE / "decoder_with_past.onnxtext", options=options.merged(checkpoints=[HERE / "tiny_gpt2.safetensors"])
    )
    weights = built.module.Weights.load_file(str(HERE / "tiny_gpt2.safetensors"))
    return Decoder(built.module, weights, "decoder_with_past")


_reference_lock = threading.Lock()


def alone(reference: Decoder, prompt: list[int], count: int) -> list[int]:
    """Greedy tokens of `prompt` through the reference decoder."""
    with _reference_lock:
        reference.reset()
        tokens: list[int] = []
        logits = reference.step(prompt)
        for _ in range(count):
            tokens.append(int(np.argmax(logits)))
            if len(tokens) < count:
                logits = reference.step([tokens[-1]])
        return tokens


def prompts(count: int, seed: int, low: int = 2, high: int = 30) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [[int(t) for t in rng.integers(3, 1000, int(rng.integers(low, high)))] for _ in range(count)]


def test_a_request_alone_picks_onnxruntimes_greedy_tokens(worker: TextWorker) -> None:
    prompt = [int(t) for t in EXPECTED["prompt_ids"][0]]
    assert generate(worker, prompt, 20) == [int(t) for t in EXPECTED["greedy_ids"]]


def test_the_reference_decoder_agrees_with_onnxruntime(reference: Decoder) -> None:
    prompt = [int(t) for t in EXPECTED["prompt_ids"][0]]
    assert alone(reference, prompt, 20) == [int(t) for t in EXPECTED["greedy_ids"]]


def test_a_cohort_step_with_its_pasts_in_place_equals_the_plain_step(worker: TextWorker) -> None:
    """Rows at different positions, prompt spans and decode steps together: the step that reads the pasts in
    the pool's blocks (a PagedState), the one that gathers them into a DecodeState (forward_in_place) and the
    one that feeds them as arrays (forward) agree bit for bit, logits and the KV they keep; rows that share
    blocks (a fork) and rows whose past ends inside a block are among them."""
    assert worker.stage.paged  # only the fused attention reads the pasts: the server steps them in the pool
    stage = DecoderStage(worker.stage.stage, "the test's own stage")  # not the one the worker's thread runs
    results = []
    for mode in ("paged", "in place", "plain"):
        pool = KvPool(stage.layers, 4, 64)
        rows = [pool.new_sequence() for _ in range(3)]
        spans = [[5, 6, 7, 8, 9, 10, 11], [12, 13, 14], [15]]
        for seq, span in zip(rows, spans, strict=True):
            pool.reserve(seq, len(span))
        stage.paged, stage.in_place = mode == "paged", mode != "plain"
        first = stage.run(pool, list(zip(rows, spans, strict=True)))
        rows.append(pool.fork(rows[0]))  # shares row 0's blocks: its first write copies the partial one
        for seq in rows:
            pool.reserve(seq, 1)
        second = stage.run(pool, [(seq, [20 + r]) for r, seq in enumerate(rows)])
        results.append((first + second, pool.gather(rows, 8)))
    (logits, kv), *others = results
    for other_logits, other_kv in others:
        assert all(np.array_equal(a, b) for a, b in zip(logits, other_logits, strict=True))
        assert all(np.array_equal(kv[name], other_kv[name]) for name in kv)
    assert not np.array_equal(kv[stage.past_names[0]][0], kv[stage.past_names[0]][3])  # the fork wrote its own


def test_a_paged_state_refuses_a_past_it_did_not_give_rather_than_join_its_placeholder(worker: TextWorker) -> None:
    """A paged state's placeholders are zeros: an append of any other array, or an attention over paged keys and
    unpaged values, is an error, never a Concat or a read of them."""
    module = worker.stage.stage.module
    pool = KvPool(worker.stage.layers, 4, 8)
    seq = pool.new_sequence()
    pool.reserve(seq, 2)
    paged = PagedState(module, pool, [(seq, 2)], 0)
    name = worker.stage.past_names[0]
    heads, size, dtype = pool.layer(name)
    new = np.ones((1, heads, 2, size), dtype)
    with pytest.raises(ValueError, match="not the paged past"):
        module.kernel_append_state(np.zeros((1, heads, 0, size), dtype), new, paged, axis=2, state=name)
    assert not pool.storage(name).any()  # nothing was written
    joined = module.kernel_append_state(paged.past(name), new, paged, axis=2, state=name)
    assert paged.pages(joined, joined) is not None and pool.storage(name).any()  # the new rows, in the block
    with pytest.raises(ValueError, match="not paged"):
        paged.pages(joined, np.zeros(joined.shape, dtype))


def test_decode_steps_beside_a_long_prompt_span_run_as_their_own_call(worker: TextWorker) -> None:
    """Two streams' decode steps beside a 16-token prompt span: one call would compute 48 positions for 18, so the
    steps and the span run as two calls, whose logits and KV are the single call's (to float32 rounding: the
    products' shapes differ)."""
    stage = DecoderStage(worker.stage.stage, "the test's own stage")
    calls: list[int] = []
    call = stage._call
    stage._call = lambda pool, rows, *every: (calls.append(len(rows)), call(pool, rows, *every))[1]  # type: ignore[method-assign]
    results = []
    for split in (True, False):
        pool = KvPool(stage.layers, 4, 64)
        rows = [pool.new_sequence() for _ in range(3)]
        for r, seq in enumerate(rows[1:]):  # the streams hold a past of their own
            pool.reserve(seq, 5 + r)
            stage.run(pool, [(seq, list(range(30 + r, 35 + 2 * r)))])
        spans = [list(range(100, 116)), [7], [8]]
        for seq, span in zip(rows, spans, strict=True):
            pool.reserve(seq, len(span))
        calls.clear()
        cohort = list(zip(rows, spans, strict=True))
        if split:
            logits = stage.run(pool, cohort)
        else:  # the same rows as one call
            called = stage._call(pool, cohort)
            for (seq, span), (_, values) in zip(cohort, called, strict=True):
                pool.record(seq, span) if values is None else pool.append(seq, span, values)
            logits = [row_logits for row_logits, _ in called]
        results.append((logits, pool.gather(rows, 17), list(calls)))
    (logits, kv, split_calls), (one_logits, one_kv, one_call) = results
    assert split_calls == [2, 1] and one_call == [3]
    assert all(np.allclose(a, b, rtol=1e-5, atol=1e-5) for a, b in zip(logits, one_logits, strict=True))
    assert [int(np.argmax(a)) for a in logits] == [int(np.argmax(b)) for b in one_logits]
    assert all(np.allclose(kv[name], one_kv[name], rtol=1e-5, atol=1e-5) for name in kv)


def test_staggered_requests_of_different_lengths_equal_their_isolated_runs(
    worker: TextWorker, reference: Decoder
) -> None:
    batch = prompts(7, seed=1)
    lengths = [60, 3, 20, 7, 15, 1, 9]
    expected = [alone(reference, p, n) for p, n in zip(batch, lengths, strict=True)]
    widest, mixed = worker.widest, worker.mixed
    _, first_drain = submit(worker, batch[0], lengths[0])
    first_events = first_drain(300)  # type: ignore[operator]
    assert next(first_events).kind == "token"  # the first request is decoding: later prompts join its steps
    pending = []
    for i, (prompt, count) in enumerate(zip(batch[1:], lengths[1:], strict=True)):
        pending.append(submit(worker, prompt, count))
        if i % 2:  # arrivals while others are mid-generation: membership changes every few steps
            time.sleep(0.02)
    got = [list(first_events)[-1], *(finish(drain) for _, drain in pending)]
    assert [e.kind for e in got] == ["done"] * len(batch), [e.text for e in got]
    assert [list(e.value) for e in got] == expected  # type: ignore[arg-type]
    assert worker.widest > 1 and worker.mixed > mixed, (worker.widest, widest, worker.mixed)


def test_a_long_prompt_is_read_in_chunks_without_changing_its_tokens(worker: TextWorker, reference: Decoder) -> None:
    long_prompt = prompts(1, seed=2, low=100, high=101)[0]  # batch_units is 64: two chunks
    short = prompts(2, seed=3)
    expected = [alone(reference, p, 6) for p in [long_prompt, *short]]
    pending = [submit(worker, p, 6) for p in [long_prompt, *short]]
    got = [list(finish(drain).value) for _, drain in pending]  # type: ignore[arg-type]
    assert got == expected


def test_a_long_prompt_arriving_mid_stream_is_read_in_prefill_units_chunks(
    worker: TextWorker, reference: Decoder
) -> None:
    """With `prefill_units` 8, a 100-token prompt that arrives while a stream decodes is read 8 tokens a
    cohort beside the stream's steps (batch_units, 64, would take it in two), and both requests' tokens
    are their isolated runs'."""
    stream_prompt, long_prompt = prompts(1, seed=21, low=6, high=7)[0], prompts(1, seed=22, low=100, high=101)[0]
    expected = [alone(reference, stream_prompt, 40), alone(reference, long_prompt, 4)]
    calls: list[list[int]] = []  # each decoder call's span lengths
    real_run = worker.stage.run
    late_submitted = threading.Event()

    def recording_run(pool: object, rows: list[tuple[object, list[int]]], *every: frozenset[int]) -> list[np.ndarray]:
        calls.append([len(span) for _, span in rows])
        if len(calls) == 2:  # the stream's first decode step waits for the long prompt, however fast the CPU
            assert late_submitted.wait(60)
        return real_run(pool, rows, *every)  # type: ignore[arg-type]

    capacities = worker.capacities
    with worker.lock:
        worker.capacities = dataclasses.replace(capacities, prefill_units=8)
        worker.stage.run = recording_run  # type: ignore[method-assign]
    try:
        _, stream = submit(worker, stream_prompt, 40)
        assert next(stream(300)).kind == "token"  # type: ignore[operator]  # the stream is decoding
        _, late = submit(worker, long_prompt, 4)
        late_submitted.set()
        got = [list(finish(stream).value), list(finish(late).value)]  # type: ignore[arg-type]
    finally:
        late_submitted.set()
        with worker.lock:
            worker.capacities = capacities
            del worker.stage.run
    assert got == expected
    chunks = [max(spans) for spans in calls if len(spans) == 2 and max(spans) > 1]  # beside a decode step
    assert len(chunks) >= 100 // 8 and max(chunks) == 8, calls
    assert all(max(spans) <= 8 for spans in calls[1:] if len(spans) == 2), calls


@pytest.mark.parametrize("seed", [11, 12])
def test_a_seeded_sample_does_not_depend_on_its_cohort(worker: TextWorker, seed: int) -> None:
    prompt = prompts(1, seed=seed)[0]
    params = {"temperature": 0.9, "top_p": 0.95, "seed": seed}
    alone_tokens = generate(worker, prompt, 10, **params)
    crowd = [submit(worker, p, 10) for p in prompts(5, seed=seed + 100)]
    _, drain = submit(worker, prompt, 10, **params)
    assert list(finish(drain).value) == alone_tokens  # type: ignore[arg-type]
    for _, other in crowd:
        assert finish(other).kind == "done"


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_loam_generate_and_a_served_request_pick_the_same_tokens(
    server: Server, worker: TextWorker, temperature: float
) -> None:
    # `loam generate DIR` drives the package's own decoder stage one token at a time; its picks and a served
    # request's, from the same seed, are one picker's.
    stage = worker.stage.stage
    tokenizer = server.models["tiny-gpt2"].package.tokenizer
    assert isinstance(tokenizer, Tokenizer)
    prompt = prompts(1, seed=21)[0]
    ids: list[int] = []
    pieces = decode_loop.generate(
        Decoder(stage.module, stage.weights, "the package's decoder"), tokenizer, prompt, max_new_tokens=10,
        temperature=temperature, seed=5, stop_at_eos=False, ids_out=ids,
    )  # fmt: skip
    list(pieces)
    assert len(ids) == 10
    assert generate(worker, prompt, 10, temperature=temperature, seed=5, ignore_eos=True) == ids


def test_a_prompt_that_extends_a_retained_one_skips_its_prefill(worker: TextWorker, reference: Decoder) -> None:
    first = prompts(1, seed=4, low=40, high=41)[0]
    generate(worker, first, 4)
    extended = [*first, 7, 8, 9]
    _, drain = submit(worker, extended, 5)
    end = finish(drain)
    assert end.usage["prompt_tokens_details"]["cached_tokens"] == 40  # type: ignore[index]  # 5 full blocks of 8
    assert list(end.value) == alone(reference, extended, 5)  # type: ignore[arg-type]
    # A rewind by prompt: the first 20 tokens again reuse 2 blocks.
    _, drain = submit(worker, first[:20], 5)
    end = finish(drain)
    assert end.usage["prompt_tokens_details"]["cached_tokens"] == 16  # type: ignore[index]
    assert list(end.value) == alone(reference, first[:20], 5)  # type: ignore[arg-type]


def test_session_append_fork_and_rewind_each_equal_a_full_replay(worker: TextWorker, reference: Decoder) -> None:
    p1, p2, p3 = prompts(3, seed=5, low=5, high=14)
    session = worker.open_session("s")
    try:
        _, drain = submit(worker, p1, 6, session=session)
        first = list(finish(drain).value)  # type: ignore[arg-type]
        assert first == alone(reference, p1, 6)
        assert session.tokens == [*p1, *first]  # the last sampled token is pending, not yet read
        assert session.seq.length == len(p1) + 5

        twin = worker.fork(session, "t")
        used = worker.pool.stats()["used"]
        _, drain = submit(worker, p2, 6, session=session)  # append
        appended = list(finish(drain).value)  # type: ignore[arg-type]
        assert appended == alone(reference, [*p1, *first, *p2], 6)
        _, drain = submit(worker, p3, 6, session=twin)  # the fork goes its own way from the shared state
        forked = list(finish(drain).value)  # type: ignore[arg-type]
        assert forked == alone(reference, [*p1, *first, *p3], 6)
        assert used < worker.pool.capacity

        keep = len(p1) + 2
        worker.rewind(session, keep)
        assert session.tokens == [*p1, *first][:keep]
        _, drain = submit(worker, p3, 6, session=session)
        rewound = list(finish(drain).value)  # type: ignore[arg-type]
        assert rewound == alone(reference, [*[*p1, *first][:keep], *p3], 6)
        worker.close(twin)
    finally:
        worker.close(session)


def test_eos_ends_a_reply_with_stop_and_max_tokens_with_length(worker: TextWorker) -> None:
    prompt = [int(t) for t in EXPECTED["prompt_ids"][0]]
    greedy = [int(t) for t in EXPECTED["greedy_ids"]]
    _, drain = submit(worker, prompt, 20)
    full = finish(drain)
    assert full.finish_reason == "length" and list(full.value) == greedy  # type: ignore[arg-type]
    sink, collected = Request.collector()
    params = SamplingParams(max_tokens=20, temperature=0.0)
    worker.submit(TextRequest(sink=sink, prompt=prompt, params=params, eos=frozenset({greedy[3]})))
    end = finish(collected)
    assert end.finish_reason == "stop" and list(end.value) == greedy[:4]  # type: ignore[arg-type]
    assert end.usage["completion_tokens"] == 4  # type: ignore[index]


def test_a_failing_request_fails_alone_and_its_rows_are_reused(tmp_path_factory: pytest.TempPathFactory) -> None:
    # context_tokens 200 is past the model's 128 positions: the graph's owed condition refuses the step that
    # would read position 128, a ShapeError at forward's boundary.
    folder = package_copy(tmp_path_factory, "tiny_gpt2", capacities={"context_tokens": 200, "resident_requests": 4})
    with serving(tmp_path_factory, folder) as server:
        worker = server.models["tiny-gpt2"].worker
        assert isinstance(worker, TextWorker)
        good = prompts(3, seed=6)
        expected = [generate(worker, p, 8) for p in good]
        _, doomed_drain = submit(worker, prompts(1, seed=7, low=125, high=126)[0], 8)
        pending = [submit(worker, p, 8) for p in good]
        end = finish(doomed_drain)
        assert end.kind == "error" and end.status == 400
        assert "128" in end.text, end.text
        assert [list(finish(d).value) for _, d in pending] == expected  # type: ignore[arg-type]
        assert worker.pool.stats()["used"] == 0  # the failed request's blocks went back
        for _ in range(3):  # and its rows serve the next requests
            assert generate(worker, good[0], 8) == expected[0]


def test_cancellation_during_an_accepted_cohort_collects_the_member_and_frees_its_rows(worker: TextWorker) -> None:
    batch = prompts(4, seed=8)
    expected = [generate(worker, p, 12) for p in batch]
    sink, drain = Request.collector()
    victim = TextRequest(sink=sink, prompt=batch[1], params=SamplingParams(max_tokens=12, temperature=0.0))

    def cancel_on_first_token(event: Event) -> None:
        if event.kind == "token" and not victim.cancelled:
            worker.cancel(victim)  # called from inside the cohort's collection: the member was accepted
        sink(event)

    victim.sink = cancel_on_first_token
    pending = [submit(worker, p, 12) for p in batch[:1]]
    worker.submit(victim)
    pending += [submit(worker, p, 12) for p in batch[2:]]
    end = finish(drain)
    assert end.kind == "error" and end.status == 499, end
    assert len(victim.generated) == 1  # collected once, never scheduled again
    for (_, other), want in zip(pending, [expected[0], *expected[2:]], strict=True):
        assert list(finish(other).value) == want  # type: ignore[arg-type]
    deadline = time.monotonic() + 10
    while worker.pool.stats()["used"] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert worker.pool.stats()["used"] == 0
    assert generate(worker, batch[1], 12) == expected[1]  # its rows serve the next request


def test_a_stalled_reader_holds_back_only_its_own_request(worker: TextWorker) -> None:
    batch = prompts(3, seed=9)
    expected = [generate(worker, p, 12) for p in batch]
    stalled, stalled_drain = submit(worker, batch[0], 12)
    stalled.taken -= worker.output_bytes  # as if its reader were a full buffer behind (the reader owns `taken`)
    others = [submit(worker, p, 12) for p in batch[1:]]
    assert [list(finish(d).value) for _, d in others] == expected[1:]  # type: ignore[arg-type]
    assert not stalled.finished and len(stalled.generated) <= 1
    worker.consumed(stalled, worker.output_bytes)  # the reader catches up
    assert list(finish(stalled_drain).value) == expected[0]  # type: ignore[arg-type]


def test_requests_on_sessions_run_when_the_sessions_fill_every_resident_row(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # A session holds its row while it is open: a request on it takes that row, it needs no free one.
    folder = package_copy(tmp_path_factory, "tiny_gpt2", capacities={"resident_requests": 2})
    with serving(tmp_path_factory, folder) as server:
        worker = server.models["tiny-gpt2"].worker
        assert isinstance(worker, TextWorker)
        expected = generate(worker, [5, 6, 7], 4)
        first, second = worker.open_session("a"), worker.open_session("b")
        _, drain = submit(worker, [5, 6, 7], 4, session=first)
        end = finish(drain, timeout=20)
        assert end.kind == "done" and list(end.value) == expected  # type: ignore[arg-type]
        _, drain = submit(worker, [8, 9], 4, session=second)
        assert finish(drain, timeout=20).kind == "done"
        # A request without a session does need a row: it waits for one, and runs once a session closes.
        plain, drain = submit(worker, [5, 6, 7], 4)
        time.sleep(0.3)
        assert plain.seq is None and not plain.finished
        worker.close(first)
        assert list(finish(drain, timeout=20).value) == expected  # type: ignore[arg-type]
        worker.close(second)
