"""A seeded mutator over the bytes of an input file: byte-level edits for every format, token-level edits
for text formats.

`mutate(data, seed, text=...)` is a pure function of its arguments, so a crash is reproduced from the
reader's name, the seed input and the mutation seed alone.  Byte edits: bit flips, byte sets (to 0, 0xff,
0x7f, 0x80 or a random value), truncation, insertion of random or "interesting" bytes, deletion of a
range and duplication of a chunk.  Token edits (text formats): delete or duplicate a line, change a
number (to 0, -1, a huge one, another digit), or replace a name with non-UTF-8 bytes, a Python builtin or
a huge number.
"""

from __future__ import annotations

import random
import re

INTERESTING_BYTES = (0x00, 0xFF, 0x7F, 0x80, 0x01, 0xFE)
INTERESTING_CHUNKS = (
    b"\xff\xfe",
    b"\x80",
    b"\xc3\x28",  # an invalid UTF-8 sequence
    b"\x00",
    b"\xff\xff\xff\xff\xff\xff\xff\x7f",
    b"\x00\x00\x00\x80",
)
NUMBERS = (
    b"0",
    b"-1",
    b"1",
    b"2147483648",
    b"9223372036854775808",
    b"1" + b"0" * 30,
    b"-9223372036854775809",
    b"1e309",
)
NAMES = (b"\xff\xfe", b"\xc3\x28", b"__import__", b"print", b"None", b"int", b"exec", b"1" + b"0" * 25, b"", b"x" * 300)
_NUMBER = re.compile(rb"-?\d+")
_NAME = re.compile(rb"[A-Za-z_][A-Za-z0-9_.]*")


def _byte_edit(data: bytearray, rng: random.Random) -> None:
    how = rng.randrange(6)
    n = len(data)
    if how == 0 and n:  # bit flip
        i = rng.randrange(n)
        data[i] ^= 1 << rng.randrange(8)
    elif how == 1 and n:  # byte set
        data[rng.randrange(n)] = rng.choice(INTERESTING_BYTES) if rng.random() < 0.5 else rng.randrange(256)
    elif how == 2 and n:  # truncation
        del data[rng.randrange(n) :]
    elif how == 3:  # insertion
        chunk = (
            rng.choice(INTERESTING_CHUNKS)
            if rng.random() < 0.5
            else bytes(rng.randrange(256) for _ in range(rng.randrange(1, 9)))
        )
        i = rng.randrange(n + 1)
        data[i:i] = chunk
    elif how == 4 and n:  # deletion of a range
        i = rng.randrange(n)
        del data[i : i + rng.randrange(1, 17)]
    elif n:  # duplication of a chunk
        i = rng.randrange(n)
        chunk = data[i : i + rng.randrange(1, 33)]
        j = rng.randrange(n + 1)
        data[j:j] = chunk


def _token_edit(data: bytearray, rng: random.Random) -> None:
    lines = bytes(data).split(b"\n")
    how = rng.randrange(4)
    if how == 0 and len(lines) > 1:  # delete a line
        del lines[rng.randrange(len(lines))]
        data[:] = b"\n".join(lines)
        return
    if how == 1:  # duplicate a line
        i = rng.randrange(len(lines))
        lines.insert(rng.randrange(len(lines) + 1), lines[i])
        data[:] = b"\n".join(lines)
        return
    pattern = _NUMBER if how == 2 else _NAME
    matches = list(pattern.finditer(bytes(data)))
    if not matches:
        _byte_edit(data, rng)
        return
    m = rng.choice(matches)
    if how == 2:
        new = rng.choice(NUMBERS) if rng.random() < 0.7 else str(rng.randrange(10)).encode()
    else:
        new = rng.choice(NAMES + NUMBERS[3:6])
    data[m.start() : m.end()] = new


def mutate(data: bytes, seed: int, *, text: bool = False) -> bytes:
    """`data` with one to three seeded edits (token edits for half of them when `text`)."""
    rng = random.Random(seed)
    out = bytearray(data)
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        if text and rng.random() < 0.5:
            _token_edit(out, rng)
        else:
            _byte_edit(out, rng)
    return bytes(out)
