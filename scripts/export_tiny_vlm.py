"""Export a tiny random LLaVA-style model (CLIP vision tower, MLP projector, Llama) for the image-conditioned
text tests (dev-time only; its output is committed).

Why this script exists: `loam serve`'s text role can take images in a chat (`loam.serve.image_text`), and the
tests need a real LLaVA graph pair whose greedy answer to a chat with an image Loam must reproduce.  The model
is transformers' own `LlavaForConditionalGeneration`, tiny and with random weights:

- vision tower `CLIPVisionModel(CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
  num_attention_heads=4, image_size=16, patch_size=4))`: 16 patches and a class token; LLaVA reads the
  second-to-last layer's states without the class token (`vision_feature_layer=-2`, strategy `default`), so
  an image is 16 rows;
- projector: LLaVA's two Linear layers with GELU between them, 32 -> 64 -> 64;
- language model `LlamaForCausalLM(LlamaConfig(vocab_size=1001, hidden_size=64, intermediate_size=128,
  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256))`, eager
  attention; `<image>` is id 1000.

Weights: `torch.manual_seed(0)`, LLaVA's own init with `initializer_range` 0.2 (at transformers' 0.02 the
random Llama repeats one token), then every LayerNorm scale redrawn as 1 + 0.1·N(0,1), every LayerNorm shift
and RMSNorm scale as tests/models/vision does (shift 0.1·N(0,1); RMSNorm 1 + 0.1·N(0,1)) and every bias as
0.02·N(0,1), so none is the constant one or zero the library starts it at.

Graphs (`torch.onnx.export(dynamo=False)`, opset 17, no constant folding, so every weight keeps its
parameter's name and [out, in] shape, read through Transpose + MatMul):

- `projector.onnxtext`: pixel_values float [batch_size, 3, 16, 16] -> image_rows float [batch_size, 16, 64]
  (`LlavaForConditionalGeneration.get_image_features`);
- `embed.onnxtext`: input_ids int64 [batch_size, sequence_length] -> inputs_embeds float [batch_size,
  sequence_length, 64] (the language model's token embedding);
- `decoder.onnxtext`: inputs_embeds, attention_mask int64 [batch_size, past_sequence_length +
  sequence_length], position_ids int64 [batch_size, sequence_length], past_key_values.{0,1}.{key,value}
  [batch_size, 2, past_sequence_length, 16] -> logits [batch_size, sequence_length, 1001],
  present.{0,1}.{key,value}.  The server gathers each row's token embeddings from `embed` and writes an
  image's projected rows over its `<image>` positions, as LLaVA's forward does;
- `MODEL.safetensors` beside each: its float initializers by their ONNX names, which the text points into
  as external data.

Also written: `tests/serve/packages/tiny_vlm/tokenizer.json` (the tiny GPT-2 package's byte-level BPE with
`<image>` added as id 1000) and `tokenizer_config.json` (a chat template that writes a message's content as
given), two test images (`red.png` 24 x 20, `noise.png` 18 x 30, drawn from a seeded generator), and
`oracle.json` / `oracle.npz`: CLIPImageProcessor's pixel_values for each image (shortest edge 16, centre
crop 16, OpenAI CLIP mean and std), the chat's prompt ids with each `<image>` expanded to 16, and
`generate`'s greedy tokens (eos `<|endoftext|>`, as the package stops) for a chat with each image, with both
images in one message, and without an image.

Needs torch and transformers, which are not project dependencies; CI never runs this.  Last run in
/work/vision-venv (torch 2.13.0+cpu, transformers 4.46.3, onnx 1.23.2, onnxruntime 1.32.0, numpy 2.4.6,
safetensors 0.8.0, tokenizers 0.20.3, jinja2 3.1.6, pillow 13.0.0):

    /work/vision-venv/bin/python scripts/export_tiny_vlm.py
    loam layout tests/models/tiny_vlm/NAME.onnxtext > tests/models/tiny_vlm/NAME.loam.toml   # each graph

The script checks each graph (`onnx.checker`, full check), reads the text back with its weights, and checks
onnxruntime against torch: the projector on both images, the decoder's greedy tokens (fed the projector's
rows and the embedding's output, one token at a time after the prompt) against `generate`'s.
"""

from __future__ import annotations

import io
import json
import warnings
from pathlib import Path

