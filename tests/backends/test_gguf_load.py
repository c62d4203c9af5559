"""GGUF checkpoints at load time: `Weights.load` / `load_file` read a GGUF file, dequantizing its tensors.

The GGUF bytes are written here from the format's definition (a minimal v3 writer), and the
quantized blocks are encoded and decoded here from ggml's block definitions, one element at a time,
so the module's vectorised pieces are held to an independent reading of Q8_0, Q4_0 and Q4_1.
"""

from __future__ import annotations

import struct
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from loam.runtime.dequant import bf16_to_f32, dequantized
from tests.backends.printing import load, t

RNG = np.random.default_rng(7)
GGML = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q8_0": 8, "BF16": 30}


def gguf_string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def gguf_file(tensors: dict[str, tuple[str, tuple[int, ...], bytes]], alignment: int = 32) -> bytes:
    """A GGUF v3 file: one metadata entry, then `tensors` (name -> (ggml type, numpy shape, bytes))."""
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), 1)
    head += gguf_string("general.architecture") + struct.pack("<I", 8) + gguf_string("test")
    data = b""
    for name, (kind, shape, raw) in tensors.items():
        data += bytes(-len(data) % alignment)
        dims = shape[::-1]  # GGUF lists the fastest-varying dimension first
        head += gguf_string(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
        head += struct.pack("<IQ", GGML[kind], len(data))
        data += raw
    return head + bytes(-len(head) % alignment) + data


# -- ggml's blocks, one element at a time ---------------------------------------------------------


def quantize(kind: str, x: np.ndarray) -> bytes:
    """`x` (a multiple of 32 floats) in ggml block format `kind`."""
    out = b""
    for block in x.reshape(-1, 32).astype(np.float32):
        if kind == "Q8_0":
            d = np.float16(np.abs(block).max() / 127)
            q = np.round(block / np.float32(d)).astype(np.int8)
            out += struct.pack("<e", d) + q.tobytes()
        else:
            low, high = (block.min(), block.max()) if kind == "Q4_1" else (-np.abs(block).max(), np.abs(block).max())
            d = np.float16((high - low) / 15)
            if kind == "Q4_0":
                q = [int(np.clip(np.round(v / np.float32(d)) + 8, 0, 15)) for v in block]
                out += struct.pack("<e", d)
            else:
                q = [int(np.clip(np.round((v - low) / np.float32(d)), 0, 15)) for v in block]
                out += struct.pack("<ee", d, np.float16(low))
            out += bytes(q[j] | (q[j + 16] << 4) for j in range(16))
    return out


def dequantize_reference(kind: str, raw: bytes) -> np.ndarray:
    """ggml's dequantize_row_* for `kind`, element by element, in float32."""
    size = {"Q8_0": 34, "Q4_0": 18, "Q4_1": 20}[kind]
    values: list[np.float32] = []
    for start in range(0, len(raw), size):
        block = raw[start : start + size]
        d = np.float32(np.frombuffer(block[:2], "<f2")[0])
        if kind == "Q8_0":
            values += [d * np.float32(q) for q in np.frombuffer(block[2:], np.int8)]
            continue
        m = np.float32(np.frombuffer(block[2:4], "<f2")[0]) if kind == "Q4_1" else None
        qs = block[4:] if kind == "Q4_1" else block[2:]
        nibbles = [b & 0x0F for b in qs] + [b >> 4 for b in qs]
        for q in nibbles:
            values.append(d * np.float32(q) + m if m is not None else d * np.float32(q - 8))
    return np.array(values, dtype=np.float32)


@pytest.mark.parametrize("kind", ["Q8_0", "Q4_0", "Q4_1"])
def test_dequantization_matches_the_block_definitions(kind: str) -> None:
    x = RNG.standard_normal(32 * 5).astype(np.float32)
    raw = quantize(kind, x)
    got = dequantized(kind, raw, x.size)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, dequantize_reference(kind, raw))
    # and the quantization is real: within a step of the values it encodes
    step = np.abs(x).max() / (127 if kind == "Q8_0" else 7)
    assert np.abs(got - x).max() <= step


