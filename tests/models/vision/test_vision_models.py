"""Tiny vision exports (tests/models/vision): one build per model, run at two sizes, equal to onnxruntime.

The graphs are what torch's exporter writes for a text-to-image diffusion pipeline's pieces (a CLIP
text encoder, a UNet2DConditionModel, an AutoencoderKL decoder) and a ViT image encoder, with the batch
and the sequence length or the image's height and width left symbolic (scripts/export_vision_models.py
wrote them; the folder's README.md says how).  Each is built once as a user builds it: the layout
`loam layout` drafts, unedited, and the model's safetensors checkpoint.  That one module then runs at
two sizes, on numpy and on WGSL, and each output must equal onnxruntime's (graph optimizations off) on
the same fixed-seed inputs.

Tolerance: rtol 1e-4, atol 1e-4.  The outputs are of magnitude at most about 4, and torch and
onnxruntime already differ by up to 2.6e-6 on them: float32 rounding in another summation order,
through tens of convolutions and matmuls whose sums run over at most 576 terms (a 3 × 3 convolution
over 64 channels).  1e-4 leaves room for Loam's own order (its modules differ from onnxruntime by at
most 3e-6 here), while a dropped bias (0.02·N(0, 1) each) or normalization scale (1 + 0.1·N(0, 1))
moves an output by far more.

Where Loam's build stops today, its case is a strict xfail whose reason is the failure's first line,
so it fails (XPASS) the day the build goes through: then the case must match onnxruntime to pass.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnx.parser
import pytest
from onnx.external_data_helper import load_external_data_for_model

from loam.driver.draft import draft_layout
from loam.driver.options import Options
from loam.driver.pipeline import BuildResult, build
from loam.testing import assert_same, forward_inputs, run_onnxruntime

HERE = Path(__file__).parent
RTOL = ATOL = 1e-4
SEED = 0
LATENT, HIDDEN = 4, 32

pytestmark = pytest.mark.xdist_group("vision")


def text_feeds(rng: np.random.Generator, batch: int, length: int) -> dict[str, np.ndarray]:
    ids = rng.integers(3, 1000, (batch, length), dtype=np.int64)
    ids[:, 0] = 0  # bos
    ids[:, -1] = 999  # the highest id: CLIP's pooling (eos_token_id 2, as Stable Diffusion 1.x) takes its row
    return {"input_ids": ids}


def unet_feeds(rng: np.random.Generator, batch: int, height: int, width: int) -> dict[str, np.ndarray]:
    return {
        "sample": rng.standard_normal((batch, LATENT, height, width), dtype=np.float32),
        "timestep": rng.uniform(0, 1000, (batch,)).astype(np.float32),
        "encoder_hidden_states": rng.standard_normal((batch, 7, HIDDEN), dtype=np.float32),
    }


def vae_feeds(rng: np.random.Generator, batch: int, height: int, width: int) -> dict[str, np.ndarray]:
    return {"latent_sample": rng.standard_normal((batch, LATENT, height, width), dtype=np.float32)}


def vit_feeds(rng: np.random.Generator, batch: int, height: int, width: int) -> dict[str, np.ndarray]:
    return {"pixel_values": rng.standard_normal((batch, 3, height, width), dtype=np.float32)}


@dataclass(frozen=True)
class Case:
    """A model, how to make its inputs at a size, and the two sizes (batch first) it runs at."""

    feeds: Callable[..., dict[str, np.ndarray]]
    sizes: tuple[tuple[int, ...], tuple[int, ...]]

    def inputs(self, size: tuple[int, ...]) -> dict[str, np.ndarray]:
        return self.feeds(np.random.default_rng(SEED), *size)


CASES = {
    "text_encoder": Case(text_feeds, ((1, 7), (2, 12))),
    # The UNet downsamples once and concatenates the skip connection after upsampling: even latents.
    "unet": Case(unet_feeds, ((1, 8, 8), (2, 12, 16))),
    "vae_decoder": Case(vae_feeds, ((1, 8, 8), (2, 6, 10))),
    # 40 is no multiple of the 8-pixel patch: the patch Conv floors it to 5 rows.
    "vit": Case(vit_feeds, ((1, 32, 32), (2, 40, 64))),
}


FAILS: dict[str, tuple[type[Exception], str]] = {}
"""Where a build stops today, on both backends: the exception and its first line (the build's own message,
less the graph's path before it), with what it is where the message does not say."""

HOST = {"vit": ("/embeddings/Resize",)}
"""The nodes the WGSL module computes on the host today: the ViT's position embeddings resized to sizes
the image's extents give (kernel.resize_to, which has no WGSL form yet)."""


@functools.cache
def built(model: str, backend: str) -> BuildResult:
    """`model` built once for `backend`: the drafted layout, unedited, and the model's checkpoint (on
    WGSL every kernel runs on the device, but those HOST names, through the host fallback).

    A failure other than the one FAILS records is an AssertionError, not the expected failure: the
    case's reason must say why the build stops."""
    graph, checkpoint = HERE / f"{model}.onnxtext", HERE / f"{model}.safetensors"
    options = Options(checkpoints=(checkpoint,))
    try:
        draft = draft_layout(graph, [checkpoint], options)
        host = backend == "wgsl" and model in HOST
        return build(graph, options=draft.options(options), backend=backend, host_fallback=host)
    except Exception as failure:
        first = str(failure).splitlines()[0].removeprefix(f"{graph}: ")
        kind, recorded = FAILS.get(model, (None, ""))
        assert type(failure) is kind and recorded.startswith(first), f"{model} ({backend}) stops otherwise now: {first}"
        raise


@functools.cache
def reference(model: str) -> onnx.ModelProto:
    """The graph as onnxruntime reads it: the text with its external weights loaded."""
    proto = onnx.parser.parse_model((HERE / f"{model}.onnxtext").read_text(encoding="utf-8"))
    load_external_data_for_model(proto, str(HERE))
    return proto


def run(result: BuildResult, model: str, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    module = result.module
    weights = module.Weights.load_file([str(HERE / f"{model}.safetensors")])
    out = module.forward(weights, *(feeds[name] for name in forward_inputs(result)))
    return list(out) if isinstance(out, tuple) else [out]


def params() -> list[object]:
    return [
        pytest.param(
            model,
            id=model,
            marks=[pytest.mark.xfail(strict=True, raises=FAILS[model][0], reason=FAILS[model][1])]
            if model in FAILS
            else [],
        )
        for model in CASES
    ]


def matches_onnxruntime(result: BuildResult, model: str) -> None:
    """Both sizes through the one build: every output's shape and values are onnxruntime's."""
    case = CASES[model]
    shapes = []
    for size in case.sizes:
        feeds = case.inputs(size)
        want = run_onnxruntime(reference(model), feeds)
        assert_same(run(result, model, feeds), want, rtol=RTOL, atol=ATOL)
        shapes.append([w.shape for w in want])
    assert shapes[0] != shapes[1]  # the two sizes are two extents of the one module


@pytest.mark.parametrize("model", params())
def test_one_numpy_build_matches_onnxruntime_at_two_sizes(model: str) -> None:
    matches_onnxruntime(built(model, "numpy"), model)


@pytest.mark.parametrize("model", params())
def test_one_wgsl_build_matches_onnxruntime_at_two_sizes(model: str) -> None:
    """Every kernel on the device but those HOST names, which the build's device summary lists."""
    pytest.importorskip("wgpu")
    result = built(model, "wgsl")
    assert result.fusion is not None and result.fusion.device is not None
    assert tuple(entry.split(" (")[0] for entry in result.fusion.device.host) == HOST.get(model, ())
    matches_onnxruntime(result, model)


def test_an_odd_latent_is_a_shape_error_not_a_wrong_number() -> None:
    """A 9-row latent is downsampled to 5 rows and upsampled to 10, which the skip connection's 9 rows
    cannot be concatenated with (onnxruntime stops at that Concat too): the module says so, naming
    the input's axis and its extent."""
    result = built("unet", "numpy")
    feeds = CASES["unet"].inputs((1, 9, 8))
    with pytest.raises(result.module.ShapeError, match=r"Concat.*sample axis 2 gives height = 9"):
        run(result, "unet", feeds)


@pytest.mark.parametrize("backend", ["numpy", "wgsl"])
def test_the_vit_with_its_image_size_fixed_matches_onnxruntime(backend: str) -> None:
    """With `dims` fixing the height and width (40 × 64: a 5 × 8 patch grid, the position embeddings'
    4 × 4 grid resized bicubically to it) the ViT builds today: its graph and checkpoint are right,
    and the symbolic case above waits only on Resize to sizes computed from symbolic extents."""
    if backend == "wgsl":
        pytest.importorskip("wgpu")
    graph, checkpoint = HERE / "vit.onnxtext", HERE / "vit.safetensors"
    options = Options(checkpoints=(checkpoint,), dims={"height": 40, "width": 64})
    result = build(graph, options=draft_layout(graph, [checkpoint], options).options(options), backend=backend)
    for batch in (1, 2):
        feeds = CASES["vit"].inputs((batch, 40, 64))
        assert_same(run(result, "vit", feeds), run_onnxruntime(reference("vit"), feeds), rtol=RTOL, atol=ATOL)
