"""Paged KV-state store for serving decoder LLMs: conversations as rows of retained key/value state.

A decoder module takes, per layer, `past_key_values.N.key` / `.value` inputs shaped [batch, heads, past, head_size]
and returns `present.N.*` with the new positions appended.  Keeping each conversation's past as one growing array
would copy it on every step and waste the tail of every over-allocation; instead (vLLM's PagedAttention idea, on
numpy) the state lives in a pool of fixed-size blocks of `block_tokens` positions, a `KvSequence` lists the blocks
that hold its positions in order.  A step either reads the blocks in place (`storage`: a paged step's attention
reads them through each row's block table and its appends write the new positions, which `record` then counts) or
has `gather` assemble a zero-padded past for its cohort of rows.

Blocks are reference counted, so a forked conversation (beam, retry, branch) shares its parent's blocks until it
writes: writing into a block anyone else can read first copies it (copy-on-write).  Every block that fills up is
published in a prefix cache under the whole token chain that led to it, so a later prompt that starts with the same
tokens reuses the state instead of recomputing it (`match_prefix`).  Published blocks no sequence holds stay cached
and are evicted least-recently-used first when allocation runs out of free blocks.

Every block is in exactly one state: held (reference count > 0, possibly also published), cached (published,
unheld, in the LRU) or free.  Not thread-safe: the engine serializes calls.
"""

from __future__ import annotations

import mmap
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from loam.core.errors import LoamError

# A prefix-cache key: (parent key, this block's tokens), rooted at ().  Nesting makes equal block contents after
# different prefixes different keys while each key stores only its own block's tokens (the parent is shared).
_Key = tuple


class PoolExhausted(LoamError):
    """The pool has fewer allocatable blocks than an operation needs; nothing was changed."""


@dataclass(eq=False)
class KvSequence:
    """One conversation's retained state: its tokens and the pool blocks holding their KV, in order.

    `blocks` has ceil(length / block_tokens) entries, plus any that `KvPool.reserve` allocated ahead of `append`.
    Compared by identity: two conversations with equal tokens are still two rows.
    """

    tokens: list[int] = field(default_factory=list)
    blocks: list[int] = field(default_factory=list)

    @property
    def length(self) -> int:
        return len(self.tokens)


def _untouched_zeros(shape: tuple[int, ...], dtype: np.dtype) -> tuple[np.ndarray, mmap.mmap | None]:
    """Zeros in an anonymous mapping of their own, whose pages the kernel provides only as they are first written.

    np.zeros usually gives the same, but through the C allocator, which may hand back memory it had given before
    and must then clear, page by page: a pool sized for every row at full context would be resident from the
    start (a test saw all 260 MiB of one so).  A pool's memory must grow with the blocks written, whatever the
    allocator did before.  The mapping is returned too: `KvPool.trim` gives its unused pages back.
    """
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    if nbytes == 0:
        return np.zeros(shape, dtype), None
    pages = mmap.mmap(-1, nbytes)
    return np.frombuffer(pages, dtype).reshape(shape), pages


