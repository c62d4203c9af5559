"""Record diffusers' own text-to-image pipeline on the tiny vision models, the oracle of the image role's tests.

Why: `loam serve`'s image role (loam/serve/image.py) runs the tiny CLIP text encoder, UNet and VAE decoder
of tests/models/vision stage by stage, with its own numpy schedulers and LoRA merging.  Its tests hold
what it serves to what diffusers' `StableDiffusionPipeline` makes of the same models, tokenizer, seed,
scheduler and steps: diffusers is the oracle, never Loam's code.  The pipeline is given the initial latents
the image role draws (`numpy.random.default_rng(seed).standard_normal`, float32) as `latents=`, so both
start from the same noise.

The pipeline's pieces: the models built with the export's configurations (scripts/export_vision_models.py)
and loaded from the committed checkpoints (a weight stored transposed, `NAME.T`, or reshaped is put back
in the model's own shape), a `PreTrainedTokenizerFast` over the package's tokenizer.json (start 0, padding
1, end 2, 77 positions), and diffusers' EulerDiscreteScheduler or DDIMScheduler with the package's
`scheduler` settings.  The LoRA adapter is made here with peft on the UNet's attention projections (rank
4, alpha 4, its factors redrawn from a seeded normal so the update is not zero), saved in diffusers' key
naming as the package's `style_lora.safetensors`, and loaded back by the pipeline's own
`load_lora_weights` and `set_adapters`.

Writes tests/serve/packages/tiny_diffusion/style_lora.safetensors and tests/serve/image_oracle.npz: for each
case, its parameters (JSON) and the pipeline's image (`output_type="np"`: height x width x RGB in [0, 1]); and
the two schedulers' own plans (timesteps, sigmas, cumulative alphas) for several step counts under the package's
settings with each timestep spacing (`schedule.SPACING.STEPS.*`).
Needs torch, transformers 4.46.3, diffusers 0.31.0 and peft 0.13.2 (the venv of export_vision_models.py):

    /work/vision-venv/bin/python scripts/record_image_oracle.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import diffusers
import numpy as np
import peft
import torch
from diffusers import (
    AutoencoderKL,
    DDIMScheduler,
    EulerDiscreteScheduler,
    StableDiffusionPipeline,
    UNet2DConditionModel,
)
from peft import LoraConfig
from peft.utils import get_peft_model_state_dict
from safetensors.numpy import load_file
from transformers import CLIPTextConfig, CLIPTextModel, PreTrainedTokenizerFast

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "tests" / "models" / "vision"
PACKAGE = ROOT / "tests" / "serve" / "packages" / "tiny_diffusion"
OUT = ROOT / "tests" / "serve" / "image_oracle.npz"
LORA = "style_lora.safetensors"

CASES = (
    {"name": "euler_cfg", "prompt": "a red fox in the snow", "negative_prompt": "", "width": 16, "height": 16,
     "seed": 3, "steps": 3, "scheduler": "euler", "guidance_scale": 7.5, "adapters": []},
    {"name": "ddim_plain", "prompt": "beautiful is better than ugly", "negative_prompt": "", "width": 32,
     "height": 24, "seed": 11, "steps": 2, "scheduler": "ddim", "guidance_scale": 1.0, "adapters": []},
    {"name": "euler_negative", "prompt": "simple is better", "negative_prompt": "complex", "width": 24,
     "height": 32, "seed": 5, "steps": 2, "scheduler": "euler", "guidance_scale": 4.0, "adapters": []},
    {"name": "lora", "prompt": "a red fox in the snow", "negative_prompt": "", "width": 16, "height": 16,
     "seed": 3, "steps": 2, "scheduler": "euler", "guidance_scale": 7.5, "adapters": [["style", 0.7]]},
)  # fmt: skip


def loaded(model: torch.nn.Module, checkpoint: Path) -> torch.nn.Module:
    """`model` with every parameter the checkpoint holds (as NAME, NAME.T or NAME reshaped) loaded."""
    stored = load_file(str(checkpoint))
    state = {}
    for name, param in model.state_dict().items():
        if name in stored:
            value = stored[name].reshape(param.shape)
        elif f"{name}.T" in stored:
            value = stored[f"{name}.T"].T
        else:
            continue  # the VAE's encoder, which the exported decoder never reads
        state[name] = torch.from_numpy(np.ascontiguousarray(value))
    missing = model.load_state_dict(state, strict=False).missing_keys
    if any(not key.startswith(("encoder.", "quant_conv.")) for key in missing):
        raise SystemExit(f"{checkpoint}: no weight for {missing[:3]}")
    return model.eval()


def pipeline(scheduler: str) -> StableDiffusionPipeline:
    config = json.loads((PACKAGE / "model.json").read_text(encoding="utf-8"))["scheduler"]
    settings = {k: v for k, v in config.items() if k != "default"}
    kind = EulerDiscreteScheduler if scheduler == "euler" else DDIMScheduler
    extra = {"clip_sample": False} if scheduler == "ddim" else {}
    if scheduler == "euler":
        settings.pop("set_alpha_to_one")  # DDIM's alone
    text = CLIPTextModel(CLIPTextConfig(
        vocab_size=1000, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=77, bos_token_id=0, eos_token_id=2, pad_token_id=1, attn_implementation="eager",
    ))  # fmt: skip
    unet = UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), block_out_channels=(16, 32), layers_per_block=1,
        cross_attention_dim=32, attention_head_dim=8, norm_num_groups=8,
    )  # fmt: skip
    vae = AutoencoderKL(
        block_out_channels=(32, 64), layers_per_block=1, latent_channels=4, norm_num_groups=8, sample_size=16,
        down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
    )  # fmt: skip
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_file=str(PACKAGE / "tokenizer.json"), bos_token="<|startoftext|>", eos_token="<|endoftext|>",
        pad_token="<|pad|>", model_max_length=77,
    )  # fmt: skip
    return StableDiffusionPipeline(
        vae=loaded(vae, MODELS / "vae_decoder.safetensors"),
        text_encoder=loaded(text, MODELS / "text_encoder.safetensors"),
        tokenizer=tokenizer,
        unet=loaded(unet, MODELS / "unet.safetensors"),
        scheduler=kind(**settings, **extra),
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )


def make_lora(pipe: StableDiffusionPipeline) -> None:
    """A rank-4 LoRA of the UNet's attention projections with non-zero factors, saved in diffusers' naming."""
    torch.manual_seed(7)
    unet = pipe.unet
    unet.add_adapter(LoraConfig(r=4, lora_alpha=4, target_modules=["to_q", "to_k", "to_v", "to_out.0"],
                                init_lora_weights=False))  # fmt: skip
    with torch.no_grad():
        for name, param in unet.named_parameters():
            if "lora_" in name:
                param.copy_(0.3 * torch.randn_like(param))
    layers = get_peft_model_state_dict(unet)  # peft's key naming: MODULE.lora_A.weight, MODULE.lora_B.weight
    with tempfile.TemporaryDirectory() as folder:
        StableDiffusionPipeline.save_lora_weights(folder, unet_lora_layers=layers, safe_serialization=True)
        data = (Path(folder) / "pytorch_lora_weights.safetensors").read_bytes()
    (PACKAGE / LORA).write_bytes(data)


def run(case: dict[str, object]) -> np.ndarray:
    pipe = pipeline(str(case["scheduler"]))
    adapters = case["adapters"]
    assert isinstance(adapters, list)
    if adapters:
        pipe.load_lora_weights(str(PACKAGE), weight_name=LORA, adapter_name="style")
        pipe.set_adapters([a[0] for a in adapters], adapter_weights=[a[1] for a in adapters])
    width, height, seed = int(case["width"]), int(case["height"]), int(case["seed"])  # type: ignore[call-overload]  # JSON-like case values
    noise = np.random.default_rng(seed).standard_normal((1, 4, height // 2, width // 2), dtype=np.float32)
    with torch.no_grad():
        out = pipe(
            prompt=str(case["prompt"]), negative_prompt=str(case["negative_prompt"]) or None, height=height,
            width=width, num_inference_steps=int(case["steps"]), guidance_scale=float(case["guidance_scale"]),  # type: ignore[call-overload, arg-type]  # JSON-like case values
            latents=torch.from_numpy(noise), output_type="np",
        )  # fmt: skip
    return np.asarray(out.images[0], np.float32)


SPACINGS = ("leading", "trailing", "linspace")
SCHEDULE_STEPS = (1, 2, 3, 4, 7, 8, 50)


def schedules() -> dict[str, np.ndarray]:
    """diffusers' own plans under the package's settings and each timestep spacing: Euler's timesteps, sigmas and
    initial noise scale, and DDIM's timesteps and the cumulative alphas each step moves between."""
    config = json.loads((PACKAGE / "model.json").read_text(encoding="utf-8"))["scheduler"]
    settings = {k: v for k, v in config.items() if k not in ("default", "set_alpha_to_one", "timestep_spacing")}
    out: dict[str, np.ndarray] = {}
    for spacing in SPACINGS:
        for steps in SCHEDULE_STEPS:
            euler = EulerDiscreteScheduler(**settings, timestep_spacing=spacing)
            euler.set_timesteps(steps)
            key = f"schedule.{spacing}.{steps}"
            out[f"{key}.euler.timesteps"] = euler.timesteps.numpy().astype(np.float32)
            out[f"{key}.euler.sigmas"] = euler.sigmas.numpy().astype(np.float32)
            out[f"{key}.euler.init_noise_sigma"] = np.float32(euler.init_noise_sigma).reshape(1)
            ddim = DDIMScheduler(**settings, timestep_spacing=spacing, set_alpha_to_one=config["set_alpha_to_one"])
            ddim.set_timesteps(steps)
            pairs = []
            for t in ddim.timesteps.tolist():
                previous = t - ddim.config.num_train_timesteps // steps
                prev_alpha = ddim.alphas_cumprod[previous] if previous >= 0 else ddim.final_alpha_cumprod
                pairs.append((float(ddim.alphas_cumprod[t]), float(prev_alpha)))
            out[f"{key}.ddim.timesteps"] = ddim.timesteps.numpy().astype(np.float32)
            out[f"{key}.ddim.alphas"] = np.array(pairs, np.float32)
    return out


def main() -> int:
    torch.set_num_threads(1)
    make_lora(pipeline("euler"))
    arrays: dict[str, np.ndarray] = schedules()
    for case in CASES:
        image = run(case)
        arrays[f"{case['name']}.image"] = image
        arrays[f"{case['name']}.params"] = np.frombuffer(json.dumps(case).encode(), np.uint8)
        saturated = float(((image <= 0) | (image >= 1)).mean())
        print(f"{case['name']}: {image.shape}, mean {image.mean():.4f}, {saturated:.0%} of values at 0 or 1")
    np.savez_compressed(OUT, **arrays)
    print(f"torch {torch.__version__}, diffusers {diffusers.__version__}, peft {peft.__version__}; wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
