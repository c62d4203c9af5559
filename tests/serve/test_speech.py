"""The speech role (loam.serve.speech, speech_http) with a real Piper voice: each sentence's samples are
onnxruntime's on the same ids and the noise Loam drew; served on 127.0.0.1, every stream (staggered, of
other lengths, voices' speeds and seeds, sixteen at once, beside a stalled reader or a cancelled request
whose row is reused) equals the same request run alone, and every malformed request is refused naming its
field."""

from __future__ import annotations

import base64
import io
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import onnx
import pytest

from loam.core.errors import LoamError
from loam.serve import phonemes
from loam.serve.cli import Listener
from loam.serve.scheduler import Event, Request, ServeError
from loam.serve.server import Server
from loam.serve.spec import PackageError
from loam.serve.speech import (
    AudioBlock,
    SpeechParams,
    SpeechRequest,
    SpeechState,
    read_voice,
    sentence_seed,
    speak,
)
from loam.serve.stream import StreamRequest, StreamWorker
from tests.models.real_exports import exports, piper
from tests.serve.audio_packages import speech_package
from tests.serve.serving import serving

pytestmark = pytest.mark.xdist_group("speech")
pytest.importorskip("piper.espeakbridge")

NAME = "joe"
TEXTS = [
    "Hello world.",
    "This sentence is longer than the first, and it has a comma. Then a second one!",
    "Is it seven?",
    "Numbers like 42 and 3.5 are spoken too.",
]
HOP = 256  # samples per latent frame: the decoder's three ConvTransposes, strides 8, 8 and 4
LATENT = 192  # the flow's channels, which the second noise draw covers


@pytest.fixture(scope="module")
def voice_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A speech package over the installed Piper voice: its graph and config, and the layout Loam drafts."""
    return speech_package(tmp_path_factory.mktemp("piper"), name=NAME, max_characters=400)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, voice_folder: Path) -> Iterator[Server]:
    with serving(tmp_path_factory, voice_folder) as served:
        yield served


@pytest.fixture(scope="module")
def url(server: Server) -> Iterator[str]:
    with Listener(server) as listener:
        yield listener.url


def worker_of(server: Server) -> StreamWorker:
    worker = server.models[NAME].worker
    assert isinstance(worker, StreamWorker)
    return worker


def open_request(
    worker: StreamWorker, text: str, seed: int, speed: float = 1.0
) -> tuple[StreamRequest, Iterator[Event]]:
    sink, drain = Request.collector()
    return worker.open(SpeechParams(text, NAME, speed, seed), sink), drain(120.0)


def blocks(worker: StreamWorker, request: StreamRequest, events: Iterator[Event]) -> tuple[list[AudioBlock], Event]:
    """A request's audio blocks, each taken by the reader as it arrives, and its last event."""
    found = []
    for event in events:
        if event.kind == "event":
            assert isinstance(event.value, AudioBlock)
            found.append(event.value)
            worker.consumed(request, event.size)
        elif event.kind in ("done", "error"):
            return found, event
    raise AssertionError("the request never ended")


def waveform(found: list[AudioBlock]) -> np.ndarray:
    """The blocks joined, each seen to start where the one before ended, the last one (only) at EOF."""
    position = 0
    for index, block in enumerate(found):
        assert block.start == position and block.frames == len(block.samples) > 0
        assert block.eof == (index == len(found) - 1)
        position += block.frames
    return np.concatenate([b.samples for b in found])


def alone(worker: StreamWorker, text: str, seed: int, speed: float = 1.0) -> np.ndarray:
    request, events = open_request(worker, text, seed, speed)
    found, end = blocks(worker, request, events)
    assert end.kind == "done", end.text
    return waveform(found)


# -- numerics -----------------------------------------------------------------------------------------------------


