"""Export a tiny random Whisper with optimum as speech recognizers ship it: three files into tests/models/whisper/
(dev-time only; files committed).

Why this script exists: a Whisper deployment runs three ONNX graphs, which optimum's exporter writes:
the encoder (log-mel features to hidden states, once per 30 s of audio), the decoder (the prompt's
tokens and the encoder's states to logits and the key/value cache) and the decoder with past (one new
token against that cache, whose length grows each step).  Their batch, token and past lengths are
symbols; the tests in tests/models/whisper/ build each graph once and compare the module with
onnxruntime at several extents.  The model is tiny (width 64, 2 encoder and 2 decoder layers, 4
heads, vocabulary 1000) but keeps the real model's mel bins (80), strided convolutions and
max_source_positions (1500: 30 s of audio, 3000 mel frames, is one encoder call), so each checkpoint
stays under a megabyte.

Needs torch, transformers and optimum, which are not project dependencies; CI never runs this script.
The dev-time environment it was last run in (a venv outside the repository, optimum installed without
its dependencies so that pip cannot swap torch):

    python3.11 -m venv /work/vision-venv
    /work/vision-venv/bin/pip install torch==2.13.0 transformers==4.46.3 onnx==1.23.2 \
        onnxruntime==1.32.0 numpy==2.4.6 safetensors==0.8.0
    /work/vision-venv/bin/pip install --no-deps --target /work/whisper-extra optimum==1.24.0
    PYTHONPATH=/work/whisper-extra /work/vision-venv/bin/python scripts/export_whisper.py   # about 15 s

optimum 1.24 is the last release line with `legacy=True` (the three separate files rather than the
encoder and a merged decoder) and imports with transformers 4.46.3 (`pip install --dry-run` adds
optimum alone); it calls `torch.onnx.export` without `dynamo=`, which meant the TorchScript exporter
when it was released, so this script restores that default (`dynamo=False`), as
scripts/export_optimum_gpt2.py does.  The export is `main_export(task=
"automatic-speech-recognition-with-past", legacy=True, no_post_process=True)`: opset 14 (optimum's
default for Whisper), constant folding on, optimum's own dynamic axes and names, and its validation
against torch.  transformers 4.46's Whisper encoder checks that its
input has 3000 frames, so optimum's encoder fixes `input_features` at [batch_size, 80, 3000]: the
frame count is not free in the graph real exporters write.  The decoder with past takes
`cache_position` (the new token's position) besides the cache, as transformers 4.46 does.

Weights: `torch.manual_seed(0)`, WhisperForConditionalGeneration's own random init with init_std 0.2
(not 0.02: the logits then have magnitude about 1, far above the tests' tolerance, rather than 0.05),
then every LayerNorm scale (1 + 0.1·N(0,1)), shift (0.1·N(0,1)) and bias (0.02·N(0,1)) is redrawn: the
library starts them at ones and zeros, so a module that dropped one could still match, and the
exporter would merge equal-valued initializers into one name.  The encoder's positional embedding is
Whisper's fixed sinusoid.  Every float initializer is renamed after the parameter it holds, found by
content: its `state_dict()` name, or `NAME.T` for a Linear's weight the exporter stored transposed
(the output projection, tied to the token embedding, is `model.decoder.embed_tokens.weight.T`).  A
float initializer that is neither stops the script.

Files written, for each MODEL in `encoder_model`, `decoder_model`, `decoder_with_past_model` (the
folder's README.md lists their inputs and outputs):

- `MODEL.onnxtext`: the graph in ONNX's text form, its weights external data in `MODEL.safetensors`;
- `MODEL.safetensors`: every float initializer of the graph, by its (renamed) ONNX name.

The script checks each graph (`onnx.checker`, full check), reads the text back with its weights and
checks that onnxruntime gives bit-identical outputs to optimum's file, checks the encoder's and the
decoder's outputs against torch, and checks that the decoder with past, fed the decoder's cache of
the first tokens and the next one, gives the decoder's logits for that token (SystemExit where any
differs by more than TORCH_ATOL relative to the output's largest magnitude).  No oracle file is
written: the tests run onnxruntime themselves.
"""

from __future__ import annotations

import functools
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnx.checker
import onnx.parser
import onnx.printer
import onnxruntime as ort
import safetensors
import torch
import transformers
from onnx import TensorProto, numpy_helper
from onnx.external_data_helper import load_external_data_for_model, set_external_data
from safetensors.numpy import save_file
from safetensors_layout import safetensors_offsets
from transformers import WhisperConfig, WhisperForConditionalGeneration

OUT = Path(__file__).resolve().parent.parent / "tests" / "models" / "whisper"
SEED = 0
TORCH_ATOL = 1e-4
"""onnxruntime against torch: the largest |difference| over the output's largest |value|."""
MODELS = ("encoder_model", "decoder_model", "decoder_with_past_model")
MELS, FRAMES, LAYERS, HEADS, WIDTH, VOCAB = 80, 3000, 2, 4, 64, 1000


