"""Decoders written by torch's default exporter (`torch.onnx.export(..., dynamo=True)`) run prompt and
decode steps as onnxruntime runs them.

The files come from scripts/export_dynamo_decoders.py (tiny GPT-2 and Llama, random weights, the past as
flat tensors).  Each test builds the file as downloaded (a drafted layout, no options), then runs a greedy
loop: the prompt with an empty past, then decode steps that feed each step's presents back as the past,
comparing every output with onnxruntime's on the same inputs and the chosen tokens with its choices.
On WGSL (fused for dispatch, no host fallback) every kernel must run on the device, GatherND included.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import onnx
import pytest

from loam.driver.pipeline import BuildResult
from loam.testing import assert_same, build_for, run_built, run_onnxruntime

DYNAMO = Path(__file__).resolve().parent / "dynamo"


DECODERS = [("gpt2_decoder", 4), ("llama_decoder", 2)]


@pytest.mark.parametrize(("name", "kv_heads"), DECODERS)
def test_a_dynamo_export_decodes_like_onnxruntime(name: str, kv_heads: int) -> None:
    model = onnx.load(DYNAMO / f"{name}.onnx")
    ops = {n.op_type for n in model.graph.node}
    assert "GatherND" in ops and model.opset_import[0].version >= 18  # what the dynamo exporter writes
    decode_like_onnxruntime(model, build_for(model), kv_heads)


@pytest.mark.parametrize(("name", "kv_heads"), DECODERS)
def test_a_dynamo_export_decodes_on_the_device_with_no_host_kernel(name: str, kv_heads: int) -> None:
    pytest.importorskip("wgpu")
    model = onnx.load(DYNAMO / f"{name}.onnx")
    built = build_for(model, backend="wgsl", fuse="dispatch")  # no host fallback: a kernel without WGSL stops it
    assert built.fusion is not None and built.fusion.device.host == ()  # no i64 arithmetic on the host either
    decode_like_onnxruntime(model, built, kv_heads)


def decode_like_onnxruntime(model: onnx.ModelProto, built: BuildResult, kv_heads: int) -> None:
    """The greedy loop over `built`: a prompt of 5 tokens for 2 sequences, then 3 decode steps, each
    output held to onnxruntime's and each chosen token to its choice."""
    layers = sum(1 for i in model.graph.input if i.name.startswith("past_key_values")) // 2
    rng = np.random.default_rng(7)
    ids = rng.integers(0, 256, (2, 5)).astype(np.int64)
    past = {
        f"past_key_values.{i}.{kv}": np.zeros((2, kv_heads, 0, 8), np.float32)
        for i in range(layers)
        for kv in ("key", "value")
    }
    length, last = 0, []
    for _ in range(4):
        length += ids.shape[1]
        feeds = {"input_ids": ids, "attention_mask": np.ones((2, length), np.int64), **past}
        want = run_onnxruntime(model, feeds)
        got = run_built(built, feeds)
        assert_same(got, want, rtol=1e-4, atol=1e-5)
        assert got[1].shape[2] == length  # the present grew by the step's tokens
        chosen = np.argmax(got[0][:, -1, :], axis=-1)
        np.testing.assert_array_equal(chosen, np.argmax(want[0][:, -1, :], axis=-1))
        last.append(got[0][:, -1, :])
        ids = chosen[:, None].astype(np.int64)
        past = {p: v for p, v in zip(past, got[1:], strict=True)}
    assert not any(np.allclose(a, b) for a, b in itertools.pairwise(last))  # each step saw a longer past
