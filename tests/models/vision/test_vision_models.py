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

from pathlib import Path

import numpy as np
import pytest

from loam.driver.draft import draft_layout
from loam.driver.options import Options
from loam.driver.pipeline import build
from loam.testing import assert_same, run_onnxruntime
from tests.models.graph_folder import Case, GraphFolder

HERE = Path(__file__).parent
RTOL = ATOL = 1e-4
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


GRAPHS = GraphFolder(HERE, CASES, RTOL, ATOL, fails=FAILS, host=HOST)


@pytest.mark.parametrize("model", GRAPHS.params())
def test_one_numpy_build_matches_onnxruntime_at_two_sizes(model: str) -> None:
    GRAPHS.matches_onnxruntime(model, "numpy")


@pytest.mark.parametrize("model", GRAPHS.params())
def test_one_wgsl_build_matches_onnxruntime_at_two_sizes(model: str) -> None:
    """Every kernel on the device but those HOST names, which the build's device summary lists."""
    pytest.importorskip("wgpu")
    GRAPHS.matches_onnxruntime(model, "wgsl")


def test_an_odd_latent_is_a_shape_error_not_a_wrong_number() -> None:
    """A 9-row latent is downsampled to 5 rows and upsampled to 10, which the skip connection's 9 rows
    cannot be concatenated with (onnxruntime stops at that Concat too): the module says so, naming
    the input's axis and its extent."""
    result = GRAPHS.built("unet", "numpy")
    feeds = CASES["unet"].inputs((1, 9, 8))
    with pytest.raises(result.module.ShapeError, match=r"Concat.*sample axis 2 gives height = 9"):
        GRAPHS.run(result, "unet", feeds)


@pytest.mark.parametrize("backend", ["numpy", "wgsl"])
def test_the_vit_with_its_image_size_fixed_matches_onnxruntime(backend: str) -> None:
    """With `dims` fixing the height and width (40 × 64: a 5 × 8 patch grid, the position embeddings'
    4 × 4 grid resized bicubically to it) the ViT builds with every kernel on the device, the Resize
    to those sizes too (with free sizes, above, that one node runs on the host)."""
    if backend == "wgsl":
        pytest.importorskip("wgpu")
    graph, checkpoint = HERE / "vit.onnxtext", HERE / "vit.safetensors"
    options = Options(checkpoints=(checkpoint,), dims={"height": 40, "width": 64})
    result = build(graph, options=draft_layout(graph, [checkpoint], options).options(options), backend=backend)
    for batch in (1, 2):
        feeds = CASES["vit"].inputs((batch, 40, 64))
        assert_same(
            GRAPHS.run(result, "vit", feeds), run_onnxruntime(GRAPHS.reference("vit"), feeds), rtol=RTOL, atol=ATOL
        )