def noise_fed_session() -> object:
    """onnxruntime on the voice with its two RandomNormalLike nodes replaced by inputs of the same names, so the
    noise Loam drew can be fed to it."""
    import onnxruntime as ort

    model = onnx.load(str(exports.package_file(piper.PACKAGE, piper.MODEL)))
    for node in [n for n in model.graph.node if n.op_type == "RandomNormalLike"]:
        model.graph.node.remove(node)
        model.graph.input.append(onnx.helper.make_tensor_value_info(node.output[0], onnx.TensorProto.FLOAT, None))
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def test_each_sentence_is_onnxruntimes_on_the_same_ids_and_noise(server: Server) -> None:
    """Loam's forward draws the duration noise (over the ids) then the flow's (over the frames) from the
    sentence's generator; onnxruntime given the same two draws speaks the same samples."""
    worker = worker_of(server)
    state = worker.state
    assert isinstance(state, SpeechState)
    request = worker.control.prepare_request(state, SpeechParams(TEXTS[1], NAME, 1.25, 99))
    assert isinstance(request, SpeechRequest) and len(request.sentences) == 2
    assert request.scales == (0.667, 1.0 / 1.25, 0.8)
    session = noise_fed_session()
    for index in range(len(request.sentences)):
        seed = sentence_seed(request.seed, index)
        with worker.lock:  # the worker is idle; its module is not run from two threads at once
            got = speak(state, request, index, seed)
        ids = request.ids(index)[None, :]
        rng = np.random.default_rng(seed)
        duration_noise = rng.standard_normal((1, 2, ids.shape[1]), dtype=np.float32)
        flow_noise = rng.standard_normal((1, LATENT, len(got) // HOP), dtype=np.float32)
        feeds = {
            "input": ids,
            "input_lengths": np.array([ids.shape[1]], np.int64),
            "scales": np.array(request.scales, np.float32),
            "/dp/RandomNormalLike_output_0": duration_noise,
            "/RandomNormalLike_output_0": flow_noise,
        }
        (want,) = session.run(["output"], feeds)  # type: ignore[attr-defined]
        assert want.size == got.size
        np.testing.assert_allclose(got, want.reshape(-1), atol=piper.ATOL, rtol=0)


def test_a_seed_repeats_a_request_and_another_changes_it(server: Server) -> None:
    worker = worker_of(server)
    first, again, other = (alone(worker, TEXTS[0], seed) for seed in (5, 5, 6))
    np.testing.assert_array_equal(first, again)
    assert first.shape != other.shape or not np.array_equal(first, other)
    slow = alone(worker, TEXTS[0], 5, speed=0.5)
    assert len(slow) > 1.5 * len(first)  # half the speed, twice the length scale


# -- serving ------------------------------------------------------------------------------------------------------


def test_staggered_requests_of_other_lengths_and_speeds_equal_their_isolated_runs(server: Server) -> None:
    """Each request arrives once the one before it has spoken its first sentence, so cohorts gain and lose
    members as requests of other lengths, speeds and seeds come and go; each waveform is its own alone."""
    worker = worker_of(server)
    cases = [(" ".join(TEXTS), 10, 1.0)] + [
        (TEXTS[i % len(TEXTS)], 10 + i, (1.0, 1.5, 0.8)[i % 3]) for i in range(1, 6)
    ]
    isolated = [alone(worker, *case) for case in cases]
    cohorts = worker.cohorts
    results: dict[int, np.ndarray] = {}
    spoke = [threading.Event() for _ in cases]

    def run(index: int) -> None:
        text, seed, speed = cases[index]
        request, events = open_request(worker, text, seed, speed)
        found: list[AudioBlock] = []
        for event in events:
            if event.kind == "event" and isinstance(event.value, AudioBlock):
                found.append(event.value)
                worker.consumed(request, event.size)
                spoke[index].set()
            elif event.kind in ("done", "error"):
                assert event.kind == "done", event.text
                break
        results[index] = waveform(found)

    threads = [threading.Thread(target=run, args=(index,)) for index in range(len(cases))]
    for index, thread in enumerate(threads):
        if index:
            assert spoke[index - 1].wait(600)
        thread.start()
    for thread in threads:
        thread.join(600)
    for index, want in enumerate(isolated):
        np.testing.assert_array_equal(results[index], want)
    sentences = sum(len(phonemes.sentences(text, "en-us")) for text, _, _ in cases)
    assert worker.cohorts - cohorts < sentences  # some cohorts carried several requests' sentences


def test_sixteen_concurrent_streams_over_http_equal_their_isolated_waveforms(server: Server, url: str) -> None:
    import openai

    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", timeout=120)

    def pcm(text: str, seed: int) -> np.ndarray:
        with client.audio.speech.with_streaming_response.create(
            model=NAME, voice=NAME, input=text, response_format="pcm", extra_body={"seed": seed}
        ) as response:
            assert response.headers["x-loam-seed"] == str(seed)
            assert response.headers["x-loam-sample-rate"] == "22050"
            return np.frombuffer(b"".join(response.iter_bytes()), "<i2")

    cases = [(TEXTS[i % 2 * 2], 100 + i) for i in range(16)]  # the two short texts, sixteen seeds
    isolated = {case: pcm(*case) for case in cases}
    results: dict[tuple[str, int], np.ndarray] = {}
    threads = [threading.Thread(target=lambda c=case: results.__setitem__(c, pcm(*c))) for case in cases]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(600)
    for case in cases:
        np.testing.assert_array_equal(results[case], isolated[case])
    assert not np.array_equal(isolated[cases[0]], isolated[cases[2]])  # another seed, another waveform


def test_wav_and_server_sent_events(server: Server, url: str) -> None:
    """The WAV stream is 16-bit samples after a header of unknown length; the SSE stream's deltas carry the same
    bytes in base64, then `speech.audio.done` with the usage."""
    import openai

    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", timeout=120)
    wav = client.audio.speech.create(model=NAME, voice=NAME, input=TEXTS[1], extra_body={"seed": 3}).content
    assert wav[:4] == b"RIFF" and wav[8:16] == b"WAVEfmt " and wav[36:40] == b"data"
    samples = np.frombuffer(wav[44:], "<i2")
    want = alone(worker_of(server), TEXTS[1], 3)
    np.testing.assert_array_equal(samples, np.clip(np.round(np.clip(want, -1, 1) * 32768.0), -32768, 32767))
    with httpx.stream(
        "POST", f"{url}/v1/audio/speech", timeout=120,
        json={"model": NAME, "voice": NAME, "input": TEXTS[1], "response_format": "pcm", "stream_format": "sse",
              "seed": 3},
    ) as response:  # fmt: skip
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    assert [e["type"] for e in events] == ["speech.audio.delta"] * 2 + ["speech.audio.done"]
    assert b"".join(base64.b64decode(e["audio"]) for e in events[:-1]) == wav[44:]
    assert events[-1]["usage"]["output_tokens"] == len(samples)


def test_a_stalled_reader_does_not_hold_back_the_others(server: Server) -> None:
    """A reader that takes its first block and stops: its request stops once its output credit is spent (at most
    one block past it), while requests that arrive after it run to their end; read again, it finishes, its
    waveform the one it speaks alone."""
    worker = worker_of(server)
    text = " ".join(["This sentence is spoken again and again until the reader stops."] * 5)
    want = alone(worker, text, 1)
    stalled, events = open_request(worker, text, 1)
    held = [next(e for e in events if e.kind == "event")]
    for seed in range(3):
        alone(worker, TEXTS[0], seed)
    state = stalled.state
    assert isinstance(state, SpeechRequest) and state.next < len(state.sentences)
    assert worker.stalled(stalled) and worker.output_bytes <= stalled.unread < worker.output_bytes + held[0].size
    worker.consumed(stalled, held[0].size)
    assert isinstance(held[0].value, AudioBlock)
    found, end = blocks(worker, stalled, events)
    assert end.kind == "done"
    np.testing.assert_array_equal(waveform([held[0].value, *found]), want)


def test_a_request_cancelled_in_an_accepted_cohort_is_collected_and_its_row_reused(server: Server) -> None:
    worker = worker_of(server)
    want = alone(worker, TEXTS[3], 8)
    victim, events = open_request(worker, " ".join([TEXTS[1]] * 3), 4)
    deadline = time.monotonic() + 60
    while victim not in worker.cohort:  # its first sentence is running
        assert time.monotonic() < deadline
        time.sleep(0.001)
    row = victim.row
    worker.cancel(victim)
    found, end = blocks(worker, victim, events)
    assert end.kind == "error" and end.status == 499 and not found  # its accepted block was dropped
    assert victim.released and row in worker.free_rows
    rows = {r.row for r in worker.waiting if isinstance(r, StreamRequest)} - {None}
    assert row not in rows
    reused, events = open_request(worker, TEXTS[3], 8)
    found, end = blocks(worker, reused, events)
    assert end.kind == "done" and reused.released
    np.testing.assert_array_equal(waveform(found), want)


def test_unregister_and_register_again(tmp_path_factory: pytest.TempPathFactory, voice_folder: Path) -> None:
    with serving(tmp_path_factory, voice_folder) as server:
        first = alone(worker_of(server), TEXTS[2], 12)
        server.unregister(NAME)
        with Listener(server) as listener:
            response = httpx.post(f"{listener.url}/v1/audio/speech", json={"model": NAME, "input": TEXTS[2]})
            assert response.status_code == 404 and response.json()["error"]["param"] == "model"
            server.register(voice_folder)
            again = httpx.post(
                f"{listener.url}/v1/audio/speech",
                json={"model": NAME, "input": TEXTS[2], "seed": 12, "response_format": "pcm"},
                timeout=120,
            )
        assert again.status_code == 200
        np.testing.assert_array_equal(
            np.frombuffer(again.content, "<i2"), np.clip(np.round(np.clip(first, -1, 1) * 32768.0), -32768, 32767)
        )


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"input": ""}, 400, "input"),
        ({"input": "   "}, 400, "input"),
        ({"input": "Hello. " * 100}, 413, "input"),
        ({"input": "..."}, 400, "input"),
        ({"input": 3}, 400, "input"),
        ({}, 400, "input"),
        ({"input": "Hi.", "voice": "alloy"}, 400, "voice"),
        ({"input": "Hi.", "speed": 5}, 400, "speed"),
        ({"input": "Hi.", "speed": 0.1}, 400, "speed"),
        ({"input": "Hi.", "instructions": "Speak softly."}, 400, "instructions"),
        ({"input": "Hi.", "response_format": "aac"}, 400, "response_format"),
        ({"input": "Hi.", "stream_format": "video"}, 400, "stream_format"),
        ({"input": "Hi.", "seed": -1}, 400, "seed"),
        ({"input": "Hi.", "seed": 1 << 63}, 400, "seed"),
        ({"input": "Hi.", "model": "nobody"}, 404, "model"),
    ],
)
def test_refusals_name_the_field(url: str, body: dict[str, object], status: int, param: str) -> None:
    response = httpx.post(f"{url}/v1/audio/speech", json={"model": NAME, **body}, timeout=60)
    assert response.status_code == status, response.text
    assert response.json()["error"]["param"] == param


