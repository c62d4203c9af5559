"""`loam.serve.kv`: the paged KV store gathers back exactly what was appended, through sharing and eviction.

Examples pin each mechanism (round trip, fork with copy-on-write, rewind, prefix matching, LRU eviction,
exhaustion); a hypothesis test runs random operation sequences against a plain Python model of each row's values.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loam.core.errors import LoamError
from loam.serve.kv import KvPool, KvSequence, PoolExhausted

# Different heads, head sizes and dtypes per layer, so a mix-up between layers shows.
LAYERS = {
    "past_key_values.0.key": (2, 3, np.dtype(np.float32)),
    "past_key_values.0.value": (2, 5, np.dtype(np.float32)),
    "past_key_values.1.key": (1, 4, np.dtype(np.float16)),
}


def _values(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    return {name: rng.standard_normal((heads, n, size)).astype(dtype) for name, (heads, size, dtype) in LAYERS.items()}


def _add(pool: KvPool, seq: KvSequence, tokens: list[int], values: dict[str, np.ndarray]) -> None:
    pool.reserve(seq, len(tokens))
    pool.append(seq, tokens, values)


def _concat(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {name: np.concatenate([p[name] for p in parts], axis=1) for name in LAYERS}


def _row(pool: KvPool, seq: KvSequence) -> dict[str, np.ndarray]:
    """seq's stored values, [heads, length, size] per name."""
    return {name: a[0] for name, a in pool.gather([seq], seq.length).items()}


