"""Export tiny random vision models to ONNX into tests/models/vision/ (dev-time only; files committed).

Why this script exists: the models people serve for images are exported with a free image size, so
their windowed operators (Conv, Resize, and the attention over the pixels or patches after them) run
over extents that are symbols at build time.  The tests in tests/models/vision/ build each graph
once, with its height and width symbolic, and compare the module with onnxruntime at two sizes.
The models are those of a text-to-image diffusion pipeline (its CLIP text encoder, its UNet and its
VAE's decoder) and a ViT image encoder, at configurations small enough to commit (each checkpoint
under 2 MB).

Needs torch, transformers and diffusers, which are not project dependencies; CI never runs this
script.  The dev-time environment it was last run in (a venv outside the repository):

    python3.11 -m venv /work/vision-venv
    /work/vision-venv/bin/pip install torch==2.13.0 transformers==4.46.3 diffusers==0.31.0 \
        onnx==1.23.2 onnxruntime==1.32.0 numpy==2.4.6 safetensors==0.8.0
    /work/vision-venv/bin/python scripts/export_vision_models.py      # about 10 s
    /work/vision-venv/bin/python scripts/export_vision_models.py vit   # only the models named

transformers 4.46.3 is the release the other torch exports use; diffusers 0.31.0 is a release that
imports with it and with torch 2.13 (neither package pulls in another torch).  Export:
`torch.onnx.export(..., dynamo=False)` (the TorchScript exporter), opset 17, constant folding on,
dynamic batch and spatial axes.  Attention is each library's default (diffusers' `AttnProcessor2_0`,
which the exporter writes as MatMul/Softmax; transformers' eager attention).

Weights: `torch.manual_seed(0)`, each model's own random init, then every normalization scale
(1 + 0.1·N(0,1)), normalization shift (0.1·N(0,1)) and bias (0.02·N(0,1)) is redrawn: the libraries
start the first two at ones and zeros, so a module that dropped one could still match, and the
exporter would merge equal-valued initializers into one name.  Every float initializer is renamed
after the parameter it holds, found by content, and stored in the model's safetensors checkpoint,
which the graph's text reads as external data: a parameter under its `state_dict()` name; a
transpose the exporter folded (a Linear's `Transpose`) as `NAME.T`; a parameter folded into another
shape (a GroupNorm's scale and shift read as [C, 1, 1] by the exporter's InstanceNormalization
spelling) under the parameter's own name, in the shape the graph reads; a slice of one along one axis
(ViT's position embeddings, split into the class token's row and the patch grid) as
`NAME.axisD_A_B`.  A float initializer that is none of these stops the script.

Files written, for each MODEL in `text_encoder`, `unet`, `vae_decoder`, `vit` (the folder's
README.md lists their inputs and outputs):

- `MODEL.onnxtext`: the graph in ONNX's text form, its weights external data in `MODEL.safetensors`;
- `MODEL.safetensors`: every float initializer of the graph, by its (renamed) ONNX name.

The script checks each graph (`onnx.checker`, full check), reads the text back with the external
weights and checks that onnxruntime gives bit-identical outputs to the in-memory export, and checks
onnxruntime against torch at two sizes of each model (SystemExit if any differs by more than
TORCH_ATOL, relative to the output's largest magnitude).  No oracle file is written: the tests run
onnxruntime themselves.
"""

from __future__ import annotations

import io
import re
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import diffusers
import numpy as np
import onnx
import onnx.checker
import onnx.parser
import onnx.printer
import onnxruntime as ort
import safetensors
import torch
import transformers
from diffusers import AutoencoderKL, UNet2DConditionModel
from onnx import TensorProto, numpy_helper
from onnx.external_data_helper import load_external_data_for_model, set_external_data
from safetensors.numpy import save_file
from safetensors_layout import safetensors_offsets
from transformers import CLIPTextConfig, CLIPTextModel, ViTConfig, ViTModel

