"""Image-conditioned text against a real server on 127.0.0.1: the tiny LLaVA of tests/models/tiny_vlm served as a text
package with an image component, driven by the `openai` client with image content parts.

The oracle is transformers' own greedy `generate` for each chat (`scripts/export_tiny_vlm.py` recorded its tokens
and CLIPImageProcessor's pixel values in `oracle.json` and `oracle.npz`)."""

from __future__ import annotations

import base64
import io
import json
import os
from collections.abc import Iterator

import httpx
import numpy as np
import openai
import pytest
from PIL import Image

from loam.core.errors import LoamError
from loam.serve.cli import Listener
from loam.serve.image_text import IMAGE_IDS, decode_rgb8, preprocess, read_header, read_image_spec
from loam.serve.sampling import SamplingParams
from loam.serve.scheduler import Request
from loam.serve.server import Server
from loam.serve.text import TextRequest, TextWorker
from tests.serve.serving import MODELS, PACKAGES, finish, package_copy, serving

MODEL = "tiny-vlm"
FOLDER = MODELS / "tiny_vlm"
ORACLE = json.loads((FOLDER / "oracle.json").read_text(encoding="utf-8"))
CHATS = ORACLE["chats"]
MAX_TOKENS = ORACLE["max_tokens"]


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def image_url(name: str) -> str:
    return data_url((FOLDER / name).read_bytes())


def parts(chat: str, urls: dict[int, str] | None = None) -> list[dict[str, object]]:
    """The oracle chat's content as OpenAI parts: its text with an image part where each <image> stands (`urls`
    replaces the k-th image's URL)."""
    entry = CHATS[chat]
    out: list[dict[str, object]] = []
    pieces = entry["text"].split("<image>")
    for k, piece in enumerate(pieces):
        if piece:
            out.append({"type": "text", "text": piece})
        if k < len(entry["images"]):
            url = (urls or {}).get(k, image_url(entry["images"][k]))
            out.append({"type": "image_url", "image_url": {"url": url}})
    return out


def ask(client: openai.OpenAI, content: object) -> tuple[list[int], dict[str, object]]:
    """Greedy tokens of a one-message chat, and the reply's usage."""
    reply = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": content}],  # type: ignore[list-item, misc]
        max_tokens=MAX_TOKENS,
        temperature=0,
        extra_body={"return_token_ids": True},
    )
    choice = reply.choices[0].model_dump()
    assert reply.usage is not None
    return choice["token_ids"], reply.usage.model_dump()


def metric(http: httpx.Client, name: str) -> float:
    for line in http.get("/metrics").text.splitlines():
        if line.startswith(f'{name}{{model="{MODEL}"}}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(tmp_path_factory, PACKAGES / "tiny_vlm") as server:
        yield server


@pytest.fixture(scope="module")
def url(server: Server) -> Iterator[str]:
    with Listener(server) as listener:
        yield listener.url


@pytest.fixture(scope="module")
def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def http(url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=url, timeout=120) as client:
        yield client


def worker_of(server: Server) -> TextWorker:
    worker = server.model(MODEL, "text").worker
    assert isinstance(worker, TextWorker)
    return worker


# -- the numerics, without a server --------------------------------------------------------------------------------


def test_preprocessing_is_clip_image_processors() -> None:
    spec = read_image_spec(
        json.loads((PACKAGES / "tiny_vlm" / "model.json").read_text(encoding="utf-8"))["image"], "model.json",
        ["projector", "embed"],
    )  # fmt: skip
    assert spec is not None
    recorded = np.load(FOLDER / "oracle.npz")
    for name in ("red.png", "noise.png"):
        pixels = decode_rgb8((FOLDER / name).read_bytes(), "image")
        assert pixels.dtype == np.uint8 and pixels.shape[2] == 3  # decoded at its own size
        want = recorded[f"pixel_values/{name}"][0]
        got = preprocess(pixels, spec)
        assert got.shape == want.shape == (3, 16, 16)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


def test_headers_give_the_size_without_decoding() -> None:
    buffer = io.BytesIO()
    Image.new("RGB", (37, 23), (9, 80, 200)).save(buffer, format="JPEG")
    jpeg = buffer.getvalue()
    header = read_header(jpeg)
    assert header is not None and (header.format, header.width, header.height) == ("jpeg", 37, 23)
    png = (FOLDER / "noise.png").read_bytes()
    header = read_header(png)
    assert header is not None and (header.format, header.width, header.height) == ("png", 18, 30)
    assert read_header(png[:20]) is None and read_header(b"GIF89a....") is None


def test_a_malformed_image_key_is_refused_naming_it(tmp_path_factory: pytest.TempPathFactory) -> None:
    folder = package_copy(tmp_path_factory, "tiny_vlm", image={"projector": "vision"})
    with pytest.raises(LoamError, match=r"model\.json: 'image\.projector' names no stage"):
        with serving(tmp_path_factory, folder):
            pass
    folder = package_copy(tmp_path_factory, "tiny_vlm", image={"std": [0.2, 0.0, 0.2]})
    with pytest.raises(LoamError, match=r"'image\.std' must be positive"):
        with serving(tmp_path_factory, folder):
            pass
    folder = package_copy(tmp_path_factory, "tiny_vlm", image=None)  # a decoder over embeddings, none to embed ids
    with pytest.raises(LoamError, match=r"model\.json stage 'decoder': the decoder takes 'inputs_embeds'"):
        with serving(tmp_path_factory, folder):
            pass


# -- served ---------------------------------------------------------------------------------------------------------


def test_a_chat_with_an_image_answers_as_transformers_does(client: openai.OpenAI) -> None:
    for chat in ("red", "noise", "both"):
        tokens, usage = ask(client, parts(chat))
        assert tokens == CHATS[chat]["tokens"], chat
        assert usage["prompt_tokens"] == len(CHATS[chat]["prompt"])
    messages = [{"role": "user", "content": parts("red")}]
    whole = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=MAX_TOKENS, temperature=0)  # type: ignore[arg-type]
    stream = client.chat.completions.create(
        model=MODEL,
        messages=messages,
        max_tokens=MAX_TOKENS,
        temperature=0,
        stream=True,  # type: ignore[arg-type]
    )
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert streamed == whole.choices[0].message.content and streamed