def _assert_equal(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert set(got) == set(want)
    for name in want:
        assert got[name].dtype == want[name].dtype
        np.testing.assert_array_equal(got[name], want[name])


def _total(pool: KvPool) -> int:
    s = pool.stats()
    return s["used"] + s["cached"] + s["free"]


def test_gather_reproduces_appended_values_with_zero_padding() -> None:
    rng = np.random.default_rng(0)
    pool = KvPool(LAYERS, block_tokens=4, blocks=16)
    rows = [pool.new_sequence() for _ in range(3)]
    appended: list[list[dict[str, np.ndarray]]] = [[], [], []]
    # Chunks that end mid-block, exactly on a boundary and across several blocks; row 2 stays empty.
    for r, chunks in enumerate([[3, 1, 6, 1], [9]]):
        for n in chunks:
            vals = _values(rng, n)
            _add(pool, rows[r], list(range(n)), vals)
            appended[r].append(vals)
    assert [s.length for s in rows] == [11, 9, 0]
    assert [len(s.blocks) for s in rows] == [3, 3, 0]
    past = 13
    got = pool.gather(rows, past)
    for name, (heads, size, dtype) in LAYERS.items():
        assert got[name].shape == (3, heads, past, size) and got[name].dtype == dtype
        for r, seq in enumerate(rows[:2]):
            np.testing.assert_array_equal(got[name][r, :, : seq.length], _concat(appended[r])[name])
            assert not got[name][r, :, seq.length :].any()
        assert not got[name][2].any()
    # Fresh arrays each call: scribbling on one does not reach the pool.
    got["past_key_values.0.key"][...] = 7
    assert not pool.gather(rows, past)["past_key_values.0.key"][2].any()
    with pytest.raises(ValueError):
        pool.gather(rows, 10)


def test_append_requires_reserve() -> None:
    rng = np.random.default_rng(1)
    pool = KvPool(LAYERS, block_tokens=4, blocks=4)
    seq = pool.new_sequence()
    with pytest.raises(ValueError):
        pool.append(seq, [1], _values(rng, 1))
    _add(pool, seq, [1, 2], _values(rng, 2))
    pool.reserve(seq, 2)
    pool.reserve(seq, 2)  # idempotent: no second block
    assert pool.stats()["used"] == 1
    with pytest.raises(ValueError):
        pool.append(seq, [3, 4, 5], _values(rng, 3))
    assert seq.length == 2


def test_fork_shares_blocks_and_copies_on_write() -> None:
    rng = np.random.default_rng(2)
    pool = KvPool(LAYERS, block_tokens=4, blocks=16)
    base = pool.new_sequence()
    head = _values(rng, 6)
    _add(pool, base, [1, 2, 3, 4, 5, 6], head)
    used = pool.stats()["used"]
    child = pool.fork(base)
    assert child.blocks == base.blocks and child.tokens == base.tokens
    assert pool.stats()["used"] == used
    before = _row(pool, base)
    # Both write into the shared partial block with different values: each must see only its own.
    tail_child, tail_base = _values(rng, 3), _values(rng, 1)
    _add(pool, child, [7, 8, 9], tail_child)
    _add(pool, base, [10], tail_base)
    assert child.blocks[0] == base.blocks[0] and child.blocks[1] != base.blocks[1]
    _assert_equal({k: v[:, :6] for k, v in _row(pool, base).items()}, before)
    _assert_equal(_row(pool, base), _concat([head, tail_base]))
    _assert_equal(_row(pool, child), _concat([head, tail_child]))
    # The same as replaying all of child's tokens into a fresh sequence.
    replay = pool.new_sequence()
    _add(pool, replay, child.tokens, _concat([head, tail_child]))
    _assert_equal(_row(pool, replay), _row(pool, child))
    for seq in (base, child, replay):
        pool.release(seq)
    assert pool.stats()["used"] == 0 and _total(pool) == 16


def test_rewind_then_append_equals_replay_and_frees_blocks() -> None:
    rng = np.random.default_rng(3)
    pool = KvPool(LAYERS, block_tokens=4, blocks=16)
    seq = pool.new_sequence()
    first = _values(rng, 13)
    _add(pool, seq, list(range(13)), first)
    assert pool.stats()["used"] == 4
    pool.rewind(seq, 5)
    assert seq.length == 5 and len(seq.blocks) == 2 and pool.stats()["used"] == 2
    more = _values(rng, 4)
    _add(pool, seq, [90, 91, 92, 93], more)
    want = _concat([{k: v[:, :5] for k, v in first.items()}, more])
    replay = pool.new_sequence()
    _add(pool, replay, seq.tokens, want)
    _assert_equal(_row(pool, seq), want)
    _assert_equal(_row(pool, replay), want)
    pool.rewind(seq, 0)
    assert seq.length == 0 and seq.blocks == []
    with pytest.raises(ValueError):
        pool.rewind(seq, 1)


def test_match_prefix_reuses_full_blocks_only() -> None:
    rng = np.random.default_rng(4)
    pool = KvPool(LAYERS, block_tokens=4, blocks=16)
    prompt = [5, 6, 7, 8, 1, 2, 3, 4, 9, 9]
    orig = pool.new_sequence()
    vals = _values(rng, len(prompt))
    _add(pool, orig, prompt, vals)
    used = pool.stats()["used"]

    hit = pool.match_prefix([*prompt, 11])
    assert hit.tokens == prompt[:8] and hit.blocks == orig.blocks[:2]
    assert pool.stats()["used"] == used  # shared, not copied
    _assert_equal(_row(pool, hit), {k: v[:, :8] for k, v in vals.items()})
    # Never the whole prompt: one position must remain for the caller to run.
    assert pool.match_prefix(prompt[:8]).length == 4
    assert pool.match_prefix(prompt[:9]).length == 8
    assert pool.match_prefix(prompt[:4]).length == 0
    assert pool.match_prefix([]).length == 0
    # The block [1, 2, 3, 4] is cached only after [5, 6, 7, 8]; at the start it is a different entry.
    assert pool.match_prefix([1, 2, 3, 4, 0]).length == 0
    assert pool.match_prefix([5, 6, 7, 0, 1, 2, 3, 4, 0]).length == 0


def test_equal_entry_keeps_the_old_block() -> None:
    rng = np.random.default_rng(5)
    pool = KvPool(LAYERS, block_tokens=2, blocks=8)
    a, b = pool.new_sequence(), pool.new_sequence()
    va = _values(rng, 3)
    _add(pool, a, [1, 2, 3], va)
    _add(pool, b, [1, 2, 3], _values(rng, 3))
    hit = pool.match_prefix([1, 2, 3])
    assert hit.blocks == a.blocks[:1]
    _assert_equal(_row(pool, hit), {k: v[:, :2] for k, v in va.items()})


def _probe(pool: KvPool, tokens: list[int]) -> int:
    """How many positions match_prefix finds for tokens, without keeping them held."""
    hit = pool.match_prefix(tokens)
    found = hit.length
    pool.release(hit)
    return found


def test_eviction_is_lru_and_forgets_prefixes() -> None:
    rng = np.random.default_rng(6)
    pool = KvPool(LAYERS, block_tokens=2, blocks=4)
    old, new = pool.new_sequence(), pool.new_sequence()
    _add(pool, old, [1, 2, 3, 4], _values(rng, 4))
    _add(pool, new, [5, 6, 7, 8], _values(rng, 4))
    old_blocks, new_blocks = list(old.blocks), list(new.blocks)
    pool.release(old)
    pool.release(new)
    assert pool.stats() == {"blocks": 4, "used": 0, "cached": 4, "free": 0}
    assert pool.available() == 4
    # The two blocks a new row needs come out of the least recently released sequence.
    other = pool.new_sequence()
    _add(pool, other, [9, 9, 9], _values(rng, 3))
    assert sorted(other.blocks) == sorted(old_blocks)
    assert _probe(pool, [1, 2, 3, 4, 0]) == 0
    kept = pool.match_prefix([5, 6, 7, 8, 0])
    assert kept.blocks == new_blocks
    pool.release(kept)
    pool.release(other)  # [9, 9] stays cached, the partial [9] block is free
    filler = pool.new_sequence()
    _add(pool, filler, [0, 0, 0], _values(rng, 3))  # the free block, then the LRU's oldest: the tail of [5..8]
    assert _probe(pool, [5, 6, 7, 8, 0]) == 2
    assert _probe(pool, [9, 9, 0]) == 2
    assert _total(pool) == 4


def test_eviction_takes_the_tail_before_the_prefix() -> None:
    rng = np.random.default_rng(7)
    pool = KvPool(LAYERS, block_tokens=2, blocks=3)
    seq = pool.new_sequence()
    _add(pool, seq, [1, 2, 3, 4, 5, 6], _values(rng, 6))
    pool.release(seq)
    assert _probe(pool, [1, 2, 3, 4, 5, 6, 0]) == 6
    for expect in (4, 2, 0):
        one = pool.new_sequence()
        _add(pool, one, [7], _values(rng, 1))
        assert _probe(pool, [1, 2, 3, 4, 5, 6, 0]) == expect


def test_exhaustion_changes_nothing() -> None:
    rng = np.random.default_rng(8)
    pool = KvPool(LAYERS, block_tokens=4, blocks=3)
    seq = pool.new_sequence()
    vals = _values(rng, 6)
    _add(pool, seq, [1, 2, 3, 4, 5, 6], vals)
    child = pool.fork(seq)
    before, blocks = pool.stats(), list(child.blocks)
    with pytest.raises(PoolExhausted, match="wanted") as info:
        pool.reserve(child, 7)  # a copy of the shared partial block + 2 more: 3 wanted, 1 free
    assert isinstance(info.value, LoamError)
    assert pool.stats() == before and child.blocks == blocks
    pool.reserve(child, 2)  # the copy alone fits
    with pytest.raises(PoolExhausted):
        pool.reserve(seq, 3)
    _assert_equal(_row(pool, seq), vals)


def test_rewind_into_a_published_block_copies_it() -> None:
    rng = np.random.default_rng(11)
    pool = KvPool(LAYERS, block_tokens=2, blocks=8)
    seq = pool.new_sequence()
    vals = _values(rng, 4)
    _add(pool, seq, [1, 2, 3, 4], vals)
    published = seq.blocks[1]
    pool.rewind(seq, 3)
    _add(pool, seq, [8], _values(rng, 1))
    assert seq.blocks[1] != published
    hit = pool.match_prefix([1, 2, 3, 4, 0])
    assert hit.blocks[1] == published
    _assert_equal(_row(pool, hit), vals)


def test_unpublishing_a_private_block_beats_exhaustion() -> None:
    rng = np.random.default_rng(9)
    pool = KvPool(LAYERS, block_tokens=2, blocks=2)
    seq = pool.new_sequence()
    vals = _values(rng, 4)
    _add(pool, seq, [1, 2, 3, 4], vals)
    pool.rewind(seq, 3)  # block 1 is full, published and held by seq alone; no free block to copy into
    tail = _values(rng, 1)
    _add(pool, seq, [8], tail)
    _assert_equal(_row(pool, seq), _concat([{k: v[:, :3] for k, v in vals.items()}, tail]))
    assert pool.match_prefix([1, 2, 3, 4, 0]).length == 2


# -- random operation sequences against a model ------------------------------------------------------------------

H_LAYERS = {"k": (2, 3, np.dtype(np.float32)), "v": (1, 2, np.dtype(np.float64))}


class _Model:
    """A row's value at a position is a fixed function of the tokens up to it (as in a real decoder), drawn once."""

    def __init__(self) -> None:
        self._memo: dict[tuple[int, ...], dict[str, np.ndarray]] = {}
        self._rng = np.random.default_rng(10)

    def at(self, prefix: tuple[int, ...]) -> dict[str, np.ndarray]:
        if prefix not in self._memo:
            self._memo[prefix] = {n: self._rng.standard_normal((h, s)).astype(d) for n, (h, s, d) in H_LAYERS.items()}
        return self._memo[prefix]

    def values(self, tokens: list[int], start: int) -> dict[str, np.ndarray]:
        """[heads, len(tokens) - start, size] per name: the values of tokens[start:]."""
        cols = [self.at(tuple(tokens[: p + 1])) for p in range(start, len(tokens))]
        return {
            n: np.stack([c[n] for c in cols], axis=1) if cols else np.zeros((h, 0, s), d)
            for n, (h, s, d) in H_LAYERS.items()
        }


_ops = st.lists(
    st.tuples(
        st.sampled_from(["new", "append", "append", "append", "fork", "fork", "rewind", "rewind", "release", "match"]),
        st.integers(0, 7),
        st.integers(0, 7),
        st.lists(st.integers(0, 1), min_size=0, max_size=6),
    ),
    min_size=8,
    max_size=30,
)


@settings(max_examples=100)
@given(_ops, st.integers(1, 4), st.integers(2, 10))
def test_random_operations_match_model(ops: list[tuple[str, int, int, list[int]]], bt: int, blocks: int) -> None:
    pool = KvPool(H_LAYERS, block_tokens=bt, blocks=blocks)
    model = _Model()
    live: list[KvSequence] = []
    for op, pick, back, tokens in ops:
        seq = live[pick % len(live)] if live else None
        if op == "new" or seq is None:
            live.append(pool.new_sequence())
        elif op == "append":
            before = pool.stats()
            try:
                pool.reserve(seq, len(tokens))
            except PoolExhausted:
                assert pool.stats() == before
            else:
                pool.append(seq, tokens, model.values(seq.tokens + tokens, seq.length))
        elif op == "fork":
            live.append(pool.fork(seq))
        elif op == "rewind":
            pool.rewind(seq, max(seq.length - back, 0))
        elif op == "release":
            pool.release(seq)
            live.remove(seq)
        else:
            prompt = seq.tokens + tokens
            hit = pool.match_prefix(prompt)
            assert hit.length % bt == 0 and hit.length <= max(len(prompt) - 1, 0)
            assert hit.tokens == prompt[: hit.length]
            live.append(hit)
        s = pool.stats()
        assert s["used"] + s["cached"] + s["free"] == blocks
        assert s["used"] == len({b for q in live for b in q.blocks})
        if live:
            past = max(q.length for q in live) + 1
            got = pool.gather(live, past)
            for name, (heads, size, dtype) in H_LAYERS.items():
                want = np.zeros((len(live), heads, past, size), dtype)
                for r, q in enumerate(live):
                    want[r, :, : q.length] = model.values(q.tokens, 0)[name]
                np.testing.assert_array_equal(got[name], want)


def test_trim_frees_every_unheld_block_and_keeps_the_held_ones() -> None:
    # One position of 1024 float32 per block: each block is a page of its own, so trimming releases whole pages.
    layers = {"past_key_values.0.key": (1, 1024, np.dtype(np.float32))}
    pool = KvPool(layers, 1, 8)
    rng = np.random.default_rng(7)
    kept, dropped = KvSequence(), KvSequence()
    kept_values = {"past_key_values.0.key": rng.standard_normal((1, 3, 1024)).astype(np.float32)}
    pool.reserve(kept, 3)
    pool.append(kept, [1, 2, 3], kept_values)
    pool.reserve(dropped, 4)
    pool.append(dropped, [9, 8, 7, 6], {"past_key_values.0.key": np.ones((1, 4, 1024), np.float32)})
    pool.release(dropped)
    assert pool.stats() == {"blocks": 8, "used": 3, "cached": 4, "free": 1}
    assert pool.block_bytes == 4096 and pool.nbytes == 8 * 4096
    assert pool.trim() == 5
    assert pool.stats() == {"blocks": 8, "used": 3, "cached": 0, "free": 5}
    assert pool.match_prefix([9, 8, 7, 6, 5]).length == 0  # the released prefix is forgotten with its pages
    np.testing.assert_array_equal(
        pool.gather([kept], 3)["past_key_values.0.key"][0], kept_values["past_key_values.0.key"]
    )
    again = KvSequence()
    pool.reserve(again, 5)  # every trimmed block is allocatable, and reads what is written into it
    fresh = {"past_key_values.0.key": rng.standard_normal((1, 5, 1024)).astype(np.float32)}
    pool.append(again, [4, 4, 4, 4, 4], fresh)
    np.testing.assert_array_equal(pool.gather([again], 5)["past_key_values.0.key"][0], fresh["past_key_values.0.key"])


def test_record_counts_positions_written_in_place_as_append_does() -> None:
    """A paged step writes its new positions through `storage` and the row's blocks, then `record` counts them:
    the pool then holds what `append` of the same values gives, prefix cache included; both need reserve()."""
    rng = np.random.default_rng(7)
    parts = [_values(rng, n) for n in (3, 6, 1)]
    pools = [KvPool(LAYERS, block_tokens=4, blocks=8) for _ in range(2)]
    rows = [pool.new_sequence() for pool in pools]
    tokens = list(range(10))
    start = 0
    for part in parts:
        n = next(iter(part.values())).shape[1]
        span = tokens[start : start + n]
        _add(pools[0], rows[0], span, part)
        pool, seq = pools[1], rows[1]
        if len(seq.blocks) * 4 < seq.length + n:  # no room reserved yet
            with pytest.raises(ValueError, match="reserve"):
                pool.record(seq, span)
        pool.reserve(seq, n)
        for name, values in part.items():
            for k in range(n):
                position = seq.length + k
                pool.storage(name)[seq.blocks[position // 4], :, position % 4] = values[:, k]
        pool.record(seq, span)
        start += n
    _assert_equal(_row(pools[1], rows[1]), _row(pools[0], rows[0]))
    assert rows[1].tokens == rows[0].tokens == tokens
    assert pools[1].match_prefix(tokens).length == pools[0].match_prefix(tokens).length == 8  # two full blocks
