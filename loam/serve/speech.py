"""The speech role: a Piper voice speaking text, sentence by sentence, as a continuing request.

A package names its voice's graph as the stage `voice` and its Piper config (`voice`, default the graph's
name plus `.json`: `phoneme_id_map`, `audio.sample_rate`, `espeak.voice`, the `inference` scales,
`num_speakers` and `speaker_id_map`), and may bound a request's text (`max_characters`):

    {"role": "speech", "stages": {"voice": {"graph": "en_US-joe-medium.onnx", "options": "loam.toml"}},
     "voice": "en_US-joe-medium.onnx.json", "max_characters": 4096,
     "capacities": {"batch_units": 512, "resident_requests": 16, "output_bytes": 262144}}

`PiperSpeech` is the role's control on the continuing contract (`loam.serve.stream`):

- `prepare_request` checks the text (`input`: not empty, at most `max_characters`), the `voice` (a speaker's
  name or id for a voice of several speakers, the voice's own name, its config's `dataset`, for one), the
  `speed` (0.25 to 4: the length scale is the voice's divided by it) and the `seed`, phonemizes the text
  (`loam.serve.phonemes`) and keeps each sentence's phoneme ids as immutable bytes;
- `prepare_work` offers the request's next sentence, its units the sentence's ids;
- `generate` runs each member's sentence through the voice, one forward per member, each with its own
  generator; `complete` publishes the sentence's `AudioBlock` at the request's playback position.

Why one forward per member: Piper draws its noise per tensor (RandomNormalLike over the batch's padded
extents), so rows of one batched forward share one generator, and a row's noise depends on its
neighbours' lengths and places.  A row's samples must not depend on its neighbours, and a batch that is
exact needs rows of one length each with a generator of its own, which the module's `kernel.random` does
not have.  Nor would batching buy time on a CPU: two rows of one 66,560-sample sentence took 0.66 s in one
forward and 0.67 s in two (this 2-core VM).  So a cohort is the members' forwards one after another in one
`generate`: one module and one set of weights, each member's samples exactly those it gets alone.  The
seed of sentence k of a request seeded s is `SeedSequence((s, k))`'s: the request's noise repeats whatever
its neighbours, its scheduling or the sentences before it.

Conditioning: a Piper voice of several speakers takes the speaker id as a graph input (`sid`) and looks
its embedding up inside the forward, one row of the voice's weights: there is no conditioning computed
outside the graph to produce, publish or share.  A request's voice is the id it keeps; what requests
share is the module and its weights.
"""

from __future__ import annotations

import inspect
import json
import secrets
import struct
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, cast

import numpy as np

from loam.serve import phonemes
from loam.serve.metrics import ModelMetrics
from loam.serve.scheduler import ServeError
from loam.serve.spec import Package, PackageError, Stage, refuse_control
from loam.serve.stream import Completion, InputView, Member, StreamControl, StreamWorker, Work

STAGE = "voice"
MAX_CHARACTERS = 4096
"""A request's text at most, unless the package says `max_characters` (OpenAI's own limit)."""
SPEEDS = (0.25, 4.0)
"""The speeds a request may ask for (OpenAI's range)."""
SEEDS = 1 << 63
_INDEX = struct.Struct("<q")


@dataclass(frozen=True)
class Voice:
    """A Piper voice's config, as the role reads it."""

    name: str  # the voice's own name (its `dataset`): what a request names a voice of one speaker by
    sample_rate: int
    espeak: str
    id_map: Mapping[str, Sequence[int]]
    scales: tuple[float, float, float]  # noise_scale, length_scale, noise_w
    speakers: int
    speaker_ids: Mapping[str, int] = field(default_factory=dict)

    def speaker(self, voice: str) -> int | None:
        """The speaker id `voice` names (None for a voice of one speaker); a ServeError naming `voice` otherwise."""
        if self.speakers <= 1:
            if voice != self.name:
                raise ServeError(
                    f"'voice' must be {self.name!r} (this voice has one speaker), got {voice!r}", param="voice"
                )
            return None
        if voice in self.speaker_ids:
            return self.speaker_ids[voice]
        if voice.isascii() and voice.isdigit() and int(voice) < self.speakers:
            return int(voice)
        names = ", ".join(sorted(self.speaker_ids)[:8])
        raise ServeError(
            f"'voice' must name one of the voice's {self.speakers} speakers (an id below {self.speakers} or a name: "
            f"{names}{', ...' if len(self.speaker_ids) > 8 else ''}), got {voice!r}",
            param="voice",
        )