def whisper() -> WhisperForConditionalGeneration:
    """The tiny Whisper with seeded random weights (LayerNorms and biases redrawn, see the docstring)."""
    torch.manual_seed(SEED)
    config = WhisperConfig(
        vocab_size=VOCAB,
        num_mel_bins=MELS,
        d_model=WIDTH,
        encoder_layers=LAYERS,
        decoder_layers=LAYERS,
        encoder_attention_heads=HEADS,
        decoder_attention_heads=HEADS,
        encoder_ffn_dim=4 * WIDTH,
        decoder_ffn_dim=4 * WIDTH,
        max_source_positions=1500,
        max_target_positions=448,
        init_std=0.2,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
        suppress_tokens=[],
        begin_suppress_tokens=[],
        attn_implementation="eager",
    )
    model = WhisperForConditionalGeneration(config)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.copy_(1.0 + 0.1 * torch.randn_like(module.weight))
                module.bias.copy_(0.1 * torch.randn_like(module.bias))
        for name, param in model.named_parameters():
            if name.endswith("bias") and "layer_norm" not in name:
                param.copy_(0.02 * torch.randn_like(param))
    return model.eval()


def export(model: WhisperForConditionalGeneration, work: Path) -> dict[str, onnx.ModelProto]:
    """optimum's three files for `model`, read back from `work`."""
    torch.onnx.export = functools.partial(torch.onnx.export, dynamo=False)  # optimum 1.24's default exporter
    from optimum.exporters.onnx import main_export

    source, target = work / "whisper", work / "onnx"
    model.save_pretrained(source)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        main_export(
            str(source),
            output=str(target),
            task="automatic-speech-recognition-with-past",
            legacy=True,
            no_post_process=True,
        )
    return {name: onnx.load(str(target / f"{name}.onnx")) for name in MODELS}


def parameter_names(model: torch.nn.Module) -> dict[tuple[tuple[int, ...], bytes], str]:
    """Parameter names by content: each parameter, and the transpose of each 2-D one (first name wins,
    so the tied output projection is named after the token embedding)."""
    names: dict[tuple[tuple[int, ...], bytes], str] = {}
    for name, param in model.state_dict().items():
        array = param.detach().numpy()
        names.setdefault((array.shape, array.tobytes()), name)
        if array.ndim == 2:
            transposed = np.ascontiguousarray(array.T)
            names.setdefault((transposed.shape, transposed.tobytes()), f"{name}.T")
    return names


def rename_initializers(model: onnx.ModelProto, names: dict[tuple[tuple[int, ...], bytes], str]) -> None:
    """Give every float initializer the name of the parameter it is (see parameter_names)."""
    renamed: dict[str, str] = {}
    for init in model.graph.initializer:
        if init.data_type != TensorProto.FLOAT:
            continue
        array = numpy_helper.to_array(init)
        new = names.get((array.shape, array.tobytes()))
        if new is None or new in renamed.values():
            raise SystemExit(f"float initializer {init.name} {list(array.shape)} is no parameter")
        renamed[init.name] = new
        init.name = new
    for node in model.graph.node:
        node.input[:] = [renamed.get(name, name) for name in node.input]


def write_text(path: Path, model: onnx.ModelProto, checkpoint: Path, title: str) -> onnx.ModelProto:
    """Write the graph's text to `path` with its float initializers as external data in `checkpoint` (a
    safetensors file holding them, which the text names without its folder), read it back, check it is
    the same model, and return the reread model with the weights loaded from `checkpoint`."""
    weights = float_initializers(model)
    offsets = safetensors_offsets(checkpoint)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for init in out.graph.initializer:
        if init.name not in weights:
            continue
        tensor = numpy_helper.from_array(weights[init.name], init.name)
        offset, length = offsets[init.name]
        set_external_data(tensor, checkpoint.name, offset=offset, length=length)
        tensor.ClearField("raw_data")
        init.CopyFrom(tensor)
    text = onnx.printer.to_text(out)
    path.write_text(f"# {title}\n" + text + ("" if text.endswith("\n") else "\n"), encoding="utf-8")
    reread = onnx.parser.parse_model(path.read_text(encoding="utf-8"))
    load_external_data_for_model(reread, str(checkpoint.parent))
    onnx.checker.check_model(reread, full_check=True)
    for init in reread.graph.initializer:
        if init.name in weights:
            np.testing.assert_array_equal(numpy_helper.to_array(init), weights[init.name])
    return reread