OUT = Path(__file__).resolve().parent.parent / "tests" / "models" / "vision"
SEED = 0
OPSET = 17
TORCH_ATOL = 1e-4
"""onnxruntime against torch: the largest |difference| over the output's largest |value|."""

HIDDEN = 32
"""The text encoder's width, which is the UNet's cross-attention width."""
LATENT = 4
"""The latent channels the UNet denoises and the VAE decodes."""
BATCH, SEQ, HEIGHT, WIDTH = "batch_size", "sequence_length", "height", "width"


def redraw_norms_and_biases(model: torch.nn.Module) -> None:
    """Redraw what the libraries start at ones and zeros (see the module docstring)."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.GroupNorm | torch.nn.LayerNorm) and module.weight is not None:
                module.weight.copy_(1.0 + 0.1 * torch.randn_like(module.weight))
                module.bias.copy_(0.1 * torch.randn_like(module.bias))
        for name, param in model.named_parameters():
            if name.endswith("bias") and "norm" not in name:
                param.copy_(0.02 * torch.randn_like(param))


class TextEncoder(CLIPTextModel):
    """CLIP's text transformer as Stable Diffusion 1.x uses it.  Each model here is a subclass whose
    forward takes and returns plain tensors, so parameter and node names stay the library's own."""

    def forward(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]  # plain tensors, as traced
        out = super().forward(input_ids=input_ids, return_dict=False)
        return out[0], out[1]


class UNet(UNet2DConditionModel):
    def forward(  # type: ignore[override]  # plain tensors, as traced
        self, sample: torch.Tensor, timestep: torch.Tensor, encoder_hidden_states: torch.Tensor
    ) -> torch.Tensor:
        return super().forward(sample, timestep, encoder_hidden_states, return_dict=False)[0]


class VaeDecoder(AutoencoderKL):
    """`vae.decode` only: the piece of a text-to-image pipeline that turns the final latent into pixels."""

    def forward(self, latent_sample: torch.Tensor) -> torch.Tensor:  # type: ignore[override]  # plain tensors, as traced
        return self.decode(latent_sample, return_dict=False)[0]


class VitEncoder(ViTModel):
    """ViT with its position embeddings interpolated to the image's patch grid, so any size runs."""

    def forward(self, pixel_values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]  # plain tensors, as traced
        out = super().forward(pixel_values, interpolate_pos_encoding=True, return_dict=False)
        return out[0], out[1]


def text_encoder_model() -> TextEncoder:
    """Width 32, 2 layers, 4 heads, vocabulary 1000, 77 positions; eos_token_id 2, as Stable Diffusion
    1.x's config has it, so the pooled row is the argmax token's."""
    config = CLIPTextConfig(
        vocab_size=1000,
        hidden_size=HIDDEN,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=77,
        bos_token_id=0,
        eos_token_id=2,
        pad_token_id=1,
        attn_implementation="eager",
    )
    return TextEncoder(config)


def unet_model() -> UNet:
    """A Stable-Diffusion-shaped UNet: two levels (16 and 32 channels, one downsample, one upsample),
    cross-attention (heads of 8) on the 32-channel level and in the middle block, one layer per block."""
    return UNet(
        sample_size=8,
        in_channels=LATENT,
        out_channels=LATENT,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        block_out_channels=(16, 32),
        layers_per_block=1,
        cross_attention_dim=HIDDEN,
        attention_head_dim=8,
        norm_num_groups=8,
    )


def vae_model() -> VaeDecoder:
    """A two-level AutoencoderKL (32 and 64 channels): its decoder upsamples the latent twofold."""
    return VaeDecoder(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
        up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"),
        block_out_channels=(32, 64),
        layers_per_block=1,
        latent_channels=LATENT,
        norm_num_groups=8,
        sample_size=16,
    )


def vit_model() -> VitEncoder:
    """Width 32, 2 layers, 4 heads, 8×8 patches, trained size 32×32 (a 4×4 grid), pooler included."""
    config = ViTConfig(
        hidden_size=HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        image_size=32,
        patch_size=8,
        num_channels=3,
        attn_implementation="eager",
    )
    return VitEncoder(config)


