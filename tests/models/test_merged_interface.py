"""A merged decoder whose interface declares `attention_mask` as the new tokens' length, as optimum's
merged decoders long did: the build says at once that the with-past branch can only run an empty past,
and the `interface` option re-declares the input so the file runs unedited.

The model is the tiny GPT-2's merged decoder (tests/models/tiny_gpt2/decoder_merged.onnxtext) with its
attention_mask declared `[batch_size, sequence_length]` instead of `[batch_size, attention_length]`:
that declaration, ONNX's dim_params being one value each, holds `past + new` (what the with-past
branch's attention mask must be) to `new`.  (tests/models/optimum/ holds a real optimum 1.24 merged
decoder, which declares `attention_mask_sequence_length` there.)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import loam
from loam.driver.draft import draft_layout
from loam.driver.options import Options
from loam.driver.pipeline import BuildResult

TINY = Path(__file__).resolve().parent / "tiny_gpt2"
CHECKPOINT = TINY / "tiny_gpt2.safetensors"
AS_OPTIMUM_DECLARED = "int64[batch_size,sequence_length] attention_mask"
REDECLARED = {"attention_mask": ("batch_size", "attention_length")}


def build(tmp_path: Path, interface: dict[str, tuple[str, ...]] | None = None) -> BuildResult:
    text = (TINY / "decoder_merged.onnxtext").read_text(encoding="utf-8")
    assert text.count("int64[batch_size,attention_length] attention_mask") == 1
    model = tmp_path / "decoder_merged.onnxtext"
    model.write_text(text.replace("int64[batch_size,attention_length] attention_mask", AS_OPTIMUM_DECLARED))
    options = Options(checkpoints=(CHECKPOINT,), interface=interface or {})
    return loam.build(model, options=draft_layout(model, options=options).options(options))


def steps(result: BuildResult, count: int) -> list[np.ndarray]:
    """The logits of the prompt and of `count` decode steps (each step's presents fed back)."""
    module = result.module
    weights = module.Weights.load(CHECKPOINT.read_bytes())
    expected = np.load(TINY / "expected.npz")
    past = {
        f"past_key_values_{i}_{kv}": np.zeros((1, 4, 0, 16), np.float32) for i in range(2) for kv in ("key", "value")
    }
    ids, use_past, logits = expected["prompt_ids"], False, []
    for step in range(count + 1):
        length = 7 + step
        out = module.forward(weights, ids, np.ones((1, length), np.int64), *past.values(), np.array([use_past]))
        logits.append(out.logits)
        past = {
            f"past_key_values_{i}_{kv}": getattr(out, f"present_{i}_{kv}") for i in range(2) for kv in ("key", "value")
        }
        if step < count:
            ids, use_past = expected["step_ids"][step].reshape(1, 1), True
    return logits


def test_the_build_says_the_with_past_branch_can_only_run_an_empty_past(tmp_path: Path) -> None:
    notes = [n for n in build(tmp_path).notes if "can only pass" in n]
    assert len(notes) == 1
    (note,) = notes
    assert "past_sequence_length = 0" in note and "subgraph 'with_past'" in note
    assert "attention_mask axis 1 (sequence_length)" in note and "past_key_values.0.key axis 2" in note
    assert "[interface]" in note


def test_the_run_refuses_a_decode_step_the_declaration_rules_out(tmp_path: Path) -> None:
    result = build(tmp_path)
    with pytest.raises(result.module.ShapeError, match=r"input 'attention_mask' axis 1 .* got 8"):
        steps(result, 1)


def test_the_interface_option_runs_the_file_unedited(tmp_path: Path) -> None:
    result = build(tmp_path, REDECLARED)
    assert not [n for n in result.notes if "can only pass" in n]
    expected = np.load(TINY / "expected.npz")
    logits = steps(result, 2)
    np.testing.assert_allclose(logits[0], expected["decoder_merged.logits.prompt"], rtol=1e-4, atol=1e-4)
    for step in (1, 2):
        np.testing.assert_allclose(logits[step], expected[f"decoder_merged.logits.step{step}"], rtol=1e-4, atol=1e-4)
