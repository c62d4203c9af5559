"""Decoding a checkpoint tensor's stored bytes into numbers: ggml's block quantizations and bfloat16.

`Weights.load` in a generated module reads a GGUF checkpoint whose tensors may be stored quantized;
these pieces turn such a tensor's raw bytes into float32 once, when `Weights` is built (never per
call to `forward`).  Like the rest of `loam.runtime`, each piece is a self-contained top-level
function whose source is copied into the module, reading only numpy, the builtins and the other
pieces; each is vectorised over whole blocks, with no loop per element.

The block formats, as ggml defines them (`ggml-quants.c`), 32 elements per block, little-endian:

- `Q8_0`: f16 scale `d`, then 32 int8 `q`; element j is `d * q[j]`.
- `Q4_0`: f16 `d`, then 16 bytes of nibbles; element j < 16 is the low nibble of byte j, element
  16 + j its high nibble, each read as `d * (nibble - 8)`.
- `Q4_1`: f16 `d`, f16 minimum `m`, then 16 bytes of nibbles as in Q4_0, each read as `d * nibble + m`.

ggml computes each in float32 (the f16 scales widened first), and so do these pieces.
`bf16_to_f32` widens bfloat16 bits without ml_dtypes: a bfloat16 is the top half of a float32.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def block_dtype(encoding: str) -> np.dtype:
    """The numpy dtype of one block of ggml encoding `encoding` (`Q8_0`, `Q4_0`, `Q4_1`)."""
    if encoding == "Q8_0":
        return np.dtype([("d", "<f2"), ("q", "i1", (32,))])
    if encoding == "Q4_0":
        return np.dtype([("d", "<f2"), ("qs", "u1", (16,))])
    if encoding == "Q4_1":
        return np.dtype([("d", "<f2"), ("m", "<f2"), ("qs", "u1", (16,))])
    raise ValueError(f"no dequantization for {encoding}")


def block_integers(blocks: np.ndarray) -> np.ndarray:
    """The integers of blocks [..., B] (a `block_dtype` array) as float32 [..., B, 32]: Q8_0's int8,
    Q4's nibbles (0..15); what each block's scale multiplies (and, for Q4_0, its offset 8 shifts)."""
    out = np.empty((*blocks.shape, 32), np.float32)
    names = blocks.dtype.names
    assert names is not None, "blocks of a block_dtype"
    if "q" in names:  # Q8_0
        out[...] = blocks["q"]
    else:
        qs = blocks["qs"]
        # Elements 0..15 are the low nibbles of the 16 bytes, 16..31 the high ones; each ufunc writes
        # its uint8 result straight into the float32 buffer, with no temporary of its own.
        np.bitwise_and(qs, 0x0F, out=out[..., :16], casting="unsafe")
        np.right_shift(qs, 4, out=out[..., 16:], casting="unsafe")
    return out


def dequant_blocks(blocks: np.ndarray) -> np.ndarray:
    """Blocks of any shape [..., B] (a `block_dtype` array) as float32 elements [..., B * 32]."""
    out = block_integers(blocks)
    d = blocks["d"].astype(np.float32)[..., None]
    names = blocks.dtype.names
    assert names is not None, "blocks of a block_dtype"
    if "m" in names:  # Q4_1: d * q + m
        out *= d
        out += blocks["m"].astype(np.float32)[..., None]
    elif "qs" in names:  # Q4_0: d * (q - 8)
        out -= np.float32(8)
        out *= d
    else:  # Q8_0: d * q
        out *= d
    return out.reshape(*blocks.shape[:-1], blocks.shape[-1] * 32)


def dequantized(encoding: str, raw: bytes | memoryview, count: int) -> np.ndarray:
    """The `count` float32 elements of a ggml-quantized tensor (`Q8_0`, `Q4_0`, `Q4_1`) stored in `raw`.

    The caller has checked that `raw` holds exactly `count / 32` whole blocks.
    """
    return dequant_blocks(np.frombuffer(raw, dtype=block_dtype(encoding))).reshape(-1)[:count]


def bf16_to_f32(raw: bytes | memoryview) -> np.ndarray:
    """bfloat16 values stored in `raw` (little-endian), widened exactly to float32."""
    bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << np.uint32(16)
    return bits.view(np.float32)


# Elements per block and bytes per block of the encodings `dequantized` reads.
QUANT_BLOCKS: dict[str, tuple[int, int]] = {"Q8_0": (32, 34), "Q4_0": (32, 18), "Q4_1": (32, 20)}

PIECES: dict[str, Callable[..., object]] = {
    "block_dtype": block_dtype,
    "block_integers": block_integers,
    "dequant_blocks": dequant_blocks,
    "dequantized": dequantized,
    "bf16_to_f32": bf16_to_f32,
}