Feeds = Callable[[np.random.Generator, int, int, int], dict[str, np.ndarray]]


@dataclass(frozen=True)
class Spec:
    """One model to export: its torch module, the trace's sizes, its interface, and how to feed it."""

    name: str
    title: str
    make: Callable[[], torch.nn.Module]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    axes: dict[str, dict[int, str]]
    feeds: Feeds
    trace: tuple[int, int, int]
    """(batch, height or sequence, width) of the traced example: no extent 1, none specialised away."""
    checks: tuple[tuple[int, int, int], ...]
    """The two (batch, height, width) onnxruntime is checked against torch at."""


def text_feeds(rng: np.random.Generator, batch: int, length: int, _: int) -> dict[str, np.ndarray]:
    ids = rng.integers(3, 1000, (batch, length), dtype=np.int64)
    ids[:, 0] = 0  # bos
    ids[:, -1] = 999  # the highest id, which the legacy pooling picks as the end of the prompt
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


SPECS = (
    Spec(
        "text_encoder",
        "CLIP text encoder (transformers CLIPTextModel)",
        text_encoder_model,
        ("input_ids",),
        ("last_hidden_state", "pooler_output"),
        {"input_ids": {0: BATCH, 1: SEQ}, "last_hidden_state": {0: BATCH, 1: SEQ}, "pooler_output": {0: BATCH}},
        text_feeds,
        (2, 5, 0),
        ((1, 7, 0), (2, 12, 0)),
    ),
    Spec(
        "unet",
        "UNet (diffusers UNet2DConditionModel)",
        unet_model,
        ("sample", "timestep", "encoder_hidden_states"),
        ("out_sample",),
        {
            "sample": {0: BATCH, 2: HEIGHT, 3: WIDTH},
            "timestep": {0: BATCH},
            "encoder_hidden_states": {0: BATCH, 1: SEQ},
            "out_sample": {0: BATCH, 2: HEIGHT, 3: WIDTH},
        },
        unet_feeds,
        (2, 6, 10),
        ((1, 8, 8), (2, 12, 16)),
    ),
    Spec(
        "vae_decoder",
        "VAE decoder (diffusers AutoencoderKL.decode)",
        vae_model,
        ("latent_sample",),
        ("sample",),
        {"latent_sample": {0: BATCH, 2: HEIGHT, 3: WIDTH}, "sample": {0: BATCH, 2: "image_height", 3: "image_width"}},
        vae_feeds,
        (2, 6, 10),
        ((1, 8, 8), (2, 12, 16)),
    ),
    Spec(
        "vit",
        "ViT image encoder (transformers ViTModel, interpolate_pos_encoding=True)",
        vit_model,
        ("pixel_values",),
        ("last_hidden_state", "pooler_output"),
        {
            "pixel_values": {0: BATCH, 2: HEIGHT, 3: WIDTH},
            "last_hidden_state": {0: BATCH, 1: "tokens"},
            "pooler_output": {0: BATCH},
        },
        vit_feeds,
        (2, 40, 24),
        ((1, 32, 32), (2, 48, 64)),
    ),
)


def export(spec: Spec, module: torch.nn.Module) -> onnx.ModelProto:
    rng = np.random.default_rng(SEED)
    args = tuple(torch.from_numpy(v) for v in spec.feeds(rng, *spec.trace).values())
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            args,
            buffer,
            dynamo=False,
            opset_version=OPSET,
            do_constant_folding=True,
            input_names=list(spec.inputs),
            output_names=list(spec.outputs),
            dynamic_axes=spec.axes,
        )
    exported = onnx.load_from_string(buffer.getvalue())
    with torch.no_grad():
        traced = module(*args)
    fix_static_output_dims(spec, exported, traced if isinstance(traced, tuple) else (traced,))
    return exported


