"""The tiny GPT-2 (tests/models/tiny_gpt2): three exported decoders built by Loam reproduce onnxruntime.

Each graph is built from its text form against the committed safetensors checkpoint, with the layout
`loam layout` drafts for it, unedited (tests/models/tiny_gpt2/*.loam.toml are those drafts, and the
first test checks they are what the drafter writes today).  The oracle is `expected.npz`, written by
scripts/export_tiny_gpt2.py from onnxruntime's outputs (graph optimizations off); its README lists
the keys.  Loam must match it within atol 1e-4:

- (a) the decoder without a past, at sequence lengths 4 and 7 and at batch 2;
- (b) the decoder with a past, for two decode steps after the 7-token prompt;
- (c) the merged decoder: the prompt in one pass through the branch without a past, each later token
  through the branch with one;
- greedy decoding of 20 tokens through (a)+(b) and through (c) picks onnxruntime's tokens;
- a sequence longer than the 128-position context raises `ShapeError` naming the owed condition.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from loam.driver.draft import draft_layout
from loam.driver.options import Options
from loam.driver.pipeline import build

HERE = Path(__file__).parent / "tiny_gpt2"
CHECKPOINT = HERE / "tiny_gpt2.safetensors"
GRAPHS = ("decoder", "decoder_with_past", "decoder_merged")
ATOL = 1e-4
LAYERS = 2

pytestmark = pytest.mark.xdist_group("tiny_gpt2")


@functools.cache
def expected() -> dict[str, np.ndarray]:
    with np.load(HERE / "expected.npz") as data:
        return {k: data[k] for k in data.files}


@functools.cache
def built(graph: str) -> tuple[ModuleType, object]:
    """The generated module for `graph`, built with its committed drafted layout, and its weights."""
    options = Options.from_toml(HERE / f"{graph}.loam.toml")
    result = build(HERE / f"{graph}.onnxtext", checkpoints=[CHECKPOINT], options=options)
    module = result.module
    return module, module.Weights.load(CHECKPOINT.read_bytes())


def mask(batch: int, length: int) -> np.ndarray:
    return np.ones((batch, length), dtype=np.int64)


def empty_past(batch: int = 1) -> dict[str, np.ndarray]:
    return {
        f"past_key_values.{i}.{kv}": np.zeros((batch, 4, 0, 16), np.float32)
        for i in range(LAYERS)
        for kv in ("key", "value")
    }


def presents(out: object) -> dict[str, np.ndarray]:
    """The presents of one call, keyed as the next call's past inputs."""
    return {
        f"past_key_values.{i}.{kv}": getattr(out, f"present_{i}_{kv}") for i in range(LAYERS) for kv in ("key", "value")
    }


def call(graph: str, **inputs: np.ndarray) -> object:
    module, weights = built(graph)
    import inspect

    names = [n for n, p in inspect.signature(module.forward).parameters.items() if p.kind is p.POSITIONAL_OR_KEYWORD][
        1:
    ]
    by_ident = {re.sub(r"\W", "_", k): v for k, v in inputs.items()}
    return module.forward(weights, *[by_ident[n] for n in names])


def close(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=0, atol=ATOL)


@pytest.mark.parametrize("graph", GRAPHS)
def test_the_committed_layout_is_the_drafters(graph: str) -> None:
    """`loam layout` drafts this layout, and `loam build` compiles the graph with it unedited."""
    draft = draft_layout(HERE / f"{graph}.onnxtext")
    assert (HERE / f"{graph}.loam.toml").read_text() == draft.toml()


@pytest.mark.parametrize("length", [4, 7])
def test_decoder_logits(length: int) -> None:
    ids = expected()["prompt_ids"][:, :length]
    out = call("decoder", input_ids=ids, attention_mask=mask(1, length))
    close(out.logits, expected()[f"decoder.logits.len{length}"])
    if length == 7:
        for name, value in presents(out).items():
            key = name.replace("past_key_values", "decoder.present") + ".len7"
            close(value, expected()[key])


def test_decoder_batch_two() -> None:
    ids = expected()["batch2_ids"]
    out = call("decoder", input_ids=ids, attention_mask=mask(2, 4))
    close(out.logits, expected()["decoder.logits.batch2"])


