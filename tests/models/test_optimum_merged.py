"""optimum 1.24's legacy merged GPT-2 decoder (tests/models/optimum/decoder_model_merged.onnx) and the drafter.

The no-past branch builds its causal mask as a square from one Range (`arange(S) < (arange(S) + 1).view(S, 1)`,
so name-axes names both of its axes alike) and meets it with `attention_mask` expanded to
[batch, 1, sequence_length, attention_mask_sequence_length]: the operators make that tensor's axes 2 and 3 one
axis.  Stage 0 owes the branch `attention_mask_sequence_length == sequence_length` (checked at its top) and,
since both are input symbols, reads one as the other everywhere in the branch (an outer value read there
goes through a `shape_poly.alias`), so the axis has one length and the drafter names it.  The file then
builds and runs a prompt step through the branch without a past and two decode steps through the one with;
a mask of another length than the prompt still stops the run at the owed check.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from loam.driver.draft import draft_layout

MODEL = Path(__file__).parent / "optimum" / "decoder_model_merged.onnx"
LAYERS = 2

pytestmark = pytest.mark.xdist_group("optimum_merged")


def test_the_draft_names_the_no_past_branch_at_one_length() -> None:
    draft = draft_layout(MODEL)
    assert draft.rules


def test_a_prompt_and_two_decode_steps_match_onnxruntime() -> None:
    from loam.testing import assert_same, build_for, run_built, run_onnxruntime

    model = onnx.load(MODEL)
    built = build_for(model)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 256, (2, 4)).astype(np.int64)
    names = [f"past_key_values.{i}.{kv}" for i in range(LAYERS) for kv in ("key", "value")]
    past = {name: np.zeros((2, 4, 0, 8), np.float32) for name in names}
    length = 0
    for step in range(3):
        length += ids.shape[1]
        feeds = {
            "input_ids": ids,
            "attention_mask": np.ones((2, length), np.int64),
            **past,
            "use_cache_branch": np.array([step > 0]),
        }
        got = run_built(built, feeds)
        assert_same(got, run_onnxruntime(model, feeds), rtol=1e-4, atol=1e-5)
        ids = np.argmax(got[0][:, -1], -1)[:, None].astype(np.int64)
        past = dict(zip(names, got[1:], strict=True))


def test_a_mask_longer_than_the_prompt_stops_the_run_without_a_past() -> None:
    from loam.testing import build_for, run_built

    built = build_for(onnx.load(MODEL))
    names = [f"past_key_values.{i}.{kv}" for i in range(LAYERS) for kv in ("key", "value")]
    feeds = {
        "input_ids": np.zeros((2, 4), np.int64),
        "attention_mask": np.ones((2, 5), np.int64),
        **{name: np.zeros((2, 4, 0, 8), np.float32) for name in names},
        "use_cache_branch": np.array([False]),
    }
    with pytest.raises(Exception, match=r"attention_mask_sequence_length == sequence_length") as caught:
        run_built(built, feeds)
    assert type(caught.value).__name__ == "ShapeError"
