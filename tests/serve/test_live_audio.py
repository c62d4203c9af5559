"""The live audio WebSocket (`/v1/audio/stream`) and `POST /v1/audio/activity` over Silero VAD, on a real server
on 127.0.0.1 driven by real WebSocket and HTTP clients: staggered streams of different lengths in changing
cohorts, packet boundaries, a stalled reader, a client that leaves, unregistering, and every refusal."""

from __future__ import annotations

import io
import json
import threading
import time
import wave
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from loam.serve.activity import ActivityEvent
from loam.serve.audio_codec import decode_audio
from loam.serve.cli import Listener
from loam.serve.server import Server
from loam.serve.stream import StreamRequest, StreamWorker
from tests.serve.activity_audio import (
    activity_package,
    assert_partition,
    noise,
    recordings,
    reference,
    run_alone,
    silero_path,
    spoken,
)
from tests.serve.serving import PACKAGES, serving

pytestmark = pytest.mark.xdist_group("serve-activity")

RATE = 16000
BATCH_TOLERANCE = 2e-6
"""A request's probabilities in a cohort against its run alone.  Its intervals are equal exactly; its
probabilities differ in the last bits: the LSTM's gate products are matrix-vector products for one row and
matrix products for a cohort, which BLAS sums in another order, and the state carries the difference from
chunk to chunk (the largest measured over these recordings, 16 and 8 kHz: 3.6e-7).  A mixed-up row, context
or state moves a probability by far more."""


