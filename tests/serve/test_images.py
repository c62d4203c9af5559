"""The image role over HTTP (`POST /v1/images/generations`) on the tiny text-to-image pipeline of tests/models/vision.

The oracle is diffusers' own `StableDiffusionPipeline` on the same models, tokenizer, seed, scheduler and steps
(and LoRA adapter, through its own `load_lora_weights`), recorded by scripts/record_image_oracle.py from the same
initial latents: each image Loam serves is compared with it before any encoding (Loam's `loam_f32` response format,
then the pipeline's own denormalization), within float32 rounding.  The scheduling cases compare what a request
gets beside others (staggered sizes and steps, a cancelled peer, a failing peer, other adapters) with what it gets
alone, byte for byte.
"""

from __future__ import annotations

import base64
import io
import json
import shutil
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
from PIL import Image
from safetensors.numpy import save_file

from loam.core.errors import LoamError
from loam.serve.image import ImageControl, ImageJob, ImageParams, ImageResult, ImageState, Plan
from loam.serve.metrics import Metrics
from loam.serve.scheduler import Event, Request
from loam.serve.server import Server
from loam.serve.spec import Package, PackageError
from loam.serve.stream import InputView, StreamRequest, StreamWorker, Work
from tests.serve.serving import PACKAGES, http_client, serving

pytestmark = pytest.mark.xdist_group("images")

PACKAGE = PACKAGES / "tiny_diffusion"
ORACLE = Path(__file__).parent / "image_oracle.npz"
ATOL = 2e-5
"""Loam against diffusers on images in [0, 1]: the two differ by at most 1.6e-6 here (float32 rounding in another
summation order through the UNet's steps); a dropped guidance row or adapter moves pixels by more than 0.1."""
MODEL = "tiny-diffusion"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(tmp_path_factory, PACKAGE) as server:
        yield server


@pytest.fixture(scope="module")
def client(server: Server) -> Iterator[httpx.Client]:
    with http_client(server, 120.0) as client:
        yield client


def oracle_cases() -> list[str]:
    with np.load(ORACLE) as data:
        return sorted(key.removesuffix(".image") for key in data.files if key.endswith(".image"))


def oracle(name: str) -> tuple[dict[str, object], np.ndarray]:
    with np.load(ORACLE) as data:
        return json.loads(bytes(data[f"{name}.params"])), np.asarray(data[f"{name}.image"])


def request_body(case: dict[str, object]) -> dict[str, object]:
    adapters = case.get("adapters") or []
    assert isinstance(adapters, list)
    return {
        "model": MODEL, "prompt": case["prompt"], "negative_prompt": case["negative_prompt"],
        "size": f"{case['width']}x{case['height']}", "seed": case["seed"], "steps": case["steps"],
        "scheduler": case["scheduler"], "guidance_scale": case["guidance_scale"],
        "adapters": [{"id": a, "scale": s} for a, s in adapters],
    }  # fmt: skip


def f32_images(client: httpx.Client, body: dict[str, object]) -> list[np.ndarray]:
    """The images of one request as the model made them (Loam's `loam_f32`): float32 [3, H, W] in [-1, 1]."""
    reply = client.post("/v1/images/generations", json={**body, "response_format": "loam_f32"})
    assert reply.status_code == 200, reply.text
    out = []
    for datum in reply.json()["data"]:
        raw = np.frombuffer(base64.b64decode(datum["loam_f32"]), "<f4")
        out.append(raw.reshape(datum["shape"]))
    return out


def as_pipeline_output(rgb: np.ndarray) -> np.ndarray:
    """What diffusers' pipeline returns for an image (output_type "np"): [H, W, 3] in [0, 1]."""
    return np.clip(rgb / 2 + 0.5, 0.0, 1.0).transpose(1, 2, 0)


# -- the oracle -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", oracle_cases())
def test_an_image_over_http_is_the_diffusers_pipelines(client: httpx.Client, case: str) -> None:
    """Euler with guidance, DDIM without, a negative prompt, non-square sizes, and a LoRA adapter at 0.7."""
    params, want = oracle(case)
    (rgb,) = f32_images(client, request_body(params))
    assert rgb.shape == (3, params["height"], params["width"])
    np.testing.assert_allclose(as_pipeline_output(rgb), want, rtol=0, atol=ATOL)