def read_voice(path: Path, default_name: str) -> Voice:
    """The Piper config at `path`; a PackageError naming the file and the key where it is malformed."""
    try:
        table = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise PackageError(f"{path}: not a readable Piper voice config ({err})") from None

    def get(key: str, kind: type | tuple[type, ...], value: object) -> object:
        if not isinstance(value, kind) or isinstance(value, bool):
            raise PackageError(f"{path}: key '{key}' is missing or malformed (got {json.dumps(value)[:80]})")
        return value

    if not isinstance(table, dict):
        raise PackageError(f"{path}: a Piper voice config is a JSON object")
    id_map = cast(dict[str, object], get("phoneme_id_map", dict, table.get("phoneme_id_map")))
    for key in (phonemes.BOS, phonemes.EOS, phonemes.PAD):
        ids = id_map.get(key)
        if not isinstance(ids, list) or not ids or not all(isinstance(i, int) for i in ids):
            raise PackageError(f"{path}: key 'phoneme_id_map' lacks {key!r} (a list of ids)")
    audio = cast(dict[str, object], get("audio", dict, table.get("audio")))
    espeak = cast(dict[str, object], get("espeak", dict, table.get("espeak")))
    inference = cast(dict[str, object], get("inference", dict, table.get("inference", {})))
    scales = tuple(
        float(cast(float, get(f"inference.{key}", (int, float), inference.get(key, default))))
        for key, default in (("noise_scale", 0.667), ("length_scale", 1.0), ("noise_w", 0.8))
    )
    speaker_ids = cast(dict[str, int], get("speaker_id_map", dict, table.get("speaker_id_map", {})))
    return Voice(
        name=str(get("dataset", str, table.get("dataset", default_name))),
        sample_rate=cast(int, get("audio.sample_rate", int, audio.get("sample_rate"))),
        espeak=cast(str, get("espeak.voice", str, espeak.get("voice"))),
        id_map=cast(Mapping[str, Sequence[int]], id_map),
        scales=(scales[0], scales[1], scales[2]),
        speakers=cast(int, get("num_speakers", int, table.get("num_speakers", 1))),
        speaker_ids=speaker_ids,
    )


class SeededModule(Protocol):
    """A module whose forward draws random numbers, and so takes the `seed` of its generator."""

    def forward(self, weights: object, *inputs: np.ndarray, seed: int | None = None) -> np.ndarray: ...


@dataclass(frozen=True)
class SpeechState:
    """What `PiperSpeech.prepare` settles: the voice's stage, its config and the package's limits."""

    stage: Stage
    module: SeededModule
    voice: Voice
    max_characters: int
    takes_speaker: bool  # the graph has the `sid` input


@dataclass(frozen=True)
class SpeechParams:
    """A speech request as the HTTP route reads it."""

    input: str
    voice: str
    speed: float = 1.0
    seed: int | None = None


@dataclass
class SpeechRequest:
    """A request's state: its sentences' ids (immutable bytes, int64), its voice and scales, its seed, and how
    far it has spoken (the next sentence, and the playback position in samples)."""

    sentences: tuple[bytes, ...]
    speaker: int | None
    scales: tuple[float, float, float]
    seed: int
    next: int = 0
    position: int = 0

    def ids(self, index: int) -> np.ndarray:
        return np.frombuffer(self.sentences[index], "<i8")


@dataclass(frozen=True)
class AudioBlock:
    """One sentence's audio: `frames` mono f32 samples at playback position `start`; `eof` on the request's last.
    `seconds` is the forward's time (for the real-time factor)."""

    samples: np.ndarray
    start: int
    frames: int
    eof: bool
    seconds: float = 0.0

    @property
    def nbytes(self) -> int:
        return int(self.samples.nbytes)


@dataclass(frozen=True)
class Sentence:
    """One member's part of a cohort: sentence `index` of `request`, with the seed of its generator."""

    request: SpeechRequest
    index: int
    seed: int


def sentence_seed(seed: int, index: int) -> int:
    """The generator seed of sentence `index` of a request seeded `seed`: independent of every other request."""
    return int(np.random.SeedSequence((seed, index)).generate_state(1, np.uint64)[0])