def float_initializers(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {i.name: numpy_helper.to_array(i) for i in model.graph.initializer if i.data_type == TensorProto.FLOAT}


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # as loam.testing runs it
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def close(what: str, got: np.ndarray, want: np.ndarray) -> str:
    assert got.shape == want.shape, (what, got.shape, want.shape)
    diff, scale = float(np.abs(got - want).max()), float(np.abs(want).max())
    if not diff <= TORCH_ATOL * max(scale, 1.0):
        raise SystemExit(f"{what}: differ by {diff} (largest |value| {scale})")
    return f"{what} {list(got.shape)}: |difference| {diff:.1e}, max |value| {scale:.2f}"


def feeds(batch: int, tokens: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(SEED + batch)
    features = rng.standard_normal((batch, MELS, FRAMES), dtype=np.float32)
    ids = rng.integers(3, VOCAB, (batch, tokens), dtype=np.int64)
    ids[:, 0] = 1  # the decoder's start token
    return features, ids


def same_outputs(a: ort.InferenceSession, b: ort.InferenceSession) -> None:
    """Both sessions give bit-identical outputs on one feed (batch 2, 3 tokens or 1 after a past of 5)."""
    rng = np.random.default_rng(SEED)
    shapes = {"batch_size": 2, "decoder_sequence_length": 3, "past_decoder_sequence_length": 5}
    shapes |= {"encoder_sequence_length / 2": FRAMES // 2, "encoder_sequence_length_out": FRAMES // 2}
    feed = {}
    for info in a.get_inputs():
        shape = [d if isinstance(d, int) else shapes[d] for d in info.shape]
        if info.name == "cache_position":  # the new token's position: just after the past
            feed[info.name] = np.array([shapes["past_decoder_sequence_length"]], np.int64)
        elif info.type == "tensor(int64)":
            feed[info.name] = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape) % VOCAB
        else:
            feed[info.name] = rng.standard_normal(shape, dtype=np.float32)
    for got, want in zip(b.run(None, feed), a.run(None, feed), strict=True):
        np.testing.assert_array_equal(got, want)


def check(model: WhisperForConditionalGeneration, sessions: dict[str, ort.InferenceSession]) -> list[str]:
    """The encoder and the decoder against torch, and the decoder with past against the decoder."""
    lines = []
    encoder, decoder, with_past = (sessions[name] for name in MODELS)
    for batch, tokens in ((1, 4), (2, 6)):
        features, ids = feeds(batch, tokens)
        (states,) = encoder.run(None, {"input_features": features})
        with torch.no_grad():
            want = model.model.encoder(torch.from_numpy(features)).last_hidden_state.numpy()
            logits = model(encoder_outputs=(torch.from_numpy(states),), decoder_input_ids=torch.from_numpy(ids)).logits
        lines.append(close(f"encoder batch {batch}: torch, onnxruntime", states, want))
        first = decoder.run(None, {"input_ids": ids[:, :-1], "encoder_hidden_states": states})
        full = decoder.run(None, {"input_ids": ids, "encoder_hidden_states": states})
        lines.append(close(f"decoder {ids.shape}: torch, onnxruntime", full[0], logits.numpy()))
        past_names = [i.name for i in with_past.get_inputs() if i.name.startswith("past_key_values.")]
        step = with_past.run(
            None,
            {
                "input_ids": ids[:, -1:],
                "cache_position": np.array([tokens - 1], np.int64),
                **dict(zip(past_names, first[1:], strict=True)),
            },
        )
        lines.append(close(f"decoder with past {tokens - 1} + 1: decoder's last row", step[0], full[0][:, -1:]))
    return lines


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    model = whisper()
    names = parameter_names(model)
    with tempfile.TemporaryDirectory() as work:
        exported = export(model, Path(work))
    sessions, lines = {}, []
    for name, proto in exported.items():
        original = session(proto)
        rename_initializers(proto, names)
        onnx.checker.check_model(proto, full_check=True)
        checkpoint = OUT / f"{name}.safetensors"
        save_file(float_initializers(proto), str(checkpoint))
        title = f"optimum's {name} of a tiny Whisper; written by scripts/export_whisper.py. Weights: external data in "
        sessions[name] = session(write_text(OUT / f"{name}.onnxtext", proto, checkpoint, f"{title}{checkpoint.name}."))
        same_outputs(original, sessions[name])
        size = (OUT / f"{name}.safetensors").stat().st_size
        ops = sorted({node.op_type for node in proto.graph.node})
        lines.append(f"{name}: {len(proto.graph.node)} nodes, {size} bytes of weights, ops {' '.join(ops)}")
    lines += check(model, sessions)
    for line in lines:
        print(line)
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, onnx {onnx.__version__}, "
        f"onnxruntime {ort.__version__}, safetensors {safetensors.__version__}, numpy {np.__version__}"
    )
    print(f"wrote {', '.join(sorted(p.name for p in OUT.iterdir() if p.suffix in ('.onnxtext', '.safetensors')))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