def fix_static_output_dims(spec: Spec, model: onnx.ModelProto, traced: tuple[torch.Tensor, ...]) -> None:
    """Declare as numbers the output axes the spec does not name, which the exporter leaves as names of
    its own where its shape inference gave up (ViT's hidden axis: `LayerNormalizationlast_hidden_state_dim_2`)."""
    for info, value in zip(model.graph.output, traced, strict=True):
        named = spec.axes.get(info.name, {})
        for axis, dim in enumerate(info.type.tensor_type.shape.dim):
            if axis not in named:
                dim.dim_value = value.shape[axis]


def parameter_names(model: torch.nn.Module) -> dict[tuple[tuple[int, ...], bytes], str]:
    """Parameter names by content: each parameter, and the transpose of each 2-D one."""
    names: dict[tuple[tuple[int, ...], bytes], str] = {}
    for name, param in model.state_dict().items():
        array = param.detach().numpy()
        names.setdefault((array.shape, array.tobytes()), name)
        if array.ndim == 2:
            transposed = np.ascontiguousarray(array.T)
            names.setdefault((transposed.shape, transposed.tobytes()), f"{name}.T")
    return names


def part_of(array: np.ndarray, model: torch.nn.Module) -> str | None:
    """The name of the parameter `array` is folded from, where it is a parameter reshaped (a GroupNorm's
    scale read as [C, 1, 1]: the parameter's own name) or one slice of a parameter along one axis (ViT's
    position embeddings split into the class token's row and the patches' grid: `NAME.axisD_A_B` for
    NAME[..., A:B] on axis D); None where it is neither."""
    data = array.tobytes()
    for name, param in model.state_dict().items():
        whole = param.detach().numpy()
        if whole.dtype != array.dtype:
            continue
        if whole.size == array.size and whole.tobytes() == data:
            return name
        offset = whole.tobytes().find(data)
        if offset < 0 or offset % whole.itemsize or whole.size <= array.size:
            continue
        start, count = offset // whole.itemsize, array.size
        for axis in range(whole.ndim):
            stride = int(np.prod(whole.shape[axis + 1 :], dtype=np.int64))
            if all(n == 1 for n in whole.shape[:axis]) and start % stride == 0 and count % stride == 0:
                a, b = start // stride, (start + count) // stride
                if np.array_equal(np.take(whole, range(a, b), axis=axis).reshape(array.shape), array):
                    return f"{name}.axis{axis}_{a}_{b}"
    return None


def rename_initializers(model: onnx.ModelProto, torch_model: torch.nn.Module) -> dict[str, str]:
    """Give every float initializer the name of the parameter it is (see parameter_names and part_of);
    returns {new name: the exporter's name} for those that are not a parameter as the model holds it."""
    names = parameter_names(torch_model)
    renamed: dict[str, str] = {}
    folded: dict[str, str] = {}
    for init in model.graph.initializer:
        if init.data_type != TensorProto.FLOAT:
            continue
        array = numpy_helper.to_array(init)
        new = names.get((array.shape, array.tobytes()))
        if new is None:
            new = part_of(array, torch_model)
            if new is None or new in renamed.values():
                raise SystemExit(f"float initializer {init.name} {list(array.shape)} is no parameter nor part of one")
            folded[new] = f"{init.name} {list(array.shape)}"
        renamed[init.name] = new
        init.name = new

    def rename(graph: onnx.GraphProto) -> None:
        for node in graph.node:
            node.input[:] = [renamed.get(name, name) for name in node.input]
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    rename(attr.g)

    rename(model.graph)
    for info in model.graph.value_info:
        info.name = renamed.get(info.name, info.name)
    return folded


