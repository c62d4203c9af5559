"""The recognition role (loam.serve.recognition): Whisper transcribing continuing audio, alone and in cohorts.

Oracles: onnxruntime running the same three graphs with the same greedy loop (tests/serve/recognizing.py),
for the tiny random Whisper and for Whisper base; and for Whisper base, transformers' own `generate`
(greedy, recorded by scripts/record_whisper_oracles.py) on the Piper voice's sentences, which these tests
transcribe through the server.  The scheduling cases use the tiny model (its transcripts are arbitrary
tokens, but fixed), and every surviving request's transcripts must equal its isolated run's: batched rows
and changing cohorts leave each request's greedy tokens unchanged.
"""

from __future__ import annotations

import dataclasses
import io
import json
import threading
import wave
from collections.abc import Iterator

import httpx
import numpy as np
import openai
import pytest

from loam.serve.activity import ActivityEvent, ActivityParams, SileroActivity
from loam.serve.metrics import Metrics
from loam.serve.package import PackageError, open_package, read_package
from loam.serve.recognition import (
    INPUT_WINDOW,
    RecognitionParams,
    TranscriptEvent,
    WhisperRecognition,
    serve_recognition,
)
from loam.serve.recognition_http import live_params, transcript_message
from loam.serve.scheduler import Event, Request, ServeError
from loam.serve.server import Server
from loam.serve.spec import Capacities, Package
from loam.serve.speech_gate import SpeechGate
from loam.serve.stream import StreamWorker
from loam.serve.web import Fields
from tests.serve.recognizing import (
    DATA,
    TINY,
    OnnxWhisper,
    fed,
    fed_events,
    gated_tiny_folder,
    noise,
    read_wav,
    tiny_oracle,
    transcripts,
    whisper_base_folder,
)
from tests.serve.serving import http_client, package_copy, serving

pytestmark = pytest.mark.xdist_group("recognition")

WINDOW = 480_000