import jinja2
import numpy as np
import onnx
import onnx.checker
import onnx.parser
import onnx.printer
import onnxruntime as ort
import torch
from onnx import TensorProto, numpy_helper
from onnx.external_data_helper import load_external_data_for_model, set_external_data
from PIL import Image
from safetensors.numpy import save_file
from safetensors_layout import safetensors_offsets
from tokenizers import AddedToken, Tokenizer
from transformers import (
    CLIPImageProcessor,
    CLIPVisionConfig,
    LlamaConfig,
    LlamaForCausalLM,
    LlavaConfig,
    LlavaForConditionalGeneration,
)

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "models" / "tiny_vlm"
PACKAGE = ROOT / "tests" / "serve" / "packages" / "tiny_vlm"
BASE_TOKENIZER = ROOT / "tests" / "serve" / "packages" / "tiny_gpt2" / "tokenizer.json"
SEED = 0
OPSET = 17
IMAGE, PATCH, ROWS = 16, 4, 16
VISION, HIDDEN, LAYERS, HEADS, KV_HEADS, VOCAB = 32, 64, 2, 4, 2, 1001
IMAGE_TOKEN = 1000
EOS = 0
NEW_TOKENS = 16
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
KV = [f"{i}.{kind}" for i in range(LAYERS) for kind in ("key", "value")]
PAST, PRESENT = [f"past_key_values.{kv}" for kv in KV], [f"present.{kv}" for kv in KV]
MEAN, STD = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]
# The chats the oracle answers: (name, user text with <image> where each image goes, images).
CHATS = (
    ("red", "<image>\nWhat is in the picture?", ("red.png",)),
    ("noise", "<image>\nWhat is in the picture?", ("noise.png",)),
    ("both", "Compare <image> with <image> please.", ("red.png", "noise.png")),
    ("text", "What is in the picture?", ()),
)


def make_images() -> dict[str, Image.Image]:
    """Two small RGB images: a red field with a soft gradient, and seeded noise."""
    rng = np.random.default_rng(SEED)
    y, x = np.mgrid[0:20, 0:24]
    red = np.stack([200 + x, 20 + 3 * y, 30 + 2 * x], axis=-1).clip(0, 255).astype(np.uint8)
    noise = rng.integers(0, 256, (30, 18, 3), dtype=np.uint8)
    return {"red.png": Image.fromarray(red, "RGB"), "noise.png": Image.fromarray(noise, "RGB")}


def build_model() -> LlavaForConditionalGeneration:
    torch.manual_seed(SEED)
    vision = CLIPVisionConfig(
        hidden_size=VISION, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        image_size=IMAGE, patch_size=PATCH, projection_dim=VISION,
    )  # fmt: skip
    text = LlamaConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=128, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=256,
        initializer_range=0.2, tie_word_embeddings=False, bos_token_id=1, eos_token_id=EOS, pad_token_id=EOS,
    )  # fmt: skip
    config = LlavaConfig(
        vision_config=vision.to_dict(), text_config=text.to_dict(), image_token_index=IMAGE_TOKEN,
        projector_hidden_act="gelu", vision_feature_select_strategy="default", vision_feature_layer=-2,
        image_seq_length=ROWS, attn_implementation="eager",
    )  # fmt: skip
    config.vision_config._attn_implementation = "eager"
    config.text_config._attn_implementation = "eager"
    model = LlavaForConditionalGeneration(config)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.copy_(1.0 + 0.1 * torch.randn_like(module.weight))
                module.bias.copy_(0.1 * torch.randn_like(module.bias))
        for name, param in model.named_parameters():
            if name.endswith("norm.weight") and "language_model" in name:  # Llama's RMSNorm scales
                param.copy_(1.0 + 0.1 * torch.randn_like(param))
            elif name.endswith("bias") and "norm" not in name:
                param.copy_(0.02 * torch.randn_like(param))
    return model.eval()


class Projector(torch.nn.Module):
    def __init__(self, model: LlavaForConditionalGeneration) -> None:
        super().__init__()
        self.vision_tower = model.vision_tower
        self.multi_modal_projector = model.multi_modal_projector
        self.model = model

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        out = self.vision_tower(pixel_values, output_hidden_states=True)
        selected = out.hidden_states[-2][:, 1:]  # LLaVA's default strategy: the patches, not the class token
        return self.multi_modal_projector(selected)


class Embed(torch.nn.Module):
    def __init__(self, model: LlavaForConditionalGeneration) -> None:
        super().__init__()
        self.embed_tokens = model.language_model.model.embed_tokens

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.embed_tokens(input_ids)


