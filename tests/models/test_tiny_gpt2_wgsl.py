# ruff: noqa: E501 - kernel programs are written one op per line
"""The tiny GPT-2 decoders through the WGSL backend: every kernel on the device (llvmpipe in CI).

The same oracle as `test_tiny_gpt2.py` (onnxruntime's outputs in `expected.npz`, atol 1e-4), the
same greedy tokens, and the device counters: after the first call with a binding of the extents,
only the inputs go up and the outputs come down.  The merged decoder branches with `If` on an input,
which forward decides on the host before dispatching the branch's kernels.
"""

from __future__ import annotations

import functools
import inspect
import re
from types import ModuleType

import numpy as np
import pytest

from loam.driver.options import Options
from loam.driver.pipeline import build
from tests.models.test_tiny_gpt2 import CHECKPOINT, HERE, close, expected, mask, presents

pytest.importorskip("wgpu")
pytestmark = pytest.mark.xdist_group("tiny_gpt2")


@functools.cache
def built(graph: str) -> tuple[ModuleType, object, object]:
    """The WGSL module for `graph`, its weights, and its build's device summary."""
    options = Options.from_toml(HERE / f"{graph}.loam.toml")
    source = HERE / f"{graph}.onnxtext"
    result = build(source, checkpoints=[CHECKPOINT], options=options, backend="wgsl", fuse="dispatch")
    assert result.fusion is not None
    return result.module, result.module.Weights.load(CHECKPOINT.read_bytes()), result.fusion.device


def call(graph: str, **inputs: np.ndarray) -> object:
    module, weights, _ = built(graph)
    names = [n for n, p in inspect.signature(module.forward).parameters.items() if p.kind is p.POSITIONAL_OR_KEYWORD][
        1:
    ]
    by_ident = {re.sub(r"\W", "_", k): v for k, v in inputs.items()}
    return module.forward(weights, *[by_ident[n] for n in names])


@pytest.mark.parametrize("length", [4, 7])
def test_decoder_logits_on_the_device(length: int) -> None:
    ids = expected()["prompt_ids"][:, :length]
    out = call("decoder", input_ids=ids, attention_mask=mask(1, length))
    close(out.logits, expected()[f"decoder.logits.len{length}"])
    for name, value in presents(out).items():
        if length == 7:
            close(value, expected()[name.replace("past_key_values", "decoder.present") + ".len7"])


def test_decoder_with_past_steps_on_the_device_move_only_inputs_and_outputs() -> None:
    e = expected()
    past = {k.replace("decoder.present", "past_key_values")[: -len(".len7")]: v for k, v in e.items()
            if k.startswith("decoder.present.") and k.endswith(".len7")}  # fmt: skip
    module, _, device = built("decoder_with_past")
    g = module._gpu()
    for step in (1, 2):
        ids = e["step_ids"][step - 1].reshape(1, 1)
        inputs = {"input_ids": ids, "attention_mask": mask(1, 7 + step), **past}
        call("decoder_with_past", **inputs)  # the first call with this binding makes its buffers
        before = dict(g.stats)
        out = call("decoder_with_past", **inputs)
        moved = {k: g.stats[k] - before[k] for k in before}
        up = sum(v.size * 4 for v in inputs.values())  # i64 travels as i32
        down = sum(np.asarray(v).size * 4 for v in out)
        assert moved == {"dispatches": device.dispatches, "bytes_up": up, "bytes_down": down, "forwards": 1}
        close(out.logits, e[f"decoder_with_past.logits.step{step}"])
        past = presents(out)


def test_greedy_decoding_on_the_device_picks_onnxruntimes_tokens() -> None:
    e = expected()
    ids = e["prompt_ids"]
    out = call("decoder", input_ids=ids, attention_mask=mask(1, ids.shape[1]))
    tokens = [int(np.argmax(out.logits[0, -1]))]
    past, length = presents(out), ids.shape[1]
    while len(tokens) < 20:
        length += 1
        step = np.array([[tokens[-1]]], dtype=np.int64)
        out = call("decoder_with_past", input_ids=step, attention_mask=mask(1, length), **past)
        tokens.append(int(np.argmax(out.logits[0, -1])))
        past = presents(out)
    assert tokens == e["greedy_ids"].tolist()


def test_the_merged_decoder_decides_its_if_on_the_host() -> None:
    """The merged graph's If reads the input use_cache_branch: forward picks the branch on the host
    and dispatches only its kernels; the prompt, then two steps through the past, match onnxruntime."""
    e = expected()
    past = {
        f"past_key_values.{i}.{kv}": np.zeros((1, 4, 0, 16), np.float32) for i in range(2) for kv in ("key", "value")
    }
    out = call(
        "decoder_merged",
        input_ids=e["prompt_ids"],
        attention_mask=mask(1, 7),
        use_cache_branch=np.array([False]),
        **past,
    )
    close(out.logits, e["decoder_merged.logits.prompt"])
    past = presents(out)
    for step in (1, 2):
        ids = e["step_ids"][step - 1].reshape(1, 1)
        out = call(
            "decoder_merged", input_ids=ids, attention_mask=mask(1, 7 + step), use_cache_branch=np.array([True]), **past
        )
        close(out.logits, e[f"decoder_merged.logits.step{step}"])
        past = presents(out)
    for name, value in past.items():
        assert value.shape == (1, 4, 9, 16), name  # the length the taken branch gave, bound after the If


def test_an_if_whose_condition_the_device_computes_reads_it_back() -> None:
    text = """
kernel.program "forward" (%x : !tensor_axes.tensor<f32, [N: 3]>) names ["x"] {
  %c = kernel.zip(%x) #kernel.expr<[operand 0, const 0.0 : f32, greater 0 1]> {node = "positive"} : (!tensor_axes.tensor<f32, [N: 3]>) -> !tensor_axes.tensor<bool, [N: 3]>
  %y = "kernel.if"(%c) <{node = "/branch"}> ({
    kernel.yield %x : !tensor_axes.tensor<f32, [N: 3]>
  }, {
    kernel.yield %x : !tensor_axes.tensor<f32, [N: 3]>
  }) : (!tensor_axes.tensor<bool, [N: 3]>) -> !tensor_axes.tensor<f32, [N: 3]>
  kernel.return %y names ["y"] : !tensor_axes.tensor<f32, [N: 3]>
}
"""
    from xdsl.parser import Parser

    from loam.backends.wgsl_module import emit_wgsl
    from loam.frontends.context import make_context

    module = Parser(make_context(), text).parse_module()
    source = emit_wgsl(module)
    assert "_read, = g.sync(((_b[1], 'bool', (3,)),))  # If node '/branch': its condition, read back" in source