def wav_bytes(samples: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(16000)
        out.writeframes(np.clip(np.round(samples * 32768.0), -32768, 32767).astype("<i2").tobytes())
    return buffer.getvalue()


def as_wav(samples: np.ndarray) -> np.ndarray:
    """`samples` as a 16-bit WAV carries them (what the server hears of an upload)."""
    return np.clip(np.round(samples * 32768.0), -32768, 32767).astype(np.float32) / 32768.0


@pytest.fixture(scope="module")
def tiny_package(tmp_path_factory: pytest.TempPathFactory) -> Package:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LOAM_CACHE_DIR", str(tmp_path_factory.mktemp("recognition-cache")))
        return open_package(TINY)


@pytest.fixture(scope="module")
def tiny(tiny_package: Package) -> Iterator[StreamWorker]:
    """The tiny package's worker, driven directly."""
    worker = serve_recognition(tiny_package, WhisperRecognition(), Metrics().model("tiny-whisper"))
    yield worker
    worker.stop()


def isolated_text(samples: np.ndarray) -> list[str]:
    """Each window's text as onnxruntime's greedy loop over the tiny graphs transcribes it."""
    from loam.text.tokenizer import Tokenizer

    tokenizer = Tokenizer.from_file(TINY.parent / "tiny_gpt2" / "tokenizer.json")
    oracle = tiny_oracle()
    return [
        tokenizer.decode(t, skip_special_tokens=True) for t in oracle.recording(samples, oracle.tokens.languages["en"])
    ]


def finals(events: list[TranscriptEvent]) -> list[tuple[int, int, int, str]]:
    out = [(e.segment, e.start, e.end, e.text) for e in events if e.final]
    assert [e.segment for e in events if e.final] == list(range(len(out)))
    return out


def test_windows_transcribe_as_onnxruntime_does_and_packets_change_nothing(tiny: StreamWorker) -> None:
    """35 s: a full window and a final partial one (zero-padded), fed whole and in ragged packets."""
    audio = noise(35.0, seed=1)
    want = isolated_text(audio)
    whole = fed(tiny, audio)
    assert finals(whole) == [(0, 0, WINDOW, want[0]), (1, WINDOW, len(audio), want[1])]
    assert all(e.final and e.revision == 0 for e in whole)
    assert fed(tiny, audio, packets=(1, 4999, 160_003, 77)) == whole


@pytest.mark.parametrize("seconds", [0.0, 30.0, 2.5])
def test_a_recording_of_any_length_ends_with_its_last_window(tiny: StreamWorker, seconds: float) -> None:
    """No input: no segment; exactly one window: one segment, no empty second one; a short one: one partial."""
    audio = noise(seconds, seed=2)
    events = fed(tiny, audio, packets=(8000,))
    want = isolated_text(audio) if len(audio) else []
    assert [e.text for e in events] == want
    assert [e.end for e in events] == ([] if not len(audio) else [len(audio)])


def test_revisions_come_before_the_window_completes_and_the_final_one_never_changes(tiny: StreamWorker) -> None:
    """A live client feeding 5 s at a time reads a revision of the open window after each packet (each the
    isolated transcription of the audio so far), then the window's final transcript, then the next window's."""
    audio = noise(33.0, seed=3)
    events: list[Event] = []
    arrived = threading.Condition()

    def sink(event: Event) -> None:
        with arrived:
            events.append(event)
            arrived.notify()

    def transcripts_() -> list[TranscriptEvent]:
        return [e.value for e in events if e.kind == "event" and isinstance(e.value, TranscriptEvent)]

    request = tiny.open(RecognitionParams(language="en", revision_seconds=5.0), sink)
    step = 80_000
    for count, end in enumerate(range(step, 5 * step + 1, step), start=1):
        tiny.feed(request, audio[end - step : end])
        with arrived:
            assert arrived.wait_for(lambda count=count: len(transcripts_()) == count, 60)
        revision = transcripts_()[-1]
        assert (revision.segment, revision.revision, revision.start, revision.end, revision.final) == (
            0, count - 1, 0, end, False
        )  # fmt: skip
        assert revision.text == isolated_text(audio[:end])[0]
    tiny.feed(request, audio[5 * step :], eof=True)
    with arrived:
        assert arrived.wait_for(lambda: events[-1].kind == "done", 60)
    got = transcripts_()
    assert [(e.segment, e.revision, e.final) for e in got[5:]] == [(0, 5, True), (1, 0, True)]
    assert finals(got) == finals(fed(tiny, audio))


def test_cohorts_of_staggered_requests_equal_their_isolated_runs(tiny: StreamWorker) -> None:
    """Requests of different lengths arriving at different times, fed in different packets, share encoder
    and decoder cohorts as their positions allow; each one's transcripts are its isolated run's."""
    lengths = [31.0, 4.0, 45.0, 12.0, 0.5]
    audios = [noise(s, seed=10 + i) for i, s in enumerate(lengths)]
    alone = [finals(fed(tiny, a)) for a in audios]
    cohorts = tiny.cohorts
    results: dict[int, list[TranscriptEvent]] = {}

    def client(i: int) -> None:
        threading.Event().wait(0.03 * i)
        results[i] = fed(tiny, audios[i], packets=(3200 * (i + 1), 48_000))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(audios))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert [finals(results[i]) for i in range(len(audios))] == alone
    # Fewer cohorts than the requests' steps taken one by one: some ran together.
    steps = sum(len(alone[i]) for i in range(len(audios))) * 22
    assert tiny.cohorts - cohorts < steps


class Cohorts(WhisperRecognition):
    """The built-in control, recording each cohort's phase and size."""

    def __init__(self) -> None:
        self.sizes: list[tuple[str, int]] = []

    def generate(self, state: object, plan: object) -> object:
        self.sizes.append((str(getattr(plan, "phase", "")), len(getattr(plan, "requests", []))))
        return super().generate(state, plan)