def write_text(spec: Spec, model: onnx.ModelProto, weights: dict[str, np.ndarray]) -> onnx.ModelProto:
    """Write the graph's text with the checkpoint's tensors as external data, read it back, check it
    is the same model, and return the reread model with the weights loaded."""
    checkpoint = f"{spec.name}.safetensors"
    save_file(weights, str(OUT / checkpoint))
    offsets = safetensors_offsets(OUT / checkpoint)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for init in out.graph.initializer:
        if init.name not in weights:
            continue
        tensor = numpy_helper.from_array(weights[init.name], init.name)
        offset, length = offsets[init.name]
        set_external_data(tensor, checkpoint, offset=offset, length=length)
        tensor.ClearField("raw_data")
        init.CopyFrom(tensor)
    text = onnx.printer.to_text(out)
    path = OUT / f"{spec.name}.onnxtext"
    header = f"# The tiny {spec.title}; written by scripts/export_vision_models.py. Weights: external data in "
    path.write_text(f"{header}{checkpoint}.\n" + text + ("" if text.endswith("\n") else "\n"), encoding="utf-8")
    reread = onnx.parser.parse_model(path.read_text(encoding="utf-8"))
    load_external_data_for_model(reread, str(OUT))
    onnx.checker.check_model(reread, full_check=True)
    for init in reread.graph.initializer:
        if init.name in weights:
            np.testing.assert_array_equal(numpy_helper.to_array(init), weights[init.name])
    return reread


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # as loam.testing runs it
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def check_against_torch(spec: Spec, module: torch.nn.Module, sess: ort.InferenceSession) -> list[str]:
    """onnxruntime's outputs against torch's at the spec's two sizes; a line per output and size."""
    lines = []
    for size in spec.checks:
        feeds = spec.feeds(np.random.default_rng(SEED + 1), *size)
        with torch.no_grad():
            want = module(*(torch.from_numpy(v) for v in feeds.values()))
        want = [w.numpy() for w in (want if isinstance(want, tuple) else (want,))]
        got = sess.run(list(spec.outputs), feeds)
        for name, g, w in zip(spec.outputs, got, want, strict=True):
            assert g.shape == w.shape, (spec.name, name, g.shape, w.shape)
            diff, scale = float(np.abs(g - w).max()), float(np.abs(w).max())
            shape = list(g.shape)
            lines.append(f"{spec.name} {size} {name} {shape}: |torch - ort| {diff:.1e}, max |torch| {scale:.2f}")
            if not diff <= TORCH_ATOL * max(scale, 1.0):
                raise SystemExit(f"{spec.name} {name} at {size}: torch and onnxruntime differ by {diff}")
    return lines


def export_one(spec: Spec) -> list[str]:
    torch.manual_seed(SEED)
    model = spec.make()
    redraw_norms_and_biases(model)
    module = model.eval()
    exported = export(spec, module)
    folded = rename_initializers(exported, model)
    onnx.checker.check_model(exported, full_check=True)
    weights = {i.name: numpy_helper.to_array(i) for i in exported.graph.initializer if i.data_type == TensorProto.FLOAT}
    reread = write_text(spec, exported, weights)
    sess = session(reread)
    feeds = spec.feeds(np.random.default_rng(SEED + 2), *spec.checks[0])
    for got, want in zip(sess.run(None, feeds), session(exported).run(None, feeds), strict=True):
        np.testing.assert_array_equal(got, want)
    ops = sorted({node.op_type for node in exported.graph.node})
    size = (OUT / f"{spec.name}.safetensors").stat().st_size
    lines = [
        f"{spec.name}: {len(exported.graph.node)} nodes, {len(weights)} weights "
        f"({sum(w.size for w in weights.values())} floats, {size} bytes), ops {' '.join(ops)}",
        f"{spec.name}: parameters read reshaped or in part: "
        + (", ".join(f"{new} (was {old})" for new, old in folded.items()) or "none"),
    ]
    return lines + check_against_torch(spec, module, sess)


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    chosen = [s for s in SPECS if len(sys.argv) < 2 or s.name in sys.argv[1:]]
    for spec in chosen:
        for line in export_one(spec):
            print(line)
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, diffusers {diffusers.__version__}, "
        f"onnx {onnx.__version__}, onnxruntime {ort.__version__}, safetensors {safetensors.__version__}, "
        f"numpy {np.__version__}"
    )
    names = sorted(p.name for p in OUT.iterdir() if re.search(r"\.(onnxtext|safetensors)$", p.name))
    print(f"wrote {', '.join(names)} in {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