class Decoder(LlamaForCausalLM):
    """The language model over embeddings, with its past as flat tensors (the legacy tuple cache)."""

    def forward(  # type: ignore[override]
        self, inputs_embeds: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor, *past: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        pairs = tuple((past[2 * i], past[2 * i + 1]) for i in range(LAYERS))
        out = super().forward(
            inputs_embeds=inputs_embeds, attention_mask=attention_mask, position_ids=position_ids,
            past_key_values=pairs, use_cache=True, return_dict=True,
        )  # fmt: skip
        return (out.logits, *(t for layer in out.past_key_values for t in layer))


def export(module: torch.nn.Module, args: tuple[torch.Tensor, ...], inputs: list[str], outputs: list[str],
           axes: dict[str, dict[int, str]]) -> onnx.ModelProto:  # fmt: skip
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module, args, buffer, dynamo=False, opset_version=OPSET, do_constant_folding=False,
            input_names=inputs, output_names=outputs, dynamic_axes=axes,
        )  # fmt: skip
    exported = onnx.load_from_string(buffer.getvalue())
    with torch.no_grad():
        traced = module(*args)
    traced = traced if isinstance(traced, tuple) else (traced,)
    for info, value in zip(exported.graph.output, traced, strict=True):  # fixed axes as numbers
        for axis, dim in enumerate(info.type.tensor_type.shape.dim):
            if axis not in axes.get(info.name, {}):
                dim.dim_value = value.shape[axis]
    onnx.checker.check_model(exported, full_check=True)
    return exported