def test_requests_in_step_share_every_call_and_pick_their_isolated_tokens(tiny_package: Package) -> None:
    """Three requests fed at once run every phase together (one encoder call over their windows, one decoder call
    a step over their rows): the batched products' last bits leave each one's greedy tokens its own."""
    control = Cohorts()
    worker = serve_recognition(tiny_package, control, Metrics().model("cohorts"))
    try:
        audios = [noise(5.0, seed=90 + i) for i in range(3)]
        requests = []
        for _ in audios:
            sink, drain = Request.collector()
            request = worker.open(RecognitionParams(language="en"), sink)
            requests.append((request, drain))
        with worker.lock:  # the three arrive before any cohort forms
            for (request, _), audio in zip(requests, audios, strict=True):
                worker.feed(request, audio, eof=True)
        texts = [
            [e.value.text for e in drain(120) if e.kind == "event" and isinstance(e.value, TranscriptEvent)]
            for _, drain in requests
        ]
        assert texts == [isolated_text(audio) for audio in audios]
        assert ("encode", 3) in control.sizes and ("decode", 3) in control.sizes
    finally:
        worker.stop()


class Gated(WhisperRecognition):
    """The built-in control, holding its decoder steps at a gate the test opens: a cohort can be cancelled while
    it is accepted and running."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.entered = threading.Event()

    def generate(self, state: object, plan: object) -> object:
        if getattr(plan, "phase", "") == "decode":
            self.entered.set()
            assert self.gate.wait(60)
        return super().generate(state, plan)


def test_cancelling_an_accepted_cohort_member_frees_its_row_for_the_next_request(tiny_package: Package) -> None:
    control = Gated()
    worker = serve_recognition(tiny_package, control, Metrics().model("gated"))
    try:
        audio = noise(3.0, seed=20)
        doomed_events: list[Event] = []
        doomed = worker.open(RecognitionParams(language="en"), doomed_events.append)
        worker.feed(doomed, audio, eof=True)
        assert control.entered.wait(60)
        row = doomed.row
        worker.cancel(doomed)
        control.gate.set()
        for _ in range(200):
            if doomed.released:
                break
            threading.Event().wait(0.05)
        assert doomed.released and not any(e.kind == "event" for e in doomed_events)
        other = noise(5.0, seed=21)
        after = fed(worker, other)
        assert [e.text for e in after] == isolated_text(other)
        assert row in worker.free_rows
    finally:
        worker.stop()


def test_a_stalled_reader_holds_back_only_its_own_request(tiny_package: Package) -> None:
    """A reader that takes nothing stops its request once `output_bytes` are waiting (here one transcript);
    the others go on; once it reads, its request finishes as its isolated run."""
    control = WhisperRecognition()
    capacities = Capacities(resident_requests=4, output_bytes=100)
    worker = StreamWorker("stalled", Metrics().model("stalled"), control, control.prepare(tiny_package), capacities,
                          input_limit=INPUT_WINDOW)  # fmt: skip
    try:
        stalled_events: list[Event] = []
        stalled = worker.open(RecognitionParams(language="en"), stalled_events.append)
        audio = noise(60.0, seed=30)
        worker.feed(stalled, audio, eof=True)
        others = [noise(6.0, seed=31 + i) for i in range(2)]
        for other in others:
            assert [e.text for e in fed(worker, other)] == isolated_text(other)
        for _ in range(400):
            if stalled.unread >= worker.output_bytes:
                break
            threading.Event().wait(0.05)
        threading.Event().wait(0.3)
        published = [e.value for e in stalled_events if e.kind == "event" and isinstance(e.value, TranscriptEvent)]
        assert [e.segment for e in published] == [0]
        worker.consumed(stalled, stalled.unread)
        for _ in range(400):
            if stalled.finished:
                break
            threading.Event().wait(0.05)
        texts = [e.value.text for e in stalled_events if e.kind == "event" and isinstance(e.value, TranscriptEvent)]
        assert texts == isolated_text(audio)
    finally:
        worker.stop()


def test_a_request_is_refused_naming_its_field(tiny: StreamWorker) -> None:
    for params, field in [
        (RecognitionParams(language="xx"), "language"),
        (RecognitionParams(temperature=0.4), "temperature"),
        (RecognitionParams(revision_seconds=0.01), "revision_seconds"),
    ]:
        with pytest.raises(ServeError) as refused:
            tiny.open(params, lambda _event: None)
        assert refused.value.param == field and refused.value.status == 400


# -- HTTP -----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(tmp_path_factory, TINY) as served:
        yield served


@pytest.fixture(scope="module")
def client(server: Server) -> Iterator[httpx.Client]:
    with http_client(server, timeout=300) as http:
        yield http


def post(client: httpx.Client, audio: bytes, **fields: str) -> httpx.Response:
    return client.post(
        "/v1/audio/transcriptions",
        files={"file": ("audio.wav", audio, "audio/wav")},
        data={"model": "tiny-whisper", "language": "en"} | fields,
    )


def test_http_transcripts_equal_the_isolated_run_in_every_format(client: httpx.Client) -> None:
    short = as_wav(noise(3.0, seed=42))
    text = isolated_text(short)[0].strip()
    assert post(client, wav_bytes(short)).json() == {"text": text}
    assert post(client, wav_bytes(short), response_format="text").text == text
    audio = as_wav(noise(34.0, seed=40))
    want = isolated_text(audio)
    data = wav_bytes(audio)
    verbose = post(client, data, response_format="verbose_json", **{"timestamp_granularities[]": "segment"}).json()
    assert verbose["language"] == "en" and verbose["duration"] == len(audio) / 16000
    assert [(s["id"], s["start"], s["end"], s["text"]) for s in verbose["segments"]] == [
        (0, 0.0, 30.0, want[0]),
        (1, 30.0, len(audio) / 16000, want[1]),
    ]
    srt = post(client, data, response_format="srt").text
    cue = " ".join(want[0].split())
    assert srt.startswith(f"1\n00:00:00,000 --> 00:00:30,000\n{cue}\n\n2\n00:00:30,000 --> 00:00:34,000\n")
    vtt = post(client, data, response_format="vtt").text
    assert vtt.startswith("WEBVTT\n\n00:00:00.000 --> 00:00:30.000\n")


def test_http_streams_one_delta_per_final_segment(client: httpx.Client) -> None:
    audio = as_wav(noise(31.0, seed=41))
    want = isolated_text(audio)
    reply = post(client, wav_bytes(audio), stream="true")
    lines = [line.removeprefix("data: ") for line in reply.text.splitlines() if line.startswith("data: ")]
    events = [json.loads(line) for line in lines]
    assert [e["type"] for e in events] == ["transcript.text.delta"] * 2 + ["transcript.text.done"]
    assert events[0]["delta"] == want[0].strip() and events[1]["delta"].strip() == want[1].strip()
    assert "".join(e["delta"] for e in events[:2]) == events[-1]["text"] == "".join(want).strip()


def test_the_openai_client_transcribes_concurrent_uploads(server: Server, client: httpx.Client) -> None:
    audios = [as_wav(noise(s, seed=50 + i)) for i, s in enumerate([3.0, 31.0, 8.0])]
    api = openai.OpenAI(base_url=str(client.base_url) + "/v1", api_key="unused", timeout=300)
    results: dict[int, str] = {}

    def ask(i: int) -> None:
        results[i] = api.audio.transcriptions.create(
            model="tiny-whisper", file=("a.wav", wav_bytes(audios[i])), language="en"
        ).text

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(audios))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert [results[i] for i in range(len(audios))] == ["".join(isolated_text(a)).strip() for a in audios]
    assert "tiny-whisper" in {m.id for m in api.models.list()}
    metrics = client.get("/metrics").text
    assert 'loam_audio_input_seconds_total{model="tiny-whisper"}' in metrics
    assert 'loam_audio_real_time_factor_count{model="tiny-whisper"}' in metrics


@pytest.mark.parametrize(
    ("fields", "audio", "param", "status"),
    [
        ({"temperature": "0.7"}, None, "temperature", 400),
        ({"language": "klingon"}, None, "language", 400),
        ({"response_format": "mp4"}, None, "response_format", 400),
        ({"timestamp_granularities[]": "word"}, None, "timestamp_granularities[]", 400),
        ({}, b"RIFF\x00\x00not a wav", "file", 400),
        ({}, "long", "file", 413),
        ({"model": "nope"}, None, "model", 404),
    ],
)
def test_http_refusals_name_the_field(
    client: httpx.Client, fields: dict[str, str], audio: bytes | str | None, param: str, status: int
) -> None:
    data = wav_bytes(noise(121.0, seed=60)) if audio == "long" else audio or wav_bytes(noise(1.0, seed=61))
    reply = post(client, data if isinstance(data, bytes) else b"", **fields)
    assert reply.status_code == status, reply.text
    assert reply.json()["error"]["param"] == param


def test_unregister_and_register_again(server: Server, client: httpx.Client) -> None:
    audio = as_wav(noise(2.0, seed=70))
    before = post(client, wav_bytes(audio)).json()
    server.unregister("tiny-whisper")
    assert post(client, wav_bytes(audio)).status_code == 404
    server.register(TINY)
    assert post(client, wav_bytes(audio)).json() == before


# -- Whisper base: real words -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, OnnxWhisper]]:
    folder = whisper_base_folder(tmp_path_factory.mktemp("whisper-base"))
    oracle = OnnxWhisper(folder, folder / "generation_config.json")
    with serving(tmp_path_factory, folder) as served, http_client(served, timeout=300) as http:
        yield http, oracle


def transcribe(http: httpx.Client, audio: bytes, **fields: str) -> dict[str, object]:
    reply = http.post(
        "/v1/audio/transcriptions",
        files={"file": ("speech.wav", audio)},
        data={"model": "whisper-base", "response_format": "verbose_json"} | fields,
    )
    assert reply.status_code == 200, reply.text
    return dict(reply.json())


def test_whisper_base_transcribes_speech_it_never_saw_as_transformers_and_onnxruntime_do(
    base: tuple[httpx.Client, OnnxWhisper],
) -> None:
    """31 s over HTTP: the Piper voice's two sentences, silence to the window's end, then "Hello world." in a
    final partial window.  Each segment is the text transformers' generate recorded for its sentence, and
    onnxruntime's greedy tokens over the same graphs are transformers' tokens."""
    http, oracle = base
    recorded = transcripts()
    speech, hello = read_wav("speech.wav"), read_wav("hello.wav")
    english = oracle.tokens.languages["en"]
    assert [*oracle.tokens.prompt(english), *oracle.window(speech, english)] == recorded["speech"]["tokens"]
    audio = np.concatenate([speech, np.zeros(WINDOW - len(speech), np.float32), hello])
    reply = transcribe(http, wav_bytes(audio), language="en")
    segments = reply["segments"]
    assert isinstance(segments, list)
    assert [(s["start"], s["end"], s["text"]) for s in segments] == [
        (0.0, 30.0, recorded["speech"]["text"]),
        (30.0, len(audio) / 16000, recorded["hello"]["text"]),
    ]
    assert segments[0]["text"] == " The quick brown fox jumps over the lazy dog. Please call me tomorrow morning."


def test_whisper_base_detects_english_and_follows_a_prompt_as_transformers_does(
    base: tuple[httpx.Client, OnnxWhisper],
) -> None:
    """Without a language, the first window's language token is English's and the text is the same; after a
    prompt (<|startofprev|> and its tokens), the tokens are transformers' and onnxruntime's."""
    http, oracle = base
    recorded = transcripts()
    data = (DATA / "speech.wav").read_bytes()
    detected = transcribe(http, data)
    assert detected["language"] == "en" and detected["text"] == str(recorded["speech_detected"]["text"]).strip()
    prompted = recorded["speech_prompted"]
    previous = prompted["prompt_ids"]
    assert isinstance(previous, list)
    english = oracle.tokens.languages["en"]
    want = oracle.window(read_wav("speech.wav"), english, previous=previous)
    assert [*previous, *oracle.tokens.prompt(english), *want] == prompted["tokens"]
    answer = transcribe(http, data, language="en", prompt=str(prompted["prompt"]))
    assert answer["text"] == str(prompted["text"]).strip()


@pytest.mark.parametrize(
    ("generation", "named"),
    [
        ({"decoder_start_token_id"}, "key 'decoder_start_token_id' must be a token id"),
        (None, "key 'suppress_tokens' must be a list of token ids"),
        ("not json", "cannot read it as JSON"),
    ],
)
def test_a_malformed_generation_config_is_refused_naming_its_key(
    tmp_path_factory: pytest.TempPathFactory, tiny_package: Package, generation: object, named: str
) -> None:
    folder = package_copy(tmp_path_factory, "tiny_whisper", generation="bad.json")
    good = json.loads((TINY / "generation_config.json").read_text(encoding="utf-8"))
    if generation is None:
        text = json.dumps(good | {"suppress_tokens": "9, 10"})
    elif isinstance(generation, set):
        text = json.dumps({key: value for key, value in good.items() if key not in generation})
    else:
        text = str(generation)
    (folder / "bad.json").write_text(text, encoding="utf-8")
    package = dataclasses.replace(tiny_package, spec=read_package(folder))
    with pytest.raises(PackageError) as refused:
        WhisperRecognition().prepare(package)
    assert str(folder / "bad.json") in str(refused.value) and named in str(refused.value)


def test_a_live_stream_start_message_is_a_recognition_request() -> None:
    params = live_params(Fields({"language": "en", "revision_seconds": 2, "prompt": "Hi."}), 16000)
    assert params == RecognitionParams(language="en", prompt="Hi.", revision_seconds=2.0)
    for body, rate, field in [({}, 8000, "sample_rate"), ({"revision_seconds": "soon"}, 16000, "revision_seconds")]:
        with pytest.raises(ServeError) as refused:
            live_params(Fields(body), rate)
        assert refused.value.param == field
    event = TranscriptEvent(3, 1, 960_000, 1_000_000, " Hello.", False)
    assert transcript_message(event) == {
        "type": "transcript", "segment": 3, "revision": 1, "start": 960_000, "end": 1_000_000, "text": " Hello.",
        "final": False,
    }  # fmt: skip


# -- speech activity: Silero VAD gating the windows --------------------------------------------------------------


class Counting(WhisperRecognition):
    """The built-in control, counting the members each phase's numerical work ran for."""

    def __init__(self) -> None:
        self.ran: dict[str, int] = {}

    def generate(self, state: object, plan: object) -> object:
        phase = str(getattr(plan, "phase", ""))
        self.ran[phase] = self.ran.get(phase, 0) + len(getattr(plan, "requests", []))
        return super().generate(state, plan)


