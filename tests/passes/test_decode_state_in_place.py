"""decode-state-in-place: a decoder's forward_in_place keeps its past in a DecodeState and gives the
numbers forward gives, without copying the past.

The tiny GPT-2 exported with its past (tests/models/tiny_gpt2) is built as a user builds it.  Its
plain forward, fed each step's presents as the next step's pasts, is the reference (its own tests
hold it to onnxruntime); forward_in_place must equal it bit for bit over a prompt and decode steps,
at batch 1 and 2, after a rewind, and in a state whose capacity the steps fill exactly.  Memory: a
step in place allocates a small fraction of what the pasts hold, where the plain step allocates at
least all of it again (its Concats), counted by tracemalloc, which numpy reports its buffers to.
"""

from __future__ import annotations

import functools
import tracemalloc
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from loam.driver.options import Options
from loam.driver.pipeline import build

HERE = Path(__file__).parents[1] / "models" / "tiny_gpt2"
CHECKPOINT = HERE / "tiny_gpt2.safetensors"
PASTS = [f"past_key_values.{i}.{kv}" for i in range(2) for kv in ("key", "value")]

pytestmark = pytest.mark.xdist_group("tiny_gpt2")


@functools.cache
def built(graph: str) -> tuple[ModuleType, object, tuple[str, ...]]:
    """The module for `graph` with its committed layout, its weights, and its build notes."""
    result = build(
        HERE / f"{graph}.onnxtext", checkpoints=[CHECKPOINT], options=Options.from_toml(HERE / f"{graph}.loam.toml")
    )
    module = result.module
    return module, module.Weights.load(CHECKPOINT.read_bytes()), tuple(result.notes)


def step_inputs(module: ModuleType, ids: np.ndarray, past: int) -> list[np.ndarray]:
    """The inputs other than the pasts for `ids` after `past` positions, in forward's order."""
    batch, count = ids.shape
    feeds = {
        "input_ids": ids,
        "attention_mask": np.ones((batch, past + count), np.int64),
        "position_ids": np.broadcast_to(np.arange(past, past + count), (batch, count)).copy(),
    }
    return [feeds[name] for name, _, _ in module.INPUTS if name not in PASTS]


def plain_step(module: ModuleType, weights: object, ids: np.ndarray, pasts: dict[str, np.ndarray]) -> object:
    given = iter(step_inputs(module, ids, pasts[PASTS[0]].shape[2]))
    return module.forward(weights, *[pasts[name] if name in pasts else next(given) for name, _, _ in module.INPUTS])


def presents(module: ModuleType, out: object) -> dict[str, np.ndarray]:
    return {past: out[module.OUTPUTS.index(present)] for past, present, _, _ in module.DECODE_STATE}


def test_the_build_notes_each_past_kept_in_place() -> None:
    module, _, notes = built("decoder_positions")
    [note] = [n for n in notes if n.startswith("decode state in place")]
    assert "4 past input(s)" in note and "'past_key_values.0.key' -> 'present.0.key'" in note
    assert [(past, present, axis) for past, present, axis, _ in module.DECODE_STATE] == [
        (p, p.replace("past_key_values", "present"), 2) for p in PASTS
    ]
    assert {extents for *_, extents in module.DECODE_STATE} == {("batch_size", 4, None, 16)}


@pytest.mark.parametrize("graph", ["decoder_positions", "decoder_with_past"])
@pytest.mark.parametrize("batch", [1, 2])
def test_steps_in_place_equal_the_plain_steps_bit_for_bit(graph: str, batch: int) -> None:
    module, weights, _ = built(graph)
    rng = np.random.default_rng(batch)
    state = module.DecodeState(7 + 6, batch_size=batch)  # the prompt and six steps fill it exactly
    pasts = {name: np.zeros((batch, 4, 0, 16), np.float32) for name in PASTS}
    ids = rng.integers(0, 1000, (batch, 7))
    for _ in range(7):
        plain = plain_step(module, weights, ids, pasts)
        if graph == "decoder_with_past" and state.length == 0:
            given = step_inputs(module, ids, 0)
        else:
            given = step_inputs(module, ids, state.length)
        in_place = module.forward_in_place(weights, state, *given)
        assert np.array_equal(plain.logits, in_place.logits)
        for name, value in presents(module, in_place).items():
            assert np.array_equal(value, presents(module, plain)[name])
            assert np.shares_memory(value, state.past(name))  # the state's view, not a copy
        pasts = presents(module, plain)
        ids = plain.logits[:, -1].argmax(-1)[:, None]
    assert state.length == 13
    for name in PASTS:
        assert np.array_equal(state.past(name), pasts[name])


def test_a_rewound_state_steps_as_the_truncated_past_does() -> None:
    module, weights, _ = built("decoder_positions")
    state = module.DecodeState(32, batch_size=1)
    module.forward_in_place(weights, state, *step_inputs(module, np.arange(10)[None], 0))
    state.rewind(6)
    pasts = {name: state.past(name).copy() for name in PASTS}
    ids = np.array([[42, 43]])
    plain = plain_step(module, weights, ids, pasts)
    in_place = module.forward_in_place(weights, state, *step_inputs(module, ids, 6))
    assert state.length == 8 and np.array_equal(plain.logits, in_place.logits)
    with pytest.raises(module.ShapeError, match="cannot rewind 8 positions to 9"):
        state.rewind(9)