class PiperSpeech:
    """The speech role's built-in control (see the module docstring)."""

    def prepare(self, package: Package) -> SpeechState:
        keys = package.spec.role_keys
        where = package.spec.folder / "model.json"
        if STAGE not in package.stages:
            raise PackageError(f"{where}: a speech package has a stage {STAGE!r} (the voice's graph)")
        stage = package.stages[STAGE]
        voice_key = keys.get("voice", stage.spec.graph.name + ".json")
        if not isinstance(voice_key, str):
            raise PackageError(f"{where}: key 'voice' must be the path of the voice's Piper config")
        limit = keys.get("max_characters", MAX_CHARACTERS)
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise PackageError(f"{where}: key 'max_characters' must be a positive integer, got {limit!r}")
        voice = read_voice(package.spec.folder / voice_key, package.spec.name)
        names = [name for name, _, _ in stage.inputs]
        wanted = ["input", "input_lengths", "scales"]
        if names[:3] != wanted or names[3:] not in ([], ["sid"]):
            raise PackageError(f"{where}: stage {STAGE!r} takes {names}, where a Piper voice takes {wanted} (and sid)")
        if voice.speakers > 1 and names[3:] != ["sid"]:
            raise PackageError(f"{where}: the voice has {voice.speakers} speakers but its graph takes no 'sid'")
        if "seed" not in inspect.signature(stage.module.forward).parameters:
            raise PackageError(f"{where}: stage {STAGE!r} draws no noise (its forward takes no seed), as Piper's does")
        # The signature just checked: this module's forward takes its generator's seed.
        module = cast(SeededModule, stage.module)
        phonemes.sentences("", voice.espeak)  # espeak-ng is installed: refused at registration, not per request
        return SpeechState(stage, module, voice, limit, names[3:] == ["sid"])

    def prepare_request(self, state: object, params: object) -> SpeechRequest:
        assert isinstance(state, SpeechState) and isinstance(params, SpeechParams)
        text = params.input
        if not text.strip():
            raise ServeError("'input' is empty: there is nothing to speak", param="input")
        if len(text) > state.max_characters:
            raise ServeError(
                f"'input' has {len(text)} characters; this voice speaks at most {state.max_characters} a request",
                status=413,
                param="input",
            )
        speaker = state.voice.speaker(params.voice)
        low, high = SPEEDS
        if not low <= params.speed <= high:
            raise ServeError(f"'speed' must be in [{low}, {high}], got {params.speed}", param="speed")
        seed = secrets.randbelow(SEEDS) if params.seed is None else params.seed
        if not 0 <= seed < SEEDS:
            raise ServeError(f"'seed' must be in [0, 2**63), got {seed}", param="seed")
        found = phonemes.sentences(text, state.voice.espeak)
        if not any(p.strip() for sentence in found for p in sentence):
            raise ServeError("'input' has no words to speak", param="input")
        ids = tuple(np.asarray(phonemes.phoneme_ids(s, state.voice.id_map), "<i8").tobytes() for s in found)
        noise, length, noise_w = state.voice.scales
        return SpeechRequest(ids, speaker, (noise, length / params.speed, noise_w), seed)

    def prepare_work(self, state: object, request: object, view: InputView) -> Work:
        assert isinstance(request, SpeechRequest)
        if request.next >= len(request.sentences):
            return Work(b"", 0, "sentence")
        # Every sentence may share a cohort: each member runs its own forward (see the module docstring).
        return Work(_INDEX.pack(request.next), len(request.ids(request.next)), "sentence")

    def prepare_batch(self, state: object, members: Sequence[Member]) -> tuple[Sentence, ...]:
        plan = []
        for member in members:
            request = member.request
            assert isinstance(request, SpeechRequest)
            (index,) = _INDEX.unpack(member.work.data)
            plan.append(Sentence(request, index, sentence_seed(request.seed, index)))
        return tuple(plan)

    def generate(self, state: object, plan: object) -> tuple[tuple[np.ndarray, float], ...]:
        assert isinstance(state, SpeechState) and isinstance(plan, tuple)
        out = []
        for sentence in plan:
            assert isinstance(sentence, Sentence)
            started = time.perf_counter()
            samples = speak(state, sentence.request, sentence.index, sentence.seed)
            out.append((samples, time.perf_counter() - started))
        return tuple(out)

    def complete(self, state: object, plan: object, result: object, ordinal: int) -> Completion:
        assert isinstance(plan, tuple) and isinstance(result, tuple)
        sentence = plan[ordinal]
        samples, seconds = result[ordinal]
        assert isinstance(sentence, Sentence) and isinstance(samples, np.ndarray)
        request = sentence.request
        assert request.next == sentence.index, "a request's sentences complete in order"
        request.next += 1
        block = AudioBlock(samples, request.position, len(samples), request.next == len(request.sentences), seconds)
        request.position += len(samples)
        return Completion(events=(block,), done=block.eof)

    def release(self, state: object, request: object) -> None:
        """A request holds nothing beyond its own state."""


def speak(state: SpeechState, request: SpeechRequest, index: int, seed: int) -> np.ndarray:
    """Sentence `index` of `request` through the voice, its noise drawn from `seed`'s generator: f32 samples."""
    ids = request.ids(index)[None, :]
    inputs = [ids, np.array([ids.shape[1]], np.int64), np.array(request.scales, np.float32)]
    if state.takes_speaker:
        inputs.append(np.array([request.speaker or 0], np.int64))
    out = state.module.forward(state.stage.weights, *inputs, seed=seed)
    return np.ascontiguousarray(np.asarray(out, np.float32).reshape(-1))


def serve_speech(package: Package, control: object, metrics: ModelMetrics) -> StreamWorker:
    """The speech role's worker for `package`, once its control is seen to provide the continuing contract."""
    if not isinstance(control, StreamControl):
        raise refuse_control(package, StreamControl)
    return StreamWorker(package.spec.name, metrics, control, control.prepare(package), package.spec.capacities)