def test_a_text_only_chat_on_the_same_package_is_the_language_model_alone(client: openai.OpenAI) -> None:
    tokens, _ = ask(client, CHATS["text"]["text"])
    assert tokens == CHATS["text"]["tokens"]
    tokens, _ = ask(client, [{"type": "text", "text": CHATS["text"]["text"]}])
    assert tokens == CHATS["text"]["tokens"]


def test_image_positions_name_the_image_bytes(server: Server) -> None:
    component = worker_of(server).images
    assert component is not None

    def read(name: str) -> list[int]:
        content = [{"type": "image_url", "image_url": {"url": image_url(name)}}]
        (image,) = component.read_parts([{"role": "user", "content": content}])
        return component.token_ids(image)

    red, again, noise = read("red.png"), read("red.png"), read("noise.png")
    assert red == again and len(red) == ORACLE["rows"]
    assert not set(red) & set(noise) and min(red + noise) >= IMAGE_IDS


def image_request(
    worker: TextWorker, content: list[dict[str, object]], submit: bool = True
) -> tuple[TextRequest, object]:
    """A greedy chat with images for the worker, framed as the chat route frames it, and submitted unless not
    `submit`; returns it and the iterator over its events."""
    component = worker.images
    assert component is not None
    messages = [{"role": "user", "content": content}]
    images = component.read_parts(messages)
    component.decode(images)
    text = "".join(str(p["text"]) if p["type"] == "text" else component.spec.token for p in content)
    ids = component.expand(worker.control.encode_chat(worker.state, [{"role": "user", "content": text}], "m"), images)
    sink, drain = Request.collector()
    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0)
    request = TextRequest(sink=sink, prompt=ids, params=params, eos=worker.state.eos, images=images)
    if submit:
        worker.submit(request)
    return request, drain


