"""SmolLM2-135M-Instruct from its GGUF file, in the page: packed Q4 weights on the device, greedy tokens.

The browser module of the with-past decoder (the Llama table, no layout) keeps every Q4_1 and Q8_0
weight as its blocks from the GGUF file to the device; the page decodes greedily from the chat
prompt, the prompt through an empty past and then one token at a time, and its first tokens are
onnxruntime's (tests/models/smollm2/oracle.json).  SwiftShader is slow, so the count stays small.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loam.backends.browser_module import write_browser_module
from loam.driver.options import Options
from loam.driver.pipeline import build
from loam.tools.browser_run import Browser
from tests.backends.browser.test_browser_models import GREEDY
from tests.smollm2_file import smollm2_gguf

pytestmark = pytest.mark.xdist_group("browser")

HERE = Path(__file__).resolve().parents[2] / "models" / "smollm2"
ORACLE = json.loads((HERE / "oracle.json").read_text(encoding="utf-8"))
TOKENS = 8


def test_smollm2_decodes_onnxruntimes_tokens_in_the_page_from_packed_blocks(browser: Browser, served: Path) -> None:
    gguf = smollm2_gguf()
    result = build(
        HERE / "decoder_with_past.onnxtext", options=Options(checkpoints=(gguf,), architecture="llama"),
        backend="wgsl", fuse="dispatch",
    )  # fmt: skip
    assert result.fusion is not None
    device = result.fusion.device
    assert not device.host, device.host  # every kernel on the device
    # Device bytes of the weights: the GGUF's blocks as stored (its tensor bytes; the file also holds the tokenizer).
    tensor_bytes = sum(t["bytes"] for t in _gguf_tensors(gguf))
    assert int(device.resident) <= 1.25 * tensor_bytes
    write_browser_module(served / "smollm2", result.source, result.module, [gguf], "smollm2")
    shards = sorted((served / "smollm2" / "weights").glob("shard-*.safetensors"))
    assert all(p.stat().st_size <= 16 * 2**20 for p in shards)
    assert sum(p.stat().st_size for p in shards) <= 1.25 * tensor_bytes
    prompt = next(p for p in ORACLE["prompts"] if p["name"] == "chat_france")
    ran = browser.script(
        GREEDY, browser.base + "smollm2/model.js", browser.base + "smollm2/weights/", prompt["prompt_ids"], TOKENS
    )
    assert isinstance(ran, dict) and ran["ok"], ran
    assert ran["tokens"] == prompt["onnxruntime_ids"][:TOKENS]


def _gguf_tensors(path: Path) -> list[dict[str, int]]:
    """Each tensor's stored bytes, from the GGUF header alone."""
    from loam.runtime.gguf import parse_gguf_header

    with open(path, "rb") as f:
        _, tensors = parse_gguf_header(f.read())
    return [{"bytes": int(entry[3])} for entry in tensors.values()]
