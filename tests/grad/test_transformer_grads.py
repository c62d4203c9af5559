"""Attention models' gradients against torch autograd: the tiny GPT-2 (decoder without past: embeddings,
layer norms, fused QKV split, causal attention, tanh GELU, presents) and the tiny BERT (padding mask,
token types, erf GELU, the pooler's first token), on numpy and WGSL.

scripts/make_grad_oracles.py wrote tests/grad/transformer_grads.npz with torch from the same weights:
the seeded upstream gradients, each small weight's whole gradient and each large one's norm and its dot
products with 8 seeded random tensors, which `projections` draws again here.
"""

from __future__ import annotations

import zlib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from loam.driver.options import Options
from loam.driver.pipeline import build

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "tests" / "models"


def projections(name: str, shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(zlib.crc32(name.encode())).standard_normal((8, *shape))


def build_gpt2(backend: str) -> tuple[object, list[str], dict[str, np.ndarray]]:
    here = MODELS / "tiny_gpt2"
    options = replace(Options.from_toml(here / "decoder.loam.toml"), checkpoints=(here / "tiny_gpt2.safetensors",))
    ids = np.load(here / "expected.npz")["batch2_ids"]
    module = build(here / "decoder.onnxtext", options=options, grad=(), backend=backend, fuse=_fuse(backend)).module
    return module, [str(c) for c in options.checkpoints], {"input_ids": ids, "attention_mask": np.ones_like(ids)}


def build_bert(backend: str) -> tuple[object, list[str], dict[str, np.ndarray]]:
    here = MODELS / "tiny_bert"
    checkpoints = (here / "hf_model.safetensors", here / "tiny_bert.safetensors")
    options = Options(checkpoints=checkpoints, architecture="bert")
    expected = np.load(here / "expected.npz")
    inputs = {k: expected[f"set1.{k}"] for k in ("input_ids", "attention_mask", "token_type_ids")}
    module = build(here / "encoder.onnxtext", options=options, grad=(), backend=backend, fuse=_fuse(backend)).module
    return module, [str(c) for c in checkpoints], inputs


def _fuse(backend: str) -> str:
    return "dispatch" if backend == "wgsl" else "memory"


@pytest.mark.parametrize("backend", ["numpy", "wgsl"])
@pytest.mark.parametrize("model", ["gpt2", "bert"])
def test_the_gradients_of_every_weight_are_torch_autograds(model: str, backend: str) -> None:
    if backend == "wgsl":
        pytest.importorskip("wgpu")
    module, checkpoints, inputs = (build_gpt2 if model == "gpt2" else build_bert)(backend)
    weights = module.Weights.load_file(checkpoints)  # type: ignore[attr-defined]
    with np.load(Path(__file__).parent / "transformer_grads.npz") as oracle:
        want = {k.removeprefix(f"{model}."): oracle[k] for k in oracle.files if k.startswith(f"{model}.")}
    names = [n for n in module.OUTPUTS if not n.startswith("grad.")]  # type: ignore[attr-defined]
    assert sorted(names) == sorted(k.removeprefix("g.") for k in want if k.startswith("g."))
    model_inputs = [n for n, *_ in module.INPUTS if not n.startswith("grad.")]  # type: ignore[attr-defined]
    outputs, grads = module.forward_backward(  # type: ignore[attr-defined]
        weights, *(inputs[n] for n in model_inputs), *(want[f"g.{n}"] for n in names)
    )
    assert len(outputs) == len(names)  # the forward's outputs come back beside the gradients
    graph_names = [n.removeprefix("grad.") for n in module.OUTPUTS if n.startswith("grad.")]  # type: ignore[attr-defined]
    got = dict(zip(graph_names, grads, strict=True))
    torch_names = {k.split(".", 1)[1] for k in want if k.startswith(("grad.", "norm."))}
    assert set(got) == torch_names, set(got) ^ torch_names
    # A gradient that is zero in exact arithmetic (a key bias: softmax ignores a constant added to a row) is
    # float32 noise in both: it is held to the model's largest gradient, not its own.
    largest = max(float(np.abs(v).max()) for k, v in want.items() if k.startswith("grad."))
    for name, value in got.items():
        value = np.asarray(value, np.float64)
        if f"grad.{name}" in want:
            expected = want[f"grad.{name}"]
            atol = 1e-4 * float(np.abs(expected).max()) + 1e-6 * largest
            np.testing.assert_allclose(value, expected, rtol=1e-3, atol=atol, err_msg=name)
            continue
        norm = float(want[f"norm.{name}"])
        assert abs(np.linalg.norm(value) - norm) <= 1e-4 * norm + 1e-6, (name, np.linalg.norm(value), norm)
        dots = (projections(name, value.shape) * value).reshape(8, -1).sum(1)
        bound = 1e-4 * norm * np.sqrt(value.size) + 1e-6  # |R| is about sqrt(size): a tenth of a per mille of |g||R|
        assert np.all(np.abs(dots - want[f"proj.{name}"]) <= bound), (name, dots, want[f"proj.{name}"], bound)


def test_the_backward_reads_the_forwards_layer_norm_statistics_and_the_note_counts_what_it_keeps() -> None:
    """GPT-2's five layer norms each run once (their kernel also returns the mean and 1/std the backward
    reads), and the build note gives the saved activations' bytes as a polynomial in the symbolic extents."""
    from loam.dialects.kernel import NormalizeOp

    here = MODELS / "tiny_gpt2"
    options = replace(Options.from_toml(here / "decoder.loam.toml"), checkpoints=(here / "tiny_gpt2.safetensors",))
    result = build(here / "decoder.onnxtext", options=options, grad=(), fuse=None)
    normalizes = [op for op in result.ir.walk() if isinstance(op, NormalizeOp)]
    assert len(normalizes) == 5 and all(op.param("stats") == 1 for op in normalizes)
    (note,) = [n for n in result.notes if n.startswith("differentiate:")]
    assert "batch_size*sequence_length" in note and "the largest: '/transformer/h.1/mlp" in note, note
