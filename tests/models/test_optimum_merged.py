"""optimum 1.24's legacy merged GPT-2 decoder (tests/models/optimum/decoder_model_merged.onnx) and the drafter.

The no-past branch builds its causal mask as a square from one Range (`arange(S) < (arange(S) + 1).view(S, 1)`,
so name-axes names both of its axes alike) and meets it with `attention_mask` expanded to
[batch, 1, sequence_length, attention_mask_sequence_length]: the operators make that tensor's axes 2 and 3 one
axis, while stage 0 gives them two lengths it only owes equal.  No layout names that tensor, so the drafter
says which tensor and which node, instead of drafting a layout the build rejects.  Building and running the
file (a prompt step through the branch without a past, two decode steps through the one with) needs stage 0 to
give a branch one length where it owes two equal; until then that test is a strict xfail.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from loam.draft import draft_layout
from loam.errors import AxisError

MODEL = Path(__file__).parent / "optimum" / "decoder_model_merged.onnx"
LAYERS = 2

pytestmark = pytest.mark.xdist_group("optimum_merged")


def test_the_draft_names_the_tensor_no_layout_can_name() -> None:
    with pytest.raises(
        AxisError,
        match=r"graph 'no_past', tensor '/transformer/Expand_1_output_0': axes 2 and 3 are one axis to the "
        r"operators \(Where node '/transformer/Where_4' makes them one\), but stage 0 gives them lengths "
        r"sequence_length and attention_mask_sequence_length",
    ):
        draft_layout(MODEL)


@pytest.mark.xfail(
    raises=AxisError,
    strict=True,
    reason="the no-past branch's expanded mask is one axis at two lengths stage 0 only owes equal",
)
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