class KvPool:
    """A fixed pool of KV blocks for a set of past inputs, with sharing, copy-on-write and prefix caching."""

    def __init__(self, layers: Mapping[str, tuple[int, int, np.dtype]], block_tokens: int, blocks: int) -> None:
        if block_tokens < 1:
            raise ValueError(f"block_tokens must be at least 1, not {block_tokens}")
        if blocks < 0:
            raise ValueError(f"blocks must not be negative, not {blocks}")
        self.block_tokens = block_tokens
        self.capacity = blocks
        self._layers = {name: (heads, size, np.dtype(dtype)) for name, (heads, size, dtype) in layers.items()}
        mapped = {
            name: _untouched_zeros((blocks, heads, block_tokens, size), dtype)
            for name, (heads, size, dtype) in self._layers.items()
        }
        self._arrays = {name: array for name, (array, _) in mapped.items()}
        self._maps = {name: pages for name, (_, pages) in mapped.items()}
        self._refs = [0] * blocks
        # Popped from the end, so block 0 goes first: deterministic and easy to read in a debugger.
        self._free = list(range(blocks - 1, -1, -1))
        self._lru: OrderedDict[int, None] = OrderedDict()  # cached blocks, least recently released first
        self._cache: dict[_Key, int] = {}
        self._key_of: dict[int, _Key] = {}

    # -- queries ------------------------------------------------------------------------------------------------

    def available(self) -> int:
        """Blocks allocatable now: the free ones plus the cached ones no sequence holds (evictable)."""
        return len(self._free) + len(self._lru)

    @property
    def block_bytes(self) -> int:
        """The bytes of one block over every past input."""
        return sum(heads * self.block_tokens * size * dtype.itemsize for heads, size, dtype in self._layers.values())

    @property
    def nbytes(self) -> int:
        """The bytes of the whole pool, every block written."""
        return self.capacity * self.block_bytes

    def trim(self) -> int:
        """Give the pages of every block no sequence holds back to the system: cached blocks are evicted (their
        prefix entries go) and every free block's pages are released (`madvise(MADV_DONTNEED)`: the mapping
        stays, and reads as zeros until written).  Held blocks, a session's included, are untouched.  Returns
        how many blocks are free."""
        while self._lru:
            block, _ = self._lru.popitem(last=False)
            self._unpublish(block)
            self._free.append(block)
        self._free.sort(reverse=True)  # the lowest block goes first, as at the start
        runs: list[tuple[int, int]] = []  # [first, end) runs of free blocks
        for block in sorted(self._free):
            if runs and runs[-1][1] == block:
                runs[-1] = (runs[-1][0], block + 1)
            else:
                runs.append((block, block + 1))
        for name, pages in self._maps.items():
            if pages is None or not hasattr(pages, "madvise"):
                continue
            size = self._arrays[name][0].nbytes
            for first, end in runs:
                start = -(-first * size // mmap.PAGESIZE) * mmap.PAGESIZE  # whole pages inside the run only
                stop = end * size // mmap.PAGESIZE * mmap.PAGESIZE
                if stop > start:
                    pages.madvise(mmap.MADV_DONTNEED, start, stop - start)
        return len(self._free)

    def stats(self) -> dict[str, int]:
        used = sum(1 for r in self._refs if r)
        return {"blocks": self.capacity, "used": used, "cached": len(self._lru), "free": len(self._free)}

    # -- sequences ----------------------------------------------------------------------------------------------

    def new_sequence(self) -> KvSequence:
        return KvSequence()

    def match_prefix(self, tokens: Sequence[int]) -> KvSequence:
        """A new sequence sharing the longest run of cached full blocks that `tokens` starts with.

        At most len(tokens) - 1 positions are matched: the caller must still run the last token to get its output.
        """
        bt = self.block_tokens
        found: list[int] = []
        key: _Key = ()
        for i in range(max(len(tokens) - 1, 0) // bt):
            key = (key, tuple(tokens[i * bt : (i + 1) * bt]))
            block = self._cache.get(key)
            if block is None:
                break
            found.append(block)
        for block in found:
            self._take(block)
        return KvSequence(list(tokens[: len(found) * bt]), found)

    def fork(self, seq: KvSequence) -> KvSequence:
        """A new sequence sharing seq's blocks (not its reserved ones): no copy until one of them writes."""
        blocks = seq.blocks[: self._blocks_for(seq.length)]
        for block in blocks:
            self._take(block)
        return KvSequence(list(seq.tokens), list(blocks))

    def rewind(self, seq: KvSequence, length: int) -> None:
        """Truncate seq to its first `length` tokens, releasing the blocks past them (reserved ones too)."""
        if not 0 <= length <= seq.length:
            raise ValueError(f"cannot rewind a sequence of length {seq.length} to {length}")
        keep = self._blocks_for(length)
        self._drop_all(seq.blocks[keep:])
        del seq.blocks[keep:]
        del seq.tokens[length:]

    def release(self, seq: KvSequence) -> None:
        """Drop all of seq's blocks; published ones stay cached (evictable) until allocation needs them."""
        self._drop_all(seq.blocks)
        seq.blocks.clear()
        seq.tokens.clear()

    # -- writing ------------------------------------------------------------------------------------------------

    def reserve(self, seq: KvSequence, count: int) -> None:
        """Make room to append `count` tokens to seq; raise PoolExhausted, changing nothing, if it cannot."""
        if count < 0:
            raise ValueError(f"cannot reserve {count} tokens")
        length = seq.length
        grow = max(self._blocks_for(length + count) - len(seq.blocks), 0)
        partial = length // self.block_tokens if length % self.block_tokens and count else None
        shared = partial is not None and self._refs[seq.blocks[partial]] > 1
        published = partial is not None and seq.blocks[partial] in self._key_of
        copy = shared or published
        wanted = grow + copy
        if wanted > self.available():
            if not shared and published and grow <= self.available():
                # Only the cache can read the block: unpublishing it makes it ours without a copy (losing
                # the cache entry beats failing the request).
                assert partial is not None  # a published block is the partial one
                self._unpublish(seq.blocks[partial])
                copy = False
            else:
                raise PoolExhausted(
                    f"KV pool exhausted: {wanted} block(s) wanted, {self.available()} available "
                    f"of {self.capacity} ({len(self._free)} free, {len(self._lru)} cached)"
                )
        if copy:
            assert partial is not None  # only a partial block is copied
            old, new = seq.blocks[partial], self._allocate()
            used = length % self.block_tokens
            for array in self._arrays.values():
                array[new, :, :used] = array[old, :, :used]
            seq.blocks[partial] = new
            self._drop(old)
        for _ in range(grow):
            seq.blocks.append(self._allocate())

    def append(self, seq: KvSequence, tokens: Sequence[int], values: Mapping[str, np.ndarray]) -> None:
        """Write the KV of `tokens` (values[name]: [heads, len(tokens), head_size]) after seq's last position.

        Requires `reserve(seq, len(tokens))` first.  Every block this fills is published in the prefix cache.
        """
        bt, start, n = self.block_tokens, seq.length, len(tokens)
        if set(values) != set(self._layers):
            raise ValueError(f"values name {sorted(values)}, the pool holds {sorted(self._layers)}")
        for name, (heads, size, _) in self._layers.items():
            if values[name].shape != (heads, n, size):
                raise ValueError(f"values[{name!r}] has shape {values[name].shape}, expected {(heads, n, size)}")
        if n == 0:
            return
        self._check_reserved(seq, n)
        pos = start
        while pos < start + n:
            block, offset = seq.blocks[pos // bt], pos % bt
            m = min(bt - offset, start + n - pos)
            for name, array in self._arrays.items():
                array[block, :, offset : offset + m] = values[name][:, pos - start : pos - start + m]
            pos += m
        seq.tokens.extend(tokens)
        self._publish(seq, start // bt, (start + n) // bt)

    def record(self, seq: KvSequence, tokens: Sequence[int]) -> None:
        """`append` of `tokens` whose KV a paged call already wrote into seq's reserved positions (through
        `storage` and seq's blocks): seq's tokens grow and every block they fill is published."""
        bt, start, n = self.block_tokens, seq.length, len(tokens)
        if n == 0:
            return
        self._check_reserved(seq, n)
        seq.tokens.extend(tokens)
        self._publish(seq, start // bt, (start + n) // bt)

    def layer(self, name: str) -> tuple[int, int, np.dtype]:
        """Layer `name`'s heads, head size and dtype."""
        return self._layers[name]

    def storage(self, name: str) -> np.ndarray:
        """The pool's blocks of layer `name`, [blocks, heads, block_tokens, head_size] (C-contiguous): position p
        of a sequence is row p % block_tokens of block seq.blocks[p // block_tokens]."""
        return self._arrays[name]

    def _check_reserved(self, seq: KvSequence, n: int) -> None:
        """Raise unless seq may write n positions after its last: reserved blocks, its partial one its own."""
        bt, start = self.block_tokens, seq.length
        if len(seq.blocks) < self._blocks_for(start + n):
            raise ValueError(f"append of {n} token(s) without reserve(): {len(seq.blocks)} block(s) held")
        if start % bt:
            block = seq.blocks[start // bt]
            if self._refs[block] != 1 or block in self._key_of:
                raise ValueError("append into a shared or published block without reserve()")

    def gather(
        self, rows: Sequence[KvSequence], past: int, into: Mapping[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        """name -> [len(rows), heads, past, head_size]: each row's positions from its blocks, zeros after.

        `into` gives the arrays to fill (a DecodeState's views, reused from call to call) instead of new ones.
        """
        for r, seq in enumerate(rows):
            if seq.length > past:
                raise ValueError(f"row {r} has {seq.length} positions, more than past={past}")
        out: dict[str, np.ndarray] = {}
        for name, (heads, size, dtype) in self._layers.items():
            result = np.zeros((len(rows), heads, past, size), dtype) if into is None else into[name]
            if result.shape != (len(rows), heads, past, size):
                raise ValueError(f"into[{name!r}] has shape {result.shape}, expected {(len(rows), heads, past, size)}")
            array, bt = self._arrays[name], self.block_tokens
            for r, seq in enumerate(rows):
                full, tail = divmod(seq.length, bt)
                if full:
                    # The full blocks [full, heads, bt, size] straight into [heads, full * bt, size], one copy: the
                    # positions axis splits into (blocks, bt) as a view, whatever the array's capacity beyond them.
                    target = result[r, :, : full * bt].reshape(heads, full, bt, size)
                    assert np.may_share_memory(target, result), "the gather's target must be a view"
                    target[...] = array[seq.blocks[:full]].transpose(1, 0, 2, 3)
                if tail:
                    result[r, :, full * bt : seq.length] = array[seq.blocks[full], :, :tail]
                if into is not None:
                    result[r, :, seq.length :] = 0  # a reused array holds an earlier call's rows
            out[name] = result
        return out

    # -- block bookkeeping --------------------------------------------------------------------------------------

    def _blocks_for(self, length: int) -> int:
        return -(-length // self.block_tokens)

    def _take(self, block: int) -> None:
        if self._refs[block] == 0:
            self._lru.pop(block, None)
        self._refs[block] += 1

    def _drop(self, block: int) -> None:
        self._refs[block] -= 1
        if self._refs[block] == 0:
            if block in self._key_of:
                self._lru[block] = None
            else:
                self._free.append(block)

    def _drop_all(self, blocks: list[int]) -> None:
        # Last block first, so a chain's tail is older in the LRU and is evicted before its prefix: evicting a
        # prefix block would make every cached block after it unreachable anyway.
        for block in reversed(blocks):
            self._drop(block)

    def _allocate(self) -> int:
        if self._free:
            block = self._free.pop()
        elif self._lru:
            block, _ = self._lru.popitem(last=False)
            self._unpublish(block)
        else:
            raise PoolExhausted(f"KV pool exhausted: 1 block wanted, 0 available of {self.capacity}")
        self._refs[block] = 1
        return block

    def _unpublish(self, block: int) -> None:
        del self._cache[self._key_of.pop(block)]

    def _publish(self, seq: KvSequence, first: int, end: int) -> None:
        """Publish seq's full blocks first..end-1 under their token chains, keeping any equal entry already there."""
        if first >= end:
            return
        bt = self.block_tokens
        key: _Key = ()
        for i in range(end):
            key = (key, tuple(seq.tokens[i * bt : (i + 1) * bt]))
            if i >= first and key not in self._cache:
                block = seq.blocks[i]
                self._cache[key] = block
                self._key_of[block] = key