def write_text(name: str, title: str, model: onnx.ModelProto) -> onnx.ModelProto:
    """Write the graph's text with its float initializers as external data in NAME.safetensors; read it back
    and check it is the same model."""
    weights = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer if i.data_type == TensorProto.FLOAT}
    checkpoint = f"{name}.safetensors"
    save_file(weights, str(OUT / checkpoint))
    offsets = safetensors_offsets(OUT / checkpoint)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for init in out.graph.initializer:
        if init.name in weights:
            tensor = numpy_helper.from_array(weights[init.name], init.name)
            offset, length = offsets[init.name]
            set_external_data(tensor, checkpoint, offset=offset, length=length)
            tensor.ClearField("raw_data")
            init.CopyFrom(tensor)
    text = onnx.printer.to_text(out)
    path = OUT / f"{name}.onnxtext"
    header = f"# The tiny LLaVA's {title}; written by scripts/export_tiny_vlm.py. Weights: external data in "
    path.write_text(f"{header}{checkpoint}.\n" + text + ("" if text.endswith("\n") else "\n"), encoding="utf-8")
    reread = onnx.parser.parse_model(path.read_text(encoding="utf-8"))
    load_external_data_for_model(reread, str(OUT))
    onnx.checker.check_model(reread, full_check=True)
    return reread


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def write_tokenizer() -> Tokenizer:
    PACKAGE.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer.from_file(str(BASE_TOKENIZER))
    tokenizer.add_special_tokens([AddedToken("<image>", special=True, normalized=False)])
    assert tokenizer.token_to_id("<image>") == IMAGE_TOKEN
    tokenizer.save(str(PACKAGE / "tokenizer.json"))
    config = {"bos_token": None, "eos_token": "<|endoftext|>", "chat_template": CHAT_TEMPLATE}
    (PACKAGE / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    return Tokenizer.from_file(str(PACKAGE / "tokenizer.json"))


def prompt_ids(tokenizer: Tokenizer, text: str) -> list[int]:
    """The chat's ids as the template renders it, each `<image>` expanded to the projector's rows."""
    rendered = (
        jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
        .from_string(CHAT_TEMPLATE)
        .render(messages=[{"role": "user", "content": text}], add_generation_prompt=True)
    )
    ids = tokenizer.encode(rendered, add_special_tokens=False).ids
    return [t for i in ids for t in ([i] * ROWS if i == IMAGE_TOKEN else [i])]


def ort_greedy(projector: ort.InferenceSession, embed: ort.InferenceSession, decoder: ort.InferenceSession,
               ids: list[int], pixels: np.ndarray | None) -> list[int]:  # fmt: skip
    """Greedy tokens through the three exported graphs, the prompt at once and then a token a step."""
    embeds = embed.run(None, {"input_ids": np.array([ids], np.int64)})[0]
    if pixels is not None:
        rows = projector.run(None, {"pixel_values": pixels})[0].reshape(-1, HIDDEN)
        embeds[0, np.array(ids) == IMAGE_TOKEN] = rows
    past = {name: np.zeros((1, KV_HEADS, 0, HIDDEN // HEADS), np.float32) for name in PAST}
    length, out = 0, []
    while len(out) < NEW_TOKENS:
        span = embeds.shape[1]
        feeds = {
            "inputs_embeds": embeds,
            "attention_mask": np.ones((1, length + span), np.int64),
            "position_ids": np.arange(length, length + span, dtype=np.int64)[None],
            **past,
        }
        logits, *presents = decoder.run(None, feeds)
        past = dict(zip(PAST, presents, strict=True))
        length += span
        token = int(logits[0, -1].argmax())
        out.append(token)
        if token == EOS:
            break
        embeds = embed.run(None, {"input_ids": np.array([[token]], np.int64)})[0]
    return out


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    tokenizer = write_tokenizer()
    images = make_images()
    for name, image in images.items():
        image.save(OUT / name, format="PNG")
    model = build_model()
    processor = CLIPImageProcessor(
        size={"shortest_edge": IMAGE}, crop_size={"height": IMAGE, "width": IMAGE}, image_mean=MEAN, image_std=STD
    )
    loaded = {name: Image.open(OUT / name) for name in images}
    pixels = {name: processor(images=image, return_tensors="np")["pixel_values"] for name, image in loaded.items()}

    projector_model = Projector(model).eval()
    both = torch.from_numpy(np.concatenate([pixels["red.png"], pixels["noise.png"]]))
    projector = write_text(
        "projector", "vision tower and projector",
        export(projector_model, (both,), ["pixel_values"], ["image_rows"],
               {"pixel_values": {0: "batch_size"}, "image_rows": {0: "batch_size"}}),
    )  # fmt: skip
    embed_model = Embed(model).eval()
    ids = torch.tensor([[5, 6, 7], [8, 9, 10]])
    embed = write_text(
        "embed", "token embedding",
        export(embed_model, (ids,), ["input_ids"], ["inputs_embeds"],
               {"input_ids": {0: "batch_size", 1: "sequence_length"},
                "inputs_embeds": {0: "batch_size", 1: "sequence_length"}}),
    )  # fmt: skip
    decoder_model = Decoder(model.language_model.config).eval()
    decoder_model.load_state_dict(model.language_model.state_dict())
    total = "past_sequence_length + sequence_length"
    past = [torch.randn(2, KV_HEADS, 3, HIDDEN // HEADS) for _ in KV]
    decoder = write_text(
        "decoder", "language model over embeddings",
        export(
            decoder_model,
            (torch.randn(2, 2, HIDDEN), torch.ones(2, 5, dtype=torch.int64), torch.tensor([[3, 4], [1, 2]]), *past),
            ["inputs_embeds", "attention_mask", "position_ids", *PAST], ["logits", *PRESENT],
            {"inputs_embeds": {0: "batch_size", 1: "sequence_length"}, "attention_mask": {0: "batch_size", 1: total},
             "position_ids": {0: "batch_size", 1: "sequence_length"}, "logits": {0: "batch_size", 1: "sequence_length"},
             **{name: {0: "batch_size", 2: "past_sequence_length"} for name in PAST},
             **{name: {0: "batch_size", 2: total} for name in PRESENT}},
        ),
    )  # fmt: skip

    sessions = session(projector), session(embed), session(decoder)
    with torch.no_grad():
        want = projector_model(both).numpy()
    got = sessions[0].run(None, {"pixel_values": both.numpy()})[0]
    print(f"projector: |torch - ort| {np.abs(got - want).max():.1e}, max |torch| {np.abs(want).max():.2f}")
    assert np.abs(got - want).max() < 1e-4

    oracle: dict[str, object] = {"image_token": IMAGE_TOKEN, "rows": ROWS, "eos": EOS, "max_tokens": NEW_TOKENS}
    arrays = {f"pixel_values/{name}": p for name, p in pixels.items()}
    chats = {}
    for name, text, used in CHATS:
        prompt = prompt_ids(tokenizer, text)
        feeds = np.concatenate([pixels[u] for u in used]) if used else None
        # Without an image LLaVA's legacy path wants pixels: the language model answers alone, as LLaVA does.
        generate = model.generate if used else model.language_model.generate
        with torch.no_grad():
            generated = generate(
                input_ids=torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.int64),
                **({} if feeds is None else {"pixel_values": torch.from_numpy(feeds)}), max_new_tokens=NEW_TOKENS,
                do_sample=False, eos_token_id=EOS, pad_token_id=EOS,
            )  # fmt: skip
        tokens = generated[0, len(prompt) :].tolist()
        through_ort = ort_greedy(*sessions, prompt, feeds)
        print(f"{name}: {len(prompt)} prompt ids, generate {tokens}, onnxruntime {through_ort}")
        assert tokens == through_ort, name
        chats[name] = {"text": text, "images": list(used), "prompt": prompt, "tokens": tokens}
    assert chats["red"]["tokens"] != chats["noise"]["tokens"], "the answer must depend on the image"
    oracle["chats"] = chats
    oracle["processor"] = {"shortest_edge": IMAGE, "crop": IMAGE, "mean": MEAN, "std": STD}
    (OUT / "oracle.json").write_text(json.dumps(oracle, indent=1) + "\n", encoding="utf-8")
    np.savez(OUT / "oracle.npz", **arrays)


if __name__ == "__main__":
    main()