@pytest.mark.parametrize("kind", ["Q8_0", "Q4_0", "Q4_1"])
def test_the_gguf_package_agrees(kind: str) -> None:
    """llama.cpp's own Python quantizer and dequantizer (the `gguf` package) as the oracle."""
    import gguf
    from gguf import quants

    x = RNG.standard_normal((4, 64)).astype(np.float32)
    qtype = getattr(gguf.GGMLQuantizationType, kind)
    theirs = np.asarray(quants.quantize(x, qtype), np.uint8)
    np.testing.assert_array_equal(
        dequantized(kind, theirs.reshape(-1), x.size), quants.dequantize(theirs, qtype).reshape(-1)
    )
    ours = np.frombuffer(quantize(kind, x.reshape(-1)), np.uint8)
    np.testing.assert_array_equal(dequantized(kind, ours, x.size), quants.dequantize(ours, qtype).reshape(-1))


def test_bf16_bits_widen_exactly() -> None:
    x = RNG.standard_normal(10).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(bf16_to_f32(x.tobytes()), x.astype(np.float32))


# -- a module loading a GGUF file ---------------------------------------------------------------

SHAPE = (2, 64)
NAMES = ("f32", "f16", "bf16", "q8", "q40", "q41")
W32, W16 = t("f32", "Row: 2, Col: 64"), t("f16", "Row: 2, Col: 64")
PROGRAM = f"""
kernel.program "forward" () names [] attributes {{model = "gguf"}} {{
{"".join(f'  %{n} = kernel.weight "blk.{n}" : {W32}{chr(10)}' for n in NAMES)}  %half = kernel.weight "blk.half" : {W16}
  kernel.return {", ".join(f"%{n}" for n in NAMES)}, %half names [{", ".join(f'"{n}"' for n in NAMES)}, "half"]
      : {", ".join([W32] * len(NAMES))}, {W16}
}}
"""


def checkpoint() -> tuple[bytes, dict[str, np.ndarray]]:
    """A GGUF file holding each encoding, and the float32 (float16 for 'half') values it stands for."""
    x = {n: RNG.standard_normal(SHAPE).astype(np.float32) for n in (*NAMES, "half")}
    bf16 = x["bf16"].astype(ml_dtypes.bfloat16)
    tensors = {
        "blk.f32": ("F32", SHAPE, x["f32"].tobytes()),
        "blk.f16": ("F16", SHAPE, x["f16"].astype("<f2").tobytes()),
        "blk.bf16": ("BF16", SHAPE, bf16.tobytes()),
        "blk.q8": ("Q8_0", SHAPE, quantize("Q8_0", x["q8"])),
        "blk.q40": ("Q4_0", SHAPE, quantize("Q4_0", x["q40"])),
        "blk.q41": ("Q4_1", SHAPE, quantize("Q4_1", x["q41"])),
        "blk.half": ("F16", SHAPE, x["half"].astype("<f2").tobytes()),
    }
    want = {
        "f32": x["f32"],
        "f16": x["f16"].astype(np.float16).astype(np.float32),
        "bf16": bf16.astype(np.float32),
        **{
            n: dequantize_reference(k, tensors[f"blk.{n}"][2]).reshape(SHAPE)
            for n, k in (("q8", "Q8_0"), ("q40", "Q4_0"), ("q41", "Q4_1"))
        },
        "half": x["half"].astype(np.float16),
    }
    return gguf_file(tensors), want


def test_weights_load_reads_and_dequantizes_a_gguf_file(tmp_path: Path) -> None:
    mod = load(PROGRAM, tmp_path)
    data, want = checkpoint()
    (tmp_path / "model.gguf").write_bytes(data)
    for weights in (mod.Weights.load(data), mod.Weights.load_file(tmp_path / "model.gguf")):
        out = mod.forward(weights)
        for name in (*NAMES, "half"):
            got = getattr(out, name)
            assert got.dtype == want[name].dtype, name
            np.testing.assert_array_equal(got, want[name], err_msg=name)
        # F32 read as f32, and F16 read as f16, are views of the file's bytes (GGUF aligns them).
        assert not weights.blk_f32.flags.owndata and not weights.blk_half.flags.owndata
        assert weights.stored("blk.q8").dtype == np.uint8  # a quantized tensor is kept as its blocks