def test_a_step_in_place_allocates_a_fraction_of_the_past_the_plain_step_copies() -> None:
    module, weights, _ = built("decoder_positions")
    past = 120
    state = module.DecodeState(128, batch_size=4)
    rng = np.random.default_rng(0)
    module.forward_in_place(weights, state, *step_inputs(module, rng.integers(0, 1000, (4, past)), 0))
    pasts = {name: state.past(name).copy() for name in PASTS}
    held = sum(p.nbytes for p in pasts.values())
    ids = rng.integers(0, 1000, (4, 1))

    def peak(run: object) -> int:
        tracemalloc.start()
        try:
            run()  # type: ignore[operator]
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    plain = peak(lambda: plain_step(module, weights, ids, pasts))
    in_place = peak(lambda: module.forward_in_place(weights, state, *step_inputs(module, ids, past)))
    assert plain >= held and in_place < held / 4, (held, plain, in_place)


def test_the_state_refuses_what_it_cannot_hold_naming_it() -> None:
    module, weights, _ = built("decoder_positions")
    with pytest.raises(
        module.ShapeError, match=r"give batch_size=N, the extent of input 'past_key_values.0.key' axis 0"
    ):
        module.DecodeState(16)
    with pytest.raises(
        module.ShapeError, match=r"'heads' is not an extent of a state input \(those are \['batch_size'\]\)"
    ):
        module.DecodeState(16, batch_size=1, heads=4)
    with pytest.raises(module.ShapeError, match="capacity must be a positive int"):
        module.DecodeState(0, batch_size=1)
    state = module.DecodeState(8, batch_size=1)
    module.forward_in_place(weights, state, *step_inputs(module, np.arange(6)[None], 0))
    with pytest.raises(
        module.ShapeError,
        match=r"'past_key_values.0.key' axis 2: 6 positions and 3 new ones exceed the DecodeState's capacity of 8",
    ):
        module.forward_in_place(weights, state, *step_inputs(module, np.arange(3)[None], 6))
    assert state.length == 6  # the refused step changed nothing the state holds
    with pytest.raises(module.ShapeError, match="'input_ids'"):
        module.forward_in_place(
            weights, state, np.zeros((1, 1), np.int32), *step_inputs(module, np.arange(1)[None], 6)[1:]
        )


def test_generate_s_decoder_steps_in_place_growing_its_state_and_equals_the_plain_decoder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from loam.text import generate

    module, weights, _ = built("decoder_positions")
    monkeypatch.setattr(generate, "STATE_CAPACITY", 4)  # the prompt alone outgrows it: the state doubles
    logits = {}
    for in_place in (True, False):
        decoder = generate.Decoder(module, weights, in_place=in_place)
        assert (decoder.state is not None) is in_place
        steps = [decoder.step([5, 6, 7, 8, 9, 10])]
        for token in (11, 12, 13):
            steps.append(decoder.step([token]))
        decoder.rewind(7)
        steps.append(decoder.step([40, 41]))
        assert decoder.length == 9 and decoder.past[PASTS[0]].shape == (1, 4, 9, 16)
        logits[in_place] = steps
    assert all(np.array_equal(a, b) for a, b in zip(logits[True], logits[False], strict=True))


PAST_READ_ELSEWHERE = """<ir_version: 8, opset_import: ["" : 17]>
g (float[b, 2, p, 4] "past_key_values.0.key", float[b, 2, 1, 4] new)
    => (float[b, 2, "p + 1", 4] "present.0.key", float[b] total) {
    "present.0.key" = Concat <axis = 2> ("past_key_values.0.key", new)
    total = ReduceMax <axes = [1, 2, 3], keepdims = 0> ("present.0.key")
}
"""

LAYOUT = """[[layout]]
pattern = "past_key_values.0.key"
axes = ["b", "Heads", "p", "Size"]

[[layout]]
pattern = "new"
axes = ["b", "Heads", "New", "Size"]

[[layout]]
pattern = "present.0.key"
axes = ["b", "Heads", "Joined", "Size"]
"""


def test_a_module_lets_a_state_page_its_pasts_only_where_the_fused_attention_alone_reads_them(
    tmp_path: Path,
) -> None:
    """PAGED_PASTS: true for the tiny GPT-2 (each joined past read only by its kernel.attention), false for a
    decoder whose joined past a ReduceMax also reads (a paged state's placeholders would give it zeros)."""
    assert built("decoder_with_past")[0].PAGED_PASTS is True
    graph = tmp_path / "summed.onnxtext"
    graph.write_text(PAST_READ_ELSEWHERE, encoding="utf-8")
    (tmp_path / "summed.loam.toml").write_text(LAYOUT, encoding="utf-8")
    module = build(graph, options=Options.from_toml(tmp_path / "summed.loam.toml")).module
    assert [name for name, *_ in module.DECODE_STATE] == ["past_key_values.0.key"]
    assert module.PAGED_PASTS is False
    past = np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4)
    new = np.ones((1, 2, 1, 4), np.float32)
    weights = module.Weights()  # a graph of inputs only
    _, total = module.forward(weights, past, new)
    assert float(total[0]) == 23.0  # the past's largest value, read by the ReduceMax