def test_two_images_of_two_requests_share_one_projector_call(
    server: Server, http: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = worker_of(server)
    # A question no other test asks about each image, each request alone first, its retained prefix then dropped.
    chats = {
        name: [{"type": "image_url", "image_url": {"url": image_url(f"{name}.png")}}, {"type": "text", "text": "Hm?"}]
        for name in ("red", "noise")
    }
    alone = {}
    for name, content in chats.items():
        end = finish(image_request(worker, content)[1])
        assert end.kind == "done", end.text
        alone[name] = end.value
        with worker.lock:
            worker.trim()
    assert alone["red"] != alone["noise"]
    calls, images = metric(http, "loam_image_projector_calls_total"), metric(http, "loam_image_projected_total")
    pending = [image_request(worker, content, submit=False) for content in chats.values()]
    staged = [request for request, _ in pending]
    step = worker.step

    def together(eligible: list[Request]) -> bool:
        """The worker's step, waiting while only one of the two has arrived (it takes the rest as they come)."""
        if sum(1 for r in eligible if r in staged) == 1:
            return False  # nothing ran: the worker takes its inbox again
        return step(eligible)

    monkeypatch.setattr(worker, "step", together)
    for request in staged:
        worker.submit(request)
    ends = [finish(drain) for _, drain in pending]
    assert [end.value for end in ends] == list(alone.values())
    assert metric(http, "loam_image_projector_calls_total") == calls + 1
    assert metric(http, "loam_image_projected_total") == images + 2
    assert worker.images is not None and worker.images.held() == 0  # each image went with its last request
    assert worker.images.resident_bytes() > 0  # the projector's pooled intermediates, made by its first call
    with worker.lock:
        worker.trim()
    assert worker.images.resident_bytes() == 0


def test_a_retained_image_prefix_skips_the_projector(server: Server, client: openai.OpenAI, http: httpx.Client) -> None:
    with worker_of(server).lock:  # what earlier tests retained goes
        worker_of(server).trim()
    content = parts("red")
    calls = metric(http, "loam_image_projector_calls_total")
    first, _ = ask(client, content)
    assert metric(http, "loam_image_projector_calls_total") == calls + 1
    calls += 1
    again, usage = ask(client, content)
    assert again == first == CHATS["red"]["tokens"]
    details = usage["prompt_tokens_details"]
    assert isinstance(details, dict) and details["cached_tokens"] >= 24  # the image's rows among them
    assert metric(http, "loam_image_projector_calls_total") == calls
    # The same question about another image at the same place: its rows are not the retained ones.
    other, _ = ask(client, parts("red", {0: image_url("noise.png")}))
    assert other == CHATS["noise"]["tokens"]
    assert metric(http, "loam_image_projector_calls_total") == calls + 1


def test_a_remote_image_url_is_refused(http: httpx.Client) -> None:
    content = [
        {"type": "text", "text": "What?"},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
    ]
    reply = http.post("/v1/chat/completions", json={"model": MODEL, "messages": [{"role": "user", "content": content}]})
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["param"] == "messages[0].content[1].image_url.url" and "fetches nothing" in error["message"]


def test_a_corrupt_image_is_refused_naming_its_content_part(http: httpx.Client, client: openai.OpenAI) -> None:
    broken = (FOLDER / "noise.png").read_bytes()[:60]  # a PNG header whose pixels are cut off
    content = [{"type": "text", "text": "See"}, {"type": "image_url", "image_url": {"url": data_url(broken)}}]
    reply = http.post("/v1/chat/completions", json={"model": MODEL, "messages": [{"role": "user", "content": content}]})
    assert reply.status_code == 400
    assert reply.json()["error"]["param"] == "messages[0].content[1]"
    not_an_image = [{"type": "image_url", "image_url": {"url": data_url(b"plain text")}}]
    reply = http.post(
        "/v1/chat/completions", json={"model": MODEL, "messages": [{"role": "user", "content": not_an_image}]}
    )
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "messages[0].content[0]"
    # The server serves on, and the refused request held nothing.
    tokens, _ = ask(client, parts("noise"))
    assert tokens == CHATS["noise"]["tokens"]


def huge_png(width: int, height: int) -> bytes:
    """A PNG whose header says width x height, with no pixel data after it: only its header can be read."""
    ihdr = width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes([8, 2, 0, 0, 0])
    return b"\x89PNG\r\n\x1a\n" + len(ihdr).to_bytes(4, "big") + b"IHDR" + ihdr + b"\0\0\0\0"


def test_the_memory_forecast_refuses_an_image_too_big_before_decoding_it(
    server: Server, tmp_path_factory: pytest.TempPathFactory
) -> None:
    served = server.model(MODEL, "text")
    limit = served.forecast.total + (4 << 20)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LOAM_CACHE_DIR", str(tmp_path_factory.mktemp("serve-cache")))
        limited = Server(memory_limit=limit)
        try:
            limited.register(PACKAGES / "tiny_vlm")
            with Listener(limited) as listener, httpx.Client(base_url=listener.url, timeout=120) as http:
                # 2000 x 2000 RGB8 is 12 MB: past the 4 MiB left, from the header alone (its pixels are not there).
                big = [{"type": "image_url", "image_url": {"url": data_url(huge_png(2000, 2000))}}]
                reply = http.post(
                    "/v1/chat/completions", json={"model": MODEL, "messages": [{"role": "user", "content": big}]}
                )
                assert reply.status_code == 413
                error = reply.json()["error"]
                assert error["param"] == "messages" and "--memory-limit" in error["message"]
                small = [{"type": "image_url", "image_url": {"url": data_url(huge_png(40, 40))}}]
                reply = http.post(
                    "/v1/chat/completions", json={"model": MODEL, "messages": [{"role": "user", "content": small}]}
                )
                assert (
                    reply.status_code == 400 and reply.json()["error"]["param"] == "messages[0].content[0]"
                )  # decoded
        finally:
            limited.close()
    assert os.environ.get("LOAM_CACHE_DIR") != ""