def test_gguf_names_map_through_the_checkpoint_name_rules(tmp_path: Path) -> None:
    mod = load(PROGRAM, tmp_path)
    data, want = checkpoint()
    renamed = data.replace(b"blk.", b"lyr.")  # every name, same length: offsets are unchanged
    with pytest.raises(mod.LoadError, match=r"tensor 'blk\.f32' is missing from the checkpoint"):
        mod.Weights.load(renamed)
    # The build attaches the `[checkpoint_names]` rules to the IR; the module renames by them at load.
    ruled = load(
        f'builtin.module attributes {{loam.checkpoint_names = [["lyr.*", "blk.*"]]}} {{{PROGRAM}}}', tmp_path, "ruled"
    )
    assert ruled.Weights._CHECKPOINT_NAMES == (("lyr.*", "blk.*"),)
    np.testing.assert_array_equal(ruled.forward(ruled.Weights.load(renamed)).q41, want["q41"])


def test_a_truncated_gguf_file_names_the_first_tensor_it_cannot_read(tmp_path: Path) -> None:
    mod = load(PROGRAM, tmp_path)
    data, _ = checkpoint()
    cut = data[: len(data) - 2 * 64 * 2 - 40]  # into blk.q41, the next to last tensor
    with pytest.raises(mod.LoadError, match=r"tensor 'blk.q41' needs bytes \d+\.\.\d+ of the file, which ends"):
        mod.Weights.load(cut)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            ("blk.q8", "Q5_0", SHAPE, bytes(2 * 2 * 22)),
            "tensor 'blk.q8' is Q5_0 in the checkpoint, which this module cannot read",
        ),
        (
            ("blk.q8", "Q8_0", (2, 32), bytes(2 * 34)),
            "tensor 'blk.q8' axis 1 (Col) is 64 in the graph, 32 in the checkpoint",
        ),
        (
            ("blk.half", "F32", SHAPE, bytes(2 * 64 * 4)),
            "tensor 'blk.half' is F32 in the checkpoint; the graph reads float16",
        ),
    ],
)
def test_gguf_tensors_are_checked_against_the_graph(tmp_path: Path, change: tuple, message: str) -> None:
    mod = load(PROGRAM, tmp_path)
    _, want = checkpoint()
    name, kind, shape, raw = change
    tensors = {f"blk.{n}": ("F32", SHAPE, want["f32"].tobytes()) for n in NAMES}
    tensors["blk.half"] = ("F16", SHAPE, want["half"].tobytes())
    tensors[name] = (kind, shape, raw)
    with pytest.raises(mod.LoadError) as info:
        mod.Weights.load(gguf_file(tensors))
    assert message in str(info.value)


def test_a_bad_gguf_header_is_a_load_error(tmp_path: Path) -> None:
    mod = load(PROGRAM, tmp_path)
    with pytest.raises(mod.LoadError, match="not a GGUF file Loam reads"):
        mod.Weights.load(b"GGUF" + struct.pack("<IQQ", 9, 0, 0))


def test_the_build_s_name_rules_reach_the_module() -> None:
    from xdsl.dialects.builtin import ArrayAttr, StringAttr
    from xdsl.parser import Parser

    from loam.backends.numpy_module import emit_python
    from loam.frontends.context import make_context

    module = Parser(make_context(), PROGRAM).parse_module()
    rule = ArrayAttr([StringAttr("lyr.*"), StringAttr("blk.*")])
    module.attributes["loam.checkpoint_names"] = ArrayAttr([rule])
    assert "_CHECKPOINT_NAMES = (('lyr.*', 'blk.*'),)" in emit_python(module)