def test_decoder_with_past_two_steps() -> None:
    e = expected()
    past = {k.replace("decoder.present", "past_key_values")[: -len(".len7")]: v for k, v in e.items()
            if k.startswith("decoder.present.") and k.endswith(".len7")}  # fmt: skip
    for step in (1, 2):
        ids = e["step_ids"][step - 1].reshape(1, 1)
        out = call("decoder_with_past", input_ids=ids, attention_mask=mask(1, 7 + step), **past)
        close(out.logits, e[f"decoder_with_past.logits.step{step}"])
        past = presents(out)
    for name, value in past.items():
        close(value, e[name.replace("past_key_values", "decoder_with_past.present") + ".step2"])


def test_merged_reads_the_prompt_in_one_pass_then_each_token_through_the_past_branch() -> None:
    e = expected()
    out = call(
        "decoder_merged",
        input_ids=e["prompt_ids"],
        attention_mask=mask(1, 7),
        use_cache_branch=np.array([False]),
        **empty_past(),
    )
    close(out.logits, e["decoder_merged.logits.prompt"])
    past = presents(out)
    for step in (1, 2):
        ids = e["step_ids"][step - 1].reshape(1, 1)
        out = call(
            "decoder_merged",
            input_ids=ids,
            attention_mask=mask(1, 7 + step),
            use_cache_branch=np.array([True]),
            **past,
        )
        close(out.logits, e[f"decoder_merged.logits.step{step}"])
        past = presents(out)


def greedy(first: str, later: str, *, merged: bool) -> list[int]:
    e = expected()
    ids = e["prompt_ids"]
    extra = {"use_cache_branch": np.array([False]), **empty_past()} if merged else {}
    out = call(first, input_ids=ids, attention_mask=mask(1, ids.shape[1]), **extra)
    tokens = [int(np.argmax(out.logits[0, -1]))]
    past, length = presents(out), ids.shape[1]
    while len(tokens) < 20:
        length += 1
        extra = {"use_cache_branch": np.array([True])} if merged else {}
        step = np.array([[tokens[-1]]], dtype=np.int64)
        out = call(later, input_ids=step, attention_mask=mask(1, length), **past, **extra)
        tokens.append(int(np.argmax(out.logits[0, -1])))
        past = presents(out)
    return tokens


def test_greedy_decoding_picks_onnxruntimes_tokens() -> None:
    want = expected()["greedy_ids"].tolist()
    assert greedy("decoder", "decoder_with_past", merged=False) == want
    assert greedy("decoder_merged", "decoder_merged", merged=True) == want


@pytest.mark.parametrize("graph", ["decoder", "decoder_merged"])
def test_a_sequence_longer_than_the_context_is_refused(graph: str) -> None:
    module, _ = built(graph)
    ids = np.zeros((1, 130), dtype=np.int64)
    extra = {"use_cache_branch": np.array([False]), **empty_past()} if graph == "decoder_merged" else {}
    with pytest.raises(module.ShapeError, match=r"<= 128 \(.*node '.*'\).*gives sequence_length = 130"):
        call(graph, input_ids=ids, attention_mask=mask(1, 130), **extra)


def test_the_gpt2_table_builds_the_export_with_no_layout_from_a_hugging_face_checkpoint(tmp_path: Path) -> None:
    """`architecture = "gpt2"`: Hugging Face's checkpoint names (no `transformer.` prefix) map onto the
    export's, the table names the inputs' and weights' axes, and the rest is drafted; no layout given."""
    from safetensors.numpy import load_file, save_file

    hf = tmp_path / "model.safetensors"
    save_file({k.removeprefix("transformer."): v for k, v in load_file(CHECKPOINT).items()}, str(hf))
    e = expected()
    result = build(HERE / "decoder.onnxtext", options=Options(checkpoints=(hf,), architecture="gpt2"))
    assert result.notes == []
    assert "('input_ids', 'int64', (None, None))" in result.source and "class Vocab" in result.source
    module = result.module
    ids = e["prompt_ids"]
    out = module.forward(module.Weights.load_file(str(hf)), ids, mask(1, 7))
    close(out.logits, e["decoder.logits.len7"])