def test_metrics_count_audio_out(server: Server, url: str) -> None:
    httpx.post(f"{url}/v1/audio/speech", json={"model": NAME, "input": TEXTS[0], "seed": 1}, timeout=60)
    text = httpx.get(f"{url}/metrics", timeout=30).text
    seconds = [
        line for line in text.splitlines() if line.startswith(f'loam_audio_output_seconds_total{{model="{NAME}"}}')
    ]
    assert seconds and float(seconds[0].split()[-1]) > 0.5
    assert f'loam_audio_time_to_first_audio_seconds_count{{model="{NAME}"}}' in text
    assert f'loam_audio_real_time_factor_count{{model="{NAME}"}}' in text


def test_a_client_that_goes_away_cancels_its_request_and_frees_its_row(server: Server, url: str) -> None:
    worker = worker_of(server)
    text = " ".join(["A client leaves before this long text is spoken to its end."] * 4)
    with httpx.stream(
        "POST", f"{url}/v1/audio/speech", json={"model": NAME, "input": text, "seed": 2}, timeout=120
    ) as response:
        assert response.status_code == 200
        next(response.iter_raw(1024))
    deadline = time.monotonic() + 60
    while worker.waiting or len(worker.free_rows) < 4:
        assert time.monotonic() < deadline, "the abandoned request still holds its row"
        time.sleep(0.01)
    np.testing.assert_array_equal(alone(worker, TEXTS[0], 5), alone(worker, TEXTS[0], 5))


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"voice": "missing.onnx.json"}, "missing.onnx.json"),
        ({"max_characters": 0}, "'max_characters'"),
        ({"stages": {"speaker": {"graph": piper.MODEL, "options": "loam.toml"}}}, "'voice'"),
    ],
)
def test_a_malformed_package_is_refused_naming_the_key(
    server: Server, voice_folder: Path, tmp_path: Path, change: dict[str, object], named: str
) -> None:
    for entry in voice_folder.iterdir():
        if entry.name != "model.json":
            (tmp_path / entry.name).symlink_to(entry.resolve())
    table = {**json.loads((voice_folder / "model.json").read_text(encoding="utf-8")), "name": "bad-voice", **change}
    (tmp_path / "model.json").write_text(json.dumps(table), encoding="utf-8")
    with pytest.raises(LoamError, match=named):
        server.register(tmp_path)
    assert "bad-voice" not in server.models