@pytest.fixture(scope="module")
def gated_package(tmp_path_factory: pytest.TempPathFactory) -> Package:
    folder = gated_tiny_folder(tmp_path_factory.mktemp("gated"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LOAM_CACHE_DIR", str(tmp_path_factory.mktemp("gated-cache")))
        return open_package(folder)


@pytest.fixture(scope="module")
def gated(gated_package: Package) -> Iterator[tuple[StreamWorker, Counting]]:
    control = Counting()
    worker = serve_recognition(gated_package, control, Metrics().model("gated"))
    yield worker, control
    worker.stop()


def test_windows_without_speech_cost_no_decoder_work(gated: tuple[StreamWorker, Counting]) -> None:
    """65 s: silence, then the Piper voice's sentences in the second window, then trailing silence.  The silent
    windows are final and empty without an encoder or decoder call; the spoken one is the plain tiny run's."""
    worker, control = gated
    speech = read_wav("speech.wav")
    audio = np.zeros(65 * 16000, np.float32)
    audio[WINDOW + 16000 : WINDOW + 16000 + len(speech)] = speech
    control.ran.clear()
    events = fed(worker, audio, packets=(48_000, 7))
    assert [(e.segment, e.start, e.end, e.final) for e in events] == [
        (0, 0, WINDOW, True), (1, WINDOW, 2 * WINDOW, True), (2, 2 * WINDOW, len(audio), True)
    ]  # fmt: skip
    assert [e.text for e in events] == ["", isolated_text(audio[WINDOW : 2 * WINDOW])[0], ""]
    assert control.ran["activity"] == 3 and control.ran["encode"] == 1 and control.ran["prompt"] == 1


def test_activity_events_cover_the_input_in_order_before_each_final_transcript(
    gated: tuple[StreamWorker, Counting], gated_package: Package
) -> None:
    """With `activity`, each window's final transcript comes after the VAD's events for the samples it
    acknowledges: the events partition the input in order (512 samples each, the last one shorter), and
    their probabilities are the activity role's for the same audio fed to it alone."""
    worker, _ = gated
    speech = read_wav("speech.wav")
    audio = np.concatenate([np.zeros(WINDOW - 8000, np.float32), speech, np.zeros(1001, np.float32)])
    events = fed_events(worker, audio, packets=(30_000,), params=RecognitionParams(language="en", activity=True))
    kinds = [type(e).__name__ for e in events]
    assert kinds.count("TranscriptEvent") == 2 and kinds[-1] == "TranscriptEvent"
    first = kinds.index("TranscriptEvent")
    assert all(isinstance(e, ActivityEvent) and e.end <= WINDOW for e in events[:first])
    activity = [e for e in events if isinstance(e, ActivityEvent)]
    assert [(a.start, a.end) for a in activity] == [(s, min(s + 512, len(audio))) for s in range(0, len(audio), 512)]
    gate = SpeechGate(gated_package, "activity")
    alone = StreamWorker("silero", Metrics().model("silero"), SileroActivity(), gate.state,
                         gated_package.spec.capacities, input_limit=1 << 20)  # fmt: skip
    try:
        want = [e for e in fed_events(alone, audio, params=ActivityParams(16000)) if isinstance(e, ActivityEvent)]
    finally:
        alone.stop()
    assert activity == want
    assert any(a.probability >= 0.5 for a in activity) and activity[0].probability < 0.5


def test_the_live_audio_websocket_streams_revisions_and_final_transcripts(server: Server) -> None:
    """PCM frames over `/v1/audio/stream`: every transcript revision as a message, each segment's final one the
    isolated run's text, then `done`."""
    from websockets.sync.client import connect

    from loam.serve.cli import Listener

    audio = noise(33.0, seed=80)
    want = isolated_text(audio)
    with Listener(server) as listener:
        url = listener.url.replace("http://", "ws://") + "/v1/audio/stream?model=tiny-whisper"
        with connect(url, open_timeout=30) as ws:
            start = {"type": "start", "sample_rate": 16000, "encoding": "f32le", "language": "en"}
            ws.send(json.dumps(start | {"revision_seconds": 10}))
            ready = json.loads(ws.recv(timeout=30))
            assert ready["type"] == "ready" and ready["credit"] > 0
            for offset in range(0, len(audio), 16000):
                ws.send(audio[offset : offset + 16000].astype("<f4").tobytes())
            ws.send(json.dumps({"type": "end"}))
            messages = []
            while not messages or messages[-1]["type"] not in ("done", "error"):
                messages.append(json.loads(ws.recv(timeout=120)))
    assert messages[-1] == {"type": "done"}
    transcripts_ = [m for m in messages if m["type"] == "transcript"]
    finals_ = [m for m in transcripts_ if m["final"]]
    assert [(m["segment"], m["start"], m["end"], m["text"]) for m in finals_] == [
        (0, 0, WINDOW, want[0]), (1, WINDOW, len(audio), want[1])
    ]  # fmt: skip
    for segment in (0, 1):
        revisions = [m["revision"] for m in transcripts_ if m["segment"] == segment]
        assert revisions == list(range(len(revisions)))