def test_an_adapter_changes_the_image_and_applies_to_its_request_only(client: httpx.Client) -> None:
    """Two requests at once, one with the adapter and one without: each is its own oracle's image, so the merged
    bank served only the rows that asked for it."""
    params, want = oracle("lora")
    plain = {**request_body(params), "adapters": []}
    with_adapter = request_body(params)
    alone = f32_images(client, plain)[0]
    results: dict[str, np.ndarray] = {}

    def run(name: str, body: dict[str, object]) -> None:
        results[name] = f32_images(client, body)[0]

    threads = [threading.Thread(target=run, args=a) for a in (("plain", plain), ("adapter", with_adapter))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    np.testing.assert_allclose(as_pipeline_output(results["adapter"]), want, rtol=0, atol=ATOL)
    assert np.array_equal(results["plain"], alone)
    assert np.abs(results["adapter"] - results["plain"]).max() > 0.1


# -- the OpenAI shape ----------------------------------------------------------------------------------------


def test_the_openai_client_gets_png_images_of_the_seeds_in_turn(server: Server, client: httpx.Client) -> None:
    """n=2 gives seeds seed and seed + 1; each PNG is the f32 image rounded as diffusers' numpy_to_pil rounds it."""
    with openai.OpenAI(base_url=f"{str(client.base_url).rstrip('/')}/v1", api_key="none", timeout=120) as api:
        reply = api.images.generate(
            model=MODEL, prompt="a red fox", n=2, size="24x16", response_format="b64_json",  # type: ignore[arg-type]  # the server takes any WxH its model allows
            extra_body={"seed": 40, "steps": 2},
        )  # fmt: skip
    assert reply.size == "24x16" and reply.output_format == "png" and reply.data is not None
    assert reply.usage is not None and reply.usage.input_tokens > 0
    for i, datum in enumerate(reply.data):
        assert datum.b64_json is not None
        image = Image.open(io.BytesIO(base64.b64decode(datum.b64_json)))
        assert image.format == "PNG" and image.size == (24, 16)
        (rgb,) = f32_images(
            client, {"model": MODEL, "prompt": "a red fox", "size": "24x16", "seed": 40 + i, "steps": 2}
        )
        want = (as_pipeline_output(rgb) * 255).round().astype(np.uint8)
        assert np.array_equal(np.asarray(image.convert("RGB")), want)


@pytest.mark.parametrize("fmt", ["jpeg", "webp"])
def test_jpeg_and_webp_with_compression(client: httpx.Client, fmt: str) -> None:
    reply = client.post("/v1/images/generations", json={
        "model": MODEL, "prompt": "fox", "size": "16x16", "steps": 1, "seed": 1, "output_format": fmt,
        "output_compression": 20,
    })  # fmt: skip
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["output_format"] == fmt and body["size"] == "16x16"
    image = Image.open(io.BytesIO(base64.b64decode(body["data"][0]["b64_json"])))
    assert image.format == fmt.upper() and image.size == (16, 16)


def test_a_stream_sends_partial_images_then_the_completed_one(client: httpx.Client) -> None:
    body = {"model": MODEL, "prompt": "fox", "size": "16x16", "steps": 4, "seed": 9, "stream": True,
            "partial_images": 2}  # fmt: skip
    kinds, payloads = [], []
    with client.stream("POST", "/v1/images/generations", json=body) as reply:
        assert reply.status_code == 200
        for line in reply.iter_lines():
            if line.startswith("event: "):
                kinds.append(line.removeprefix("event: "))
            elif line.startswith("data: ") and line != "data: [DONE]":
                payloads.append(json.loads(line.removeprefix("data: ")))
    assert kinds == ["image_generation.partial_image"] * 2 + ["image_generation.completed"]
    assert [p.get("partial_image_index") for p in payloads[:2]] == [0, 1]
    assert payloads[-1]["usage"]["input_tokens"] > 0
    plain = {k: v for k, v in body.items() if k not in ("stream", "partial_images")}
    whole = client.post("/v1/images/generations", json=plain)
    assert payloads[-1]["b64_json"] == whole.json()["data"][0]["b64_json"]
    assert payloads[0]["b64_json"] != payloads[-1]["b64_json"]


REFUSALS = [
    ({"size": "18x16"}, "size"),
    ({"size": "128x128"}, "size"),
    ({"size": "big"}, "size"),
    ({"steps": 0}, "steps"),
    ({"steps": 9}, "steps"),
    ({"response_format": "url"}, "response_format"),
    ({"output_format": "gif"}, "output_format"),
    ({"output_compression": 50}, "output_compression"),
    ({"adapters": [{"id": "nope", "scale": 1}]}, "adapters"),
    ({"adapters": [{"scale": 1}]}, "adapters"),
    ({"scheduler": "pndm"}, "scheduler"),
    ({"guidance_scale": -1}, "guidance_scale"),
    ({"partial_images": 2}, "partial_images"),
    ({"n": 11}, "n"),
    ({"seed": -1}, "seed"),
    ({"prompt": None}, "prompt"),
    ({"colour": "red"}, "colour"),
]


@pytest.mark.parametrize(("change", "param"), REFUSALS, ids=[p for _, p in REFUSALS])
def test_a_malformed_request_is_a_400_naming_the_field(client: httpx.Client, change: dict[str, object],
                                                      param: str) -> None:  # fmt: skip
    body = {k: v for k, v in {"model": MODEL, "prompt": "fox", **change}.items() if v is not None}
    reply = client.post("/v1/images/generations", json=body)
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == param


def test_metrics_count_images_and_steps(client: httpx.Client) -> None:
    client.post("/v1/images/generations", json={"model": MODEL, "prompt": "fox", "size": "8x8", "steps": 3})
    text = client.get("/metrics").text
    images = [line for line in text.splitlines() if line.startswith(f'loam_images_generated_total{{model="{MODEL}"}}')]
    steps = [line for line in text.splitlines() if line.startswith(f'loam_denoising_steps_total{{model="{MODEL}"}}')]
    assert images and float(images[0].split()[-1]) >= 1
    assert steps and float(steps[0].split()[-1]) >= 3
    assert f'loam_denoising_steps_per_second{{model="{MODEL}"}}' in text
    assert f'loam_queue_depth{{model="{MODEL}"}}' in text


# -- scheduling ------------------------------------------------------------------------------------------------


def test_concurrent_requests_are_their_isolated_images(server: Server, client: httpx.Client) -> None:
    """Staggered requests of different sizes, steps and schedulers at once: each is byte for byte what it is
    alone, and no stage ran twice.  (Whether two requests share a cohort depends on when each arrives: the oldest
    request's work goes first, and a newer one joins only where its next stage has the same tag; the cancellation
    test below holds the worker so that three requests deterministically share cohorts.)"""
    bodies = [
        {"model": MODEL, "prompt": f"fox {i}", "size": size, "steps": steps, "seed": i, "scheduler": sched}
        for i, (size, steps, sched) in enumerate([
            ("16x16", 3, "euler"), ("16x16", 2, "euler"), ("32x24", 4, "ddim"), ("16x16", 4, "ddim"),
            ("8x16", 2, "euler"), ("32x24", 2, "euler"),
        ])
    ]  # fmt: skip
    alone = [f32_images(client, body)[0] for body in bodies]
    worker = server.models[MODEL].worker
    cohorts_before = worker.cohorts
    results: dict[int, np.ndarray] = {}

    def run(i: int) -> None:
        time.sleep(0.03 * i)  # staggered: each arrives while the ones before it are at some stage
        results[i] = f32_images(client, bodies[i])[0]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, image in enumerate(alone):
        assert np.array_equal(results[i], image), bodies[i]
    stages = sum(2 + int(str(b["steps"])) for b in bodies)  # encode, each step, decode
    assert worker.cohorts - cohorts_before <= stages


def test_unregister_then_register_again(tmp_path_factory: pytest.TempPathFactory) -> None:
    body = {"model": MODEL, "prompt": "fox", "size": "16x8", "steps": 2, "seed": 4}
    with serving(tmp_path_factory, PACKAGE) as server, http_client(server, 120.0) as client:
        first = f32_images(client, body)[0]
        assert client.delete(f"/v1/packages/{MODEL}").status_code == 200
        assert client.post("/v1/images/generations", json=body).status_code == 404
        server.register(PACKAGE)
        assert np.array_equal(f32_images(client, body)[0], first)


# -- a worker of the package's stages, driven directly --------------------------------------------------------


class GatedImages(ImageControl):
    """The image control, offering no work until `opened` is set (where `hold`: requests submitted meanwhile then
    start together, whatever the worker's timing), pausing in the first cohort of `gate_at` or more members until
    `gate` is set; a request whose prompt is "poison" makes any cohort holding it fail."""

    def __init__(self, gate_at: int = 1 << 30, hold: bool = False) -> None:
        self.gate_at = gate_at
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.opened = threading.Event()
        if not hold:
            self.opened.set()
        self.poisoned: set[int] = set()

    def prepare_request(self, state: object, params: object) -> ImageJob:
        job = super().prepare_request(state, params)
        if isinstance(params, ImageParams) and params.prompt == "poison":
            self.poisoned.add(id(job))
        return job

    def prepare_work(self, state: object, request: object, view: InputView) -> Work:
        if not self.opened.is_set():
            return Work(b"", 0, "")
        return super().prepare_work(state, request, view)

    def generate(self, state: object, plan: object) -> np.ndarray:
        assert isinstance(plan, Plan)
        if any(id(part.job) in self.poisoned for part in plan.parts):
            raise LoamError("a poisoned request")
        if len(plan.parts) >= self.gate_at and not self.entered.is_set():
            self.entered.set()
            assert self.gate.wait(60)
        return super().generate(state, plan)


def worker_of(server: Server, control: GatedImages) -> StreamWorker:
    package: Package = server.models[MODEL].package
    state = control.prepare(package)
    assert isinstance(state, ImageState)
    return StreamWorker("gated", Metrics().model("gated"), control, state, package.spec.capacities)


def start(worker: StreamWorker, params: ImageParams) -> tuple[StreamRequest, Iterator[Event]]:
    sink, drain = Request.collector()
    request = worker.open(params, sink)
    return request, drain(120)


def image_of(events: Iterator[Event]) -> np.ndarray:
    got = list(events)
    assert got[-1].kind == "done", got[-1].text
    results = [e.value for e in got if e.kind == "event" and isinstance(e.value, ImageResult)]
    assert len(results) == 1
    return results[0].rgb


def isolated(server: Server, params: Sequence[ImageParams]) -> list[np.ndarray]:
    worker = worker_of(server, GatedImages())
    try:
        return [image_of(start(worker, p)[1]) for p in params]
    finally:
        worker.stop()


def test_a_peer_cancelled_in_an_accepted_cohort_leaves_the_others_images(server: Server) -> None:
    params = [ImageParams(f"fox {i}", width=16, height=16, seed=20 + i, steps=3) for i in range(3)]
    alone = isolated(server, params)
    control = GatedImages(gate_at=3, hold=True)
    worker = worker_of(server, control)
    try:
        # The first request's first stage holds the worker until the others have arrived; then its second step
        # and their first share one UNet cohort (one geometry: any step).
        started = [start(worker, p) for p in params]
        control.opened.set()
        assert control.entered.wait(60)  # a cohort of all three is running
        worker.cancel(started[1][0])
        control.gate.set()
        assert np.array_equal(image_of(started[0][1]), alone[0])
        assert np.array_equal(image_of(started[2][1]), alone[2])
        cancelled = list(started[1][1])
        assert cancelled[-1].kind == "error" and cancelled[-1].status == 499
        assert not any(isinstance(e.value, ImageResult) for e in cancelled)
        # its row is free again, and serves the next request as it serves one alone
        again = ImageParams("fox 1", width=16, height=16, seed=21, steps=3)
        assert np.array_equal(image_of(start(worker, again)[1]), alone[1])
    finally:
        control.gate.set()
        worker.stop()


def test_a_failed_request_fails_alone_and_its_row_is_reused(server: Server) -> None:
    good = [ImageParams(f"fox {i}", width=16, height=16, seed=30 + i, steps=2) for i in range(2)]
    alone = isolated(server, good)
    control = GatedImages()
    worker = worker_of(server, control)
    try:
        first = start(worker, good[0])
        poisoned = start(worker, ImageParams("poison", width=16, height=16, seed=1, steps=2))
        second = start(worker, good[1])
        assert np.array_equal(image_of(first[1]), alone[0])
        assert np.array_equal(image_of(second[1]), alone[1])
        failed = list(poisoned[1])
        assert failed[-1].kind == "error" and "poisoned" in failed[-1].text
        assert np.array_equal(image_of(start(worker, good[0])[1]), alone[0])
        assert sorted(worker.free_rows) == list(range(server.models[MODEL].package.spec.capacities.resident_requests))
    finally:
        worker.stop()


# -- the package --------------------------------------------------------------------------------------------------


def package_with_adapter(tmp: Path, tensors: dict[str, np.ndarray]) -> Path:
    folder = tmp / "pkg"
    shutil.copytree(PACKAGE, folder)
    table = json.loads((PACKAGE / "model.json").read_text(encoding="utf-8"))
    for stage in table["stages"].values():
        stage["graph"] = str((PACKAGE / stage["graph"]).resolve())
    table["sources"] = {k: str((PACKAGE / v).resolve()) for k, v in table["sources"].items()}
    table["adapters"] = {"bad": "bad.safetensors"}
    (folder / "model.json").write_text(json.dumps(table), encoding="utf-8")
    save_file(tensors, str(folder / "bad.safetensors"))
    return folder


BLOCK = "unet.down_blocks.1.attentions.0.transformer_blocks.0.attn1"


@pytest.mark.parametrize(
    ("tensors", "message"),
    [
        ({f"{BLOCK}.to_z.lora_A.weight": np.ones((2, 32), np.float32),
          f"{BLOCK}.to_z.lora_B.weight": np.ones((32, 2), np.float32)}, "not an initializer of the UNet graph"),
        ({f"{BLOCK}.to_q.lora_A.weight": np.ones((2, 16), np.float32),
          f"{BLOCK}.to_q.lora_B.weight": np.ones((32, 2), np.float32)}, "B @ A is"),
        ({f"{BLOCK}.to_q.lora_A.weight": np.ones((2, 32), np.float32)}, "has no lora_B"),
    ],
    ids=["target", "shape", "unpaired"],
)  # fmt: skip
def test_an_adapter_that_disagrees_with_the_unet_refuses_the_package(
    tmp_path: Path, tensors: dict[str, np.ndarray], message: str
) -> None:
    folder = package_with_adapter(tmp_path, tensors)
    server = Server()
    try:
        with pytest.raises(PackageError, match=rf"bad\.safetensors: key '{BLOCK}\.to_[qz]\.lora_A\.weight'.*{message}"):
            server.register(folder)
    finally:
        server.close()


def test_merged_banks_count_as_workspace_and_go_with_deactivation(tmp_path_factory: pytest.TempPathFactory) -> None:
    """An adapter set's merged bank is resident workspace while the model is active; deactivating the model drops
    it, and the next request with the adapter makes it again, giving diffusers' image still."""
    params, want = oracle("lora")
    with serving(tmp_path_factory, PACKAGE) as server, http_client(server, 120.0) as client:
        worker = server.models[MODEL].worker
        assert worker.resident_bytes()["workspace"] == 0
        f32_images(client, request_body(params))
        assert worker.resident_bytes()["workspace"] > 0
        server.deactivate(MODEL)
        assert worker.resident_bytes() == {"kv": 0, "workspace": 0}
        (rgb,) = f32_images(client, request_body(params))
        np.testing.assert_allclose(as_pipeline_output(rgb), want, rtol=0, atol=ATOL)