def test_a_voice_config_is_read_and_its_speakers_named(tmp_path: Path) -> None:
    """A voice of several speakers takes a speaker's name or id; one of one speaker, its own name; a config
    missing a key is refused naming it."""
    model = exports.package_file(piper.PACKAGE, piper.MODEL + ".json")
    exports.require_installed(piper.PACKAGE, model is not None)
    assert model is not None
    table = json.loads(model.read_text(encoding="utf-8"))
    single = read_voice(model, "fallback")
    assert (single.name, single.sample_rate, single.espeak, single.speakers) == ("joe", 22050, "en-us", 1)
    assert single.speaker("joe") is None
    with pytest.raises(ServeError, match="'joe'") as refused:
        single.speaker("alloy")
    assert refused.value.param == "voice"
    several = tmp_path / "several.onnx.json"
    several.write_text(json.dumps({**table, "num_speakers": 3, "speaker_id_map": {"ann": 0, "bo": 2}}))
    voice = read_voice(several, "fallback")
    assert [voice.speaker(v) for v in ("ann", "bo", "1")] == [0, 2, 1]
    for wrong in ("3", "cy", ""):
        with pytest.raises(ServeError) as refused:
            voice.speaker(wrong)
        assert refused.value.param == "voice"
    broken = tmp_path / "broken.onnx.json"
    broken.write_text(json.dumps({k: v for k, v in table.items() if k != "audio"}))
    with pytest.raises(PackageError, match=r"broken\.onnx\.json: key 'audio'"):
        read_voice(broken, "fallback")


@pytest.mark.parametrize("fmt", ["flac", "mp3", "opus"])
def test_encoded_formats_carry_the_waveform(server: Server, url: str, fmt: str) -> None:
    """FLAC is the 16-bit samples exactly; MP3 and Opus (at 24 kHz, the Opus rate above the voice's) decode to
    about the same length of audio."""
    import soundfile

    response = httpx.post(
        f"{url}/v1/audio/speech",
        json={"model": NAME, "input": TEXTS[2], "seed": 4, "response_format": fmt},
        timeout=120,
    )
    assert response.status_code == 200, response.text
    samples, rate = soundfile.read(io.BytesIO(response.content), dtype="int16")
    want = alone(worker_of(server), TEXTS[2], 4)
    if fmt == "flac":
        assert rate == 22050
        np.testing.assert_array_equal(samples, np.clip(np.round(np.clip(want, -1, 1) * 32768.0), -32768, 32767))
    else:
        assert abs(len(samples) / rate - len(want) / 22050) < 0.1