@pytest.fixture(scope="module")
def listening(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    folder = activity_package(
        tmp_path_factory.mktemp("silero"), capacities={"resident_requests": 3}, recording_seconds=8
    )
    with serving(tmp_path_factory, folder, PACKAGES / "tiny_gpt2") as server, Listener(server) as listener:
        yield server, listener.url


@pytest.fixture(scope="module")
def isolated(listening: tuple[Server, str]) -> list[list[ActivityEvent]]:
    """Each recording's events, run alone on the worker."""
    worker = worker_of(listening[0])
    return [run_alone(worker, samples, RATE) for samples in recordings(RATE)]


def worker_of(server: Server) -> StreamWorker:
    worker = server.model("silero").worker
    assert isinstance(worker, StreamWorker)
    return worker


def socket(url: str, model: str = "silero", max_queue: int = 16) -> ClientConnection:
    """A WebSocket client of the live audio stream; `max_queue` messages are read ahead of the test's `recv`."""
    return connect(url.replace("http://", "ws://") + f"/v1/audio/stream?model={model}", open_timeout=30,
                   max_queue=max_queue)  # fmt: skip


def stream(
    url: str, samples: np.ndarray, packet: int = 4000, delay: float = 0.0, encoding: str = "f32le", rate: int = RATE
) -> list[dict[str, Any]]:
    """One live stream: start, `samples` in packets of `packet`, end; every message the server sent up to `done`."""
    time.sleep(delay)
    with socket(url) as ws:
        ws.send(json.dumps({"type": "start", "sample_rate": rate, "encoding": encoding}))
        ready = json.loads(ws.recv(timeout=30))
        assert ready["type"] == "ready" and ready["credit"] > 0, ready
        messages: list[dict[str, Any]] = []
        reader = threading.Thread(target=lambda: messages.extend(receive_all(ws)))
        reader.start()
        for start in range(0, len(samples), packet):
            piece = samples[start : start + packet]
            ws.send(piece.astype("<f4").tobytes() if encoding == "f32le" else (piece * 32768).astype("<i2").tobytes())
        ws.send(json.dumps({"type": "end"}))
        reader.join(120)
        assert not reader.is_alive(), "the stream did not end within two minutes"
    return messages


def receive_all(ws: ClientConnection) -> Iterator[dict[str, Any]]:
    while True:
        message = json.loads(ws.recv(timeout=120))
        yield message
        if message["type"] in ("done", "error"):
            return


def activity(messages: list[dict[str, Any]]) -> list[ActivityEvent]:
    assert messages[-1] == {"type": "done"}, messages[-1]
    return [ActivityEvent(int(m["start"]), int(m["end"]), float(m["probability"]))
            for m in messages if m["type"] == "activity"]  # fmt: skip


def assert_same(got: list[ActivityEvent], want: list[ActivityEvent]) -> None:
    assert [(e.start, e.end) for e in got] == [(e.start, e.end) for e in want]
    np.testing.assert_allclose(
        [e.probability for e in got], [e.probability for e in want], rtol=0, atol=BATCH_TOLERANCE
    )


def test_staggered_streams_of_different_lengths_equal_their_isolated_runs(
    listening: tuple[Server, str], isolated: list[list[ActivityEvent]]
) -> None:
    server, url = listening
    worker = worker_of(server)
    cohorts = worker.cohorts
    results: dict[int, list[dict[str, Any]]] = {}
    packets = [4000, 333, 1024, 700, 2500]

    def run(index: int, samples: np.ndarray) -> None:
        results[index] = stream(url, samples, packets[index], delay=0.1 * index)

    threads = [threading.Thread(target=run, args=item) for item in enumerate(recordings(RATE))]
    for thread in threads:
        thread.start()
    # The model reads a chunk in a fraction of a millisecond, faster than a client sends one: the worker's lock is
    # taken for 20 ms in every 30, as a slower model's steps would take it, so input gathers and cohorts form.
    while any(thread.is_alive() for thread in threads):
        with worker.lock:
            time.sleep(0.02)
        time.sleep(0.01)
    assert len(results) == len(threads)
    for index, samples in enumerate(recordings(RATE)):
        got = activity(results[index])
        assert_partition(got, len(samples), RATE)
        assert_same(got, isolated[index])
        want = reference(silero_path(), samples, RATE)  # onnxruntime under silero-vad's loop, one stream alone
        np.testing.assert_allclose([e.probability for e in got], want, rtol=0, atol=1e-5)
        credited = sum(int(m["samples"]) for m in results[index] if m["type"] == "credit")
        assert credited == len(samples)
    # Five streams on three rows: they waited for rows and shared cohorts, whose membership changed as they came
    # and went.
    assert worker.cohorts - cohorts < sum(len(events) for events in isolated)


def test_packet_boundaries_change_nothing(listening: tuple[Server, str]) -> None:
    url = listening[1]
    samples = spoken(RATE)[RATE // 4 : RATE // 4 + 5000]
    runs = [activity(stream(url, samples, packet)) for packet in (1, 100, 511, 4000)]
    assert all(run == runs[0] for run in runs[1:])  # one row alone each time: equal exactly
    s16 = activity(stream(url, np.round(samples * 32768) / 32768, 4000, encoding="s16le"))
    assert [(e.start, e.end) for e in s16] == [(e.start, e.end) for e in runs[0]]


def newest(worker: StreamWorker) -> StreamRequest:
    request = worker.waiting[-1]
    assert isinstance(request, StreamRequest)
    return request


def test_the_server_reads_no_frame_past_the_input_credit(listening: tuple[Server, str]) -> None:
    server, url = listening
    worker = worker_of(server)
    samples = np.concatenate([noise(RATE * 5, 4, 0.02), spoken(RATE)[: RATE * 2]])  # past three credits
    with socket(url) as ws:
        with worker.lock:  # the model runs nothing while the lock is held here
            ws.send(json.dumps({"type": "start", "sample_rate": RATE}))
            credit = json.loads(ws.recv(timeout=30))["credit"]
            assert credit == worker.input_limit
            for start in range(0, len(samples), 3000):
                ws.send(samples[start : start + 3000].tobytes())
            ws.send(json.dumps({"type": "end"}))
            deadline = time.monotonic() + 30
            while not (worker.waiting and newest(worker).buffered == credit):
                assert time.monotonic() < deadline, "the server did not fill the request's credit"
                time.sleep(0.01)
            time.sleep(0.2)
            assert newest(worker).buffered == credit  # no more was read
        messages = list(receive_all(ws))
    got = activity(messages)
    assert_partition(got, len(samples), RATE)
    assert got == run_alone(worker, samples, RATE)


def test_an_8khz_stream_equals_its_isolated_run(listening: tuple[Server, str]) -> None:
    server, url = listening
    samples = recordings(8000)[1]
    got = activity(stream(url, samples, 1500, rate=8000))
    assert_partition(got, len(samples), 8000)
    assert got == run_alone(worker_of(server), samples, 8000)  # one row alone each time: equal exactly


def test_a_stalled_reader_holds_back_only_its_own_stream(
    listening: tuple[Server, str], isolated: list[list[ActivityEvent]]
) -> None:
    url = listening[1]
    long = np.concatenate([noise(RATE * 7, 9, 0.02), spoken(RATE)[: RATE // 2]])
    with socket(url, max_queue=1) as stalled:
        stalled.send(json.dumps({"type": "start", "sample_rate": RATE}))
        for start in range(0, len(long), 8000):
            stalled.send(long[start : start + 8000].tobytes())  # then it reads nothing for a while
        stalled.send(json.dumps({"type": "end"}))
        deadline = time.monotonic() + 120
        others = [stream(url, samples) for samples in recordings(RATE)[:3]]
        assert time.monotonic() < deadline
        for index, messages in enumerate(others):
            assert_same(activity(messages), isolated[index])
        messages = [json.loads(stalled.recv(timeout=30))]  # its ready
        messages += list(receive_all(stalled))
    got = activity(messages)
    assert_partition(got, len(long), RATE)


def test_a_client_that_leaves_is_cancelled_and_its_row_serves_the_next(
    listening: tuple[Server, str], isolated: list[list[ActivityEvent]]
) -> None:
    server, url = listening
    worker = worker_of(server)
    for _ in range(4):  # more than the three rows: every row is left by a cancelled request and used again
        with socket(url) as ws:
            ws.send(json.dumps({"type": "start", "sample_rate": RATE}))
            ws.send(recordings(RATE)[0][: RATE * 2].tobytes())
            json.loads(ws.recv(timeout=30))
            json.loads(ws.recv(timeout=30))  # its first event: it is running; then it leaves
    deadline = time.monotonic() + 60
    while worker.waiting and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not worker.waiting and sorted(worker.free_rows) == [0, 1, 2]
    for index in (0, 2):
        assert_same(activity(stream(url, recordings(RATE)[index])), isolated[index])


def refusal(url: str, start: object, frames: Sequence[bytes | str] = (), model: str = "silero") -> dict[str, Any]:
    with socket(url, model) as ws:
        try:
            ws.send(json.dumps(start) if not isinstance(start, str) else start)
            for frame in frames:
                ws.send(frame)
        except ConnectionClosed:  # refused before it was read: the error message waits in the client's queue
            pass
        while True:
            try:
                message = json.loads(ws.recv(timeout=60))
            except ConnectionClosed:
                raise AssertionError("closed without an error message") from None
            if message["type"] == "error":
                with pytest.raises(ConnectionClosed):
                    ws.recv(timeout=30)
                return message
            assert message["type"] in ("ready", "credit", "activity"), message


@pytest.mark.parametrize(
    ("start", "frames", "code", "param"),
    [
        ({"type": "start", "sample_rate": 44100}, [], 400, "sample_rate"),
        ({"type": "start"}, [], 400, "sample_rate"),
        ({"type": "start", "sample_rate": RATE, "encoding": "mp3"}, [], 400, "encoding"),
        ({"type": "begin", "sample_rate": RATE}, [], 400, "type"),
        ("not json", [], 400, "type"),
        ({"type": "start", "sample_rate": RATE}, [b"\x00" * 7], 400, "input"),
        ({"type": "start", "sample_rate": RATE}, [np.array([0.1, np.nan], "<f4").tobytes()], 400, "input"),
        ({"type": "start", "sample_rate": RATE}, ['{"type": "pause"}'], 400, "type"),
        ({"type": "start", "sample_rate": RATE}, [np.zeros(RATE * 9, "<f4").tobytes()], 413, "input"),
    ],
)  # fmt: skip
def test_a_malformed_stream_is_an_error_message_naming_the_field_and_a_close(
    listening: tuple[Server, str], start: object, frames: list[bytes | str], code: int, param: str
) -> None:
    message = refusal(listening[1], start, frames)
    assert message["code"] == code and message["param"] == param, message


def test_a_stream_of_another_model_or_none_is_refused_naming_model(listening: tuple[Server, str]) -> None:
    url = listening[1]
    for model, code in (("absent", 404), ("tiny-gpt2", 400)):
        message = refusal(url, {"type": "start", "sample_rate": RATE}, model=model)
        assert message["code"] == code and message["param"] == "model", message


def wav(samples: np.ndarray, rate: int) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(2)
        writer.setframerate(rate)
        writer.writeframes((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())
    return out.getvalue()


def test_post_activity_answers_a_wav_file_and_raw_pcm(
    listening: tuple[Server, str], isolated: list[list[ActivityEvent]]
) -> None:
    url = listening[1]
    samples = recordings(RATE)[0]
    with httpx.Client(base_url=url, timeout=120) as client:
        raw = client.post("/v1/audio/activity", params={"model": "silero", "sample_rate": RATE},
                          content=samples.astype("<f4").tobytes())  # fmt: skip
        assert raw.status_code == 200, raw.text
        body = raw.json()
        got = [ActivityEvent(i["start"], i["end"], i["probability"]) for i in body["intervals"]]
        assert body["samples"] == len(samples) and "segments" not in body
        assert_same(got, isolated[0])
        upload = client.post("/v1/audio/activity", data={"model": "silero", "threshold": "0.5"},
                             files={"file": ("speech.wav", wav(samples, RATE), "audio/wav")})  # fmt: skip
        assert upload.status_code == 200, upload.text
        segments = upload.json()["segments"]
        assert segments and all(0 <= s["start"] < s["end"] <= len(samples) for s in segments)
        # A file at the voice's own 22050 Hz, decoded and resampled to the 8 kHz the request asks for.
        voice = wav(spoken(22050), 22050)
        resampled = client.post("/v1/audio/activity", data={"model": "silero", "sample_rate": "8000"},
                                files={"file": ("voice.wav", voice, "audio/wav")})  # fmt: skip
        assert resampled.status_code == 200, resampled.text
        decoded = decode_audio(voice, 8000)
        assert resampled.json()["samples"] == len(decoded)
        got = [ActivityEvent(i["start"], i["end"], i["probability"]) for i in resampled.json()["intervals"]]
        assert got == run_alone(worker_of(listening[0]), decoded, 8000)


@pytest.mark.parametrize(
    ("params", "content", "files", "param"),
    [
        ({"model": "silero"}, b"\x00" * 8, None, "sample_rate"),
        ({"model": "silero", "sample_rate": 44100}, b"\x00" * 8, None, "sample_rate"),
        ({"model": "silero", "sample_rate": "fast"}, b"\x00" * 8, None, "sample_rate"),
        ({"model": "silero", "sample_rate": RATE, "encoding": "u8"}, b"\x00" * 8, None, "encoding"),
        ({"model": "silero", "sample_rate": RATE}, b"\x00" * 7, None, "input"),
        ({"model": "silero", "sample_rate": RATE, "threshold": 2}, b"\x00" * 8, None, "threshold"),
        ({"model": "silero", "sample_rate": RATE, "threshold": 0.5, "speech_pad_ms": -1}, b"\x00" * 8, None,
         "speech_pad_ms"),
        ({"model": "absent", "sample_rate": RATE}, b"\x00" * 8, None, "model"),
        ({"model": "tiny-gpt2", "sample_rate": RATE}, b"\x00" * 8, None, "model"),
        ({"model": "silero"}, None, {"file": ("a.wav", b"RIFF....", "audio/wav")}, "file"),
        ({"model": "silero", "sample_rate": "44100"}, None, {"file": ("a.wav", b"RIFF....", "audio/wav")},
         "sample_rate"),
        ({"model": "silero"}, None, {"file": ("long.wav", wav(np.zeros(RATE * 9), RATE), "audio/wav")}, "file"),
        ({"model": "silero"}, None, {"other": ("a.wav", b"x", "audio/wav")}, "file"),
    ],
)  # fmt: skip
def test_a_malformed_activity_request_is_a_4xx_naming_the_field(
    listening: tuple[Server, str],
    params: dict[str, str | int | float],
    content: bytes | None,
    files: dict[str, tuple[str, bytes, str]] | None,
    param: str,
) -> None:
    with httpx.Client(base_url=listening[1], timeout=60) as client:
        if files is None:
            reply = client.post("/v1/audio/activity", params=params, content=content)
        else:
            reply = client.post("/v1/audio/activity", data=params, files=files)
    assert 400 <= reply.status_code < 500 and reply.json()["error"]["param"] == param, reply.text


def test_unregistering_ends_open_streams_and_registering_again_serves(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    folder = activity_package(tmp_path)
    samples = recordings(RATE)[0]
    with serving(tmp_path_factory, folder) as server, Listener(server) as listener:
        with socket(listener.url) as ws:
            ws.send(json.dumps({"type": "start", "sample_rate": RATE}))
            ws.send(samples[:RATE].tobytes())  # no end: the stream stays open
            json.loads(ws.recv(timeout=30))
            server.unregister("silero")
            messages = list(receive_all(ws))
        assert messages[-1]["type"] == "error" and messages[-1]["code"] == 503, messages[-1]
        server.register(folder)
        worker = worker_of(server)
        assert_same(activity(stream(listener.url, samples)), run_alone(worker, samples, RATE))
