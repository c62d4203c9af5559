"""The image role: text-to-image diffusion, driven stage by stage as continuing requests.

An image request has no input stream: all it needs is in the request (prompt, size, seed, steps,
guidance, scheduler, adapters).  Its work is its next stage, which `ImageControl.prepare_work` offers to
the continuing-request scheduler (`loam.serve.stream`) with a compatibility tag:

    encode      the prompt and the negative prompt through the text encoder   tag "encode"
    denoise     one step: the UNet on the request's rows, then the scheduler   tag "HxW:unet[:adapters]"
    decode      the latents through the VAE's decoder (also for a partial)     tag "HxW:vae"

where HxW is the latents' extent.  Requests with equal tags share one call: every request of one
geometry shares its UNet call whatever step each one is at (the UNet takes a timestep per row), and a
request's conditional and unconditional rows (classifier-free guidance) run in the same call.  The rows
of one cohort with different adapters never share a call: the adapter set is part of the UNet's tag, and
its call runs on that set's merged weights (`loam.serve.lora`).

One build serves every geometry: the stages are built with their height and width symbolic, so no
build is made per size (`loam.serve.specialize` would build one per size; the tiny stages this role is
tested on gain nothing from it).

The control keeps, per request, the continuation cursor: its stage, its step index, its latents and its
text states (`ImageJob`); `generate` only runs stages over a plan's packed inputs, and `complete` advances
one request from its own slice of the cohort's output, so a member cancelled mid-cohort leaves the others'
slices as they were.  The initial latents come from the request's own seed (a numpy Generator of its
own), so a seed gives the same image whoever its neighbours are.  The schedulers are
`loam.serve.schedulers`' (diffusers' Euler discrete and DDIM, in numpy).

Events, in order: `ImageProgress(step, steps)` after each step, `ImagePartial(rgb, index)` where the
request asked for partial images, and last `ImageResult(rgb)`: float32 RGB, channels first, in [-1, 1].
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from loam.serve.lora import AdapterBanks
from loam.serve.metrics import ModelMetrics
from loam.serve.residency import array_bytes
from loam.serve.scheduler import ServeError
from loam.serve.schedulers import SCHEDULERS, Schedule, SchedulerConfig, make_schedule
from loam.serve.spec import Control, Package, PackageError, PackageTokenizer, Stage, refuse_control
from loam.serve.stream import Completion, InputView, Member, StreamControl, StreamRequest, StreamWorker, Work

STAGES = ("text_encoder", "unet", "vae_decoder")
"""The stages an image package declares, by these names."""


@dataclass(frozen=True)
class ImageConfig:
    """The package's `image` key: the pipeline's geometry and the limits of a request."""

    latent_channels: int = 4
    vae_scale_factor: int = 8  # image pixels per latent, along each axis
    unet_downsampling: int = 8  # latents per cell of the UNet's coarsest level, along each axis
    scaling_factor: float = 0.18215  # the VAE's latent scale: the decoder reads latents / scaling_factor
    min_size: int = 64
    max_size: int = 1024
    default_size: int = 512
    max_steps: int = 50
    default_steps: int = 25
    guidance_scale: float = 7.5
    tokens: int = 77  # the text encoder's prompt length (padded to it, cut at it)

    @property
    def multiple(self) -> int:
        """What a height or width must be a multiple of: a latent cell the UNet can halve down to its coarsest."""
        return self.vae_scale_factor * self.unet_downsampling

    @staticmethod
    def read(raw: object, where: str) -> ImageConfig:
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            raise PackageError(f"{where}: key 'image' must be an object")
        known = ImageConfig.__dataclass_fields__
        values: dict[str, object] = {}
        for key, value in raw.items():
            if key not in known:
                raise PackageError(f"{where}: key 'image.{key}' is unknown (known: {', '.join(known)})")
            floating = key in ("scaling_factor", "guidance_scale")
            ok = isinstance(value, (int, float)) if floating else isinstance(value, int)
            if not ok or isinstance(value, bool) or value <= 0:
                raise PackageError(
                    f"{where}: key 'image.{key}' must be a positive {'number' if floating else 'integer'}"
                )
            values[key] = float(value) if floating else value
        config = ImageConfig(**values)  # type: ignore[arg-type]  # each value checked against its field above
        m = config.multiple
        if not (config.min_size <= config.default_size <= config.max_size) or any(
            s % m for s in (config.min_size, config.default_size, config.max_size)
        ):
            raise PackageError(
                f"{where}: key 'image' needs min_size <= default_size <= max_size, each a multiple of {m} "
                "(vae_scale_factor x unet_downsampling)"
            )
        if not 1 <= config.default_steps <= config.max_steps:
            raise PackageError(f"{where}: key 'image.default_steps' must be in [1, max_steps]")
        return config


@dataclass(frozen=True)
class ImageParams:
    """One image request as the HTTP layer read it (None: the package's default)."""

    prompt: str
    negative_prompt: str = ""
    width: int | None = None
    height: int | None = None
    seed: int = 0
    steps: int | None = None
    guidance_scale: float | None = None
    scheduler: str | None = None
    adapters: tuple[tuple[str, float], ...] = ()
    partial_images: int = 0


@dataclass(frozen=True)
class ImageProgress:
    step: int  # steps done
    steps: int
    nbytes: int = 16


@dataclass(frozen=True)
class ImagePartial:
    """The image decoded from the latents as they are after some steps (F32 CHW RGB in [-1, 1])."""

    rgb: np.ndarray
    index: int  # 0 for the first partial image

    @property
    def nbytes(self) -> int:
        return int(self.rgb.nbytes)


@dataclass(frozen=True)
class ImageResult:
    """The request's image: float32, [3, height, width], in [-1, 1]."""

    rgb: np.ndarray

    @property
    def nbytes(self) -> int:
        return int(self.rgb.nbytes)


@dataclass(eq=False)
class ImageJob:
    """One request's retained state: what it asked for and its continuation cursor."""

    ids: np.ndarray  # [rows, tokens] int64: the negative prompt's ids first where guided, then the prompt's
    height: int  # pixels
    width: int
    schedule: Schedule
    guidance: float
    adapters: tuple[tuple[str, float], ...]
    partials: frozenset[int]  # the step counts after which a partial image is decoded
    latents: np.ndarray | None  # [1, C, h, w]
    prompt_tokens: int = 0  # the prompt's ids before padding (its usage)
    states: np.ndarray | None = None  # [rows, tokens, hidden]: the text encoder's output, once encoded
    step: int = 0  # steps done
    partial_due: bool = False
    partials_sent: int = 0

    @property
    def rows(self) -> int:
        return int(self.ids.shape[0])

    @property
    def geometry(self) -> str:
        assert self.latents is not None
        return f"{self.latents.shape[2]}x{self.latents.shape[3]}"

    def stage(self) -> str:
        if self.states is None:
            return "encode"
        if self.partial_due or self.step == self.schedule.steps:
            return "decode"
        return "denoise"


@dataclass
class ImageState:
    """What `ImageControl.prepare` settles: the stages, the tokenizer, the limits and the adapters."""

    package: str
    stages: dict[str, Stage]
    tokenizer: PackageTokenizer
    config: ImageConfig
    scheduler: SchedulerConfig
    banks: AdapterBanks
    hidden_output: int  # the text encoder's output index of its last hidden state
    bos: int
    eos: int
    pad: int
    metrics: ModelMetrics | None = None
    schedules: dict[tuple[str, int], Schedule] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def schedule(self, name: str, steps: int) -> Schedule:
        with self.lock:
            key = (name, steps)
            if key not in self.schedules:
                self.schedules[key] = make_schedule(self.scheduler, name, steps)
            return self.schedules[key]


@dataclass(frozen=True)
class Part:
    """One member's part of a cohort: its rows [start, stop) of the stage's batch."""

    job: ImageJob
    start: int
    stop: int


@dataclass(frozen=True)
class Plan:
    kind: str  # encode, denoise, decode
    parts: tuple[Part, ...]
    inputs: tuple[np.ndarray, ...]
    adapters: tuple[tuple[str, float], ...] = ()


class ImageControl:
    """The image role's built-in control: a Stable-Diffusion-shaped pipeline (CLIP text encoder, UNet, VAE
    decoder) as the package's three stages."""

    def prepare(self, package: Package) -> ImageState:
        where = str(package.spec.folder / "model.json")
        missing = [name for name in STAGES if name not in package.stages]
        if missing or len(package.stages) != len(STAGES):
            raise PackageError(f"{where}: key 'stages' must name {', '.join(STAGES)}; got {sorted(package.stages)}")
        if package.tokenizer is None:
            raise PackageError(f"{where}: key 'tokenizer' must name the text encoder's tokenizer")
        config = ImageConfig.read(package.spec.role_keys.get("image"), where)
        scheduler = SchedulerConfig.read(package.spec.role_keys.get("scheduler"), where)
        stages = dict(package.stages)
        encoder = stages["text_encoder"]
        if "last_hidden_state" not in encoder.outputs:
            raise PackageError(
                f"{where}: stage 'text_encoder' has outputs {list(encoder.outputs)}, not last_hidden_state"
            )
        tokenizer = package.tokenizer
        framed = tokenizer.encode("")
        if len(framed) != 2:
            raise PackageError(f"{where}: key 'tokenizer': an empty prompt must read as start and end, got {framed}")
        pad = _pad_id(tokenizer, framed[1])
        banks = AdapterBanks.read(package, stages["unet"], package.spec.role_keys.get("adapters"), where)
        return ImageState(
            package.spec.name, stages, tokenizer, config, scheduler, banks,
            encoder.outputs.index("last_hidden_state"), framed[0], framed[1], pad,
        )  # fmt: skip

    # -- a request -----------------------------------------------------------------------------------------------

    def prepare_request(self, state: object, params: object) -> ImageJob:
        assert isinstance(state, ImageState) and isinstance(params, ImageParams)
        config = state.config
        width = config.default_size if params.width is None else params.width
        height = config.default_size if params.height is None else params.height
        for extent in (width, height):
            if extent % config.multiple or not config.min_size <= extent <= config.max_size:
                raise ServeError(
                    f"size {width}x{height}: width and height must be multiples of {config.multiple} in "
                    f"[{config.min_size}, {config.max_size}]",
                    param="size",
                )
        steps = config.default_steps if params.steps is None else params.steps
        if not 1 <= steps <= config.max_steps:
            raise ServeError(f"'steps' must be in [1, {config.max_steps}], got {steps}", param="steps")
        guidance = config.guidance_scale if params.guidance_scale is None else params.guidance_scale
        if not math.isfinite(guidance) or not 0 <= guidance <= 100:
            raise ServeError(f"'guidance_scale' must be in [0, 100], got {guidance}", param="guidance_scale")
        name = params.scheduler or state.scheduler.default
        if name not in SCHEDULERS:
            raise ServeError(f"'scheduler' must be one of {', '.join(SCHEDULERS)}, got {name!r}", param="scheduler")
        if not 0 <= params.seed < 2**63:
            raise ServeError(f"'seed' must be in [0, 2**63), got {params.seed}", param="seed")
        adapters = state.banks.check(params.adapters)
        prompt = self.tokens(state, params.prompt)
        used = min(len(state.tokenizer.encode(params.prompt)), state.config.tokens)
        # Classifier-free guidance (as diffusers: a scale above 1) reads the negative prompt's row beside the prompt's.
        rows = [self.tokens(state, params.negative_prompt), prompt] if guidance > 1 else [prompt]
        schedule = state.schedule(name, steps)
        scale = config.vae_scale_factor
        noise = np.random.default_rng(params.seed).standard_normal(
            (1, config.latent_channels, height // scale, width // scale), dtype=np.float32
        )
        latents = (noise * np.float32(schedule.init_noise_sigma)).astype(np.float32)
        count = min(params.partial_images, steps - 1) if params.partial_images > 0 else 0
        partials = frozenset(round(steps * (i + 1) / (count + 1)) for i in range(count)) - {0, steps}
        return ImageJob(np.array(rows, np.int64), height, width, schedule, guidance, adapters, partials, latents, used)

    def tokens(self, state: ImageState, text: str) -> list[int]:
        """The prompt's ids as the text encoder reads them: start, at most tokens - 2 ids, end, then padding."""
        ids = state.tokenizer.encode(text)
        limit = state.config.tokens
        if len(ids) > limit:
            ids = [*ids[: limit - 1], state.eos]
        return ids + [state.pad] * (limit - len(ids))

    # -- the stages ----------------------------------------------------------------------------------------------

    def prepare_work(self, state: object, request: object, view: InputView) -> Work:
        assert isinstance(state, ImageState) and isinstance(request, ImageJob)
        stage = request.stage()
        if stage == "encode":
            return Work(b"encode", request.rows, "encode")
        if stage == "decode":
            return Work(b"decode", 1, f"{request.geometry}:vae")
        tag = f"{request.geometry}:unet"
        if request.adapters:
            tag += ":" + state.banks.key(request.adapters)
        return Work(f"denoise {request.step}".encode(), request.rows, tag)

    def prepare_batch(self, state: object, members: Sequence[Member]) -> Plan:
        assert isinstance(state, ImageState)
        jobs = [m.request for m in members]
        assert all(isinstance(job, ImageJob) for job in jobs)
        kind = members[0].work.data.split(b" ")[0].decode()
        parts, start = [], 0
        for job in jobs:
            assert isinstance(job, ImageJob)
            rows = job.rows if kind != "decode" else 1
            parts.append(Part(job, start, start + rows))
            start += rows
        if kind == "encode":
            inputs: tuple[np.ndarray, ...] = (np.concatenate([p.job.ids for p in parts]),)
        elif kind == "decode":
            scale = np.float32(state.config.scaling_factor)
            inputs = (np.concatenate([_latents(p.job) / scale for p in parts]).astype(np.float32),)
        else:
            samples, times, states = [], [], []
            for part in parts:
                job = part.job
                scaled = job.schedule.scale_input(_latents(job), job.step)
                samples += [scaled] * job.rows
                times += [job.schedule.timesteps[job.step]] * job.rows
                assert job.states is not None
                states.append(job.states)
            inputs = (np.concatenate(samples), np.array(times, np.float32), np.concatenate(states))
        adapters = parts[0].job.adapters if kind == "denoise" else ()
        return Plan(kind, tuple(parts), inputs, adapters)

    def generate(self, state: object, plan: object) -> np.ndarray:
        assert isinstance(state, ImageState) and isinstance(plan, Plan)
        if plan.kind == "encode":
            return np.asarray(state.stages["text_encoder"].forward(*plan.inputs)[state.hidden_output], np.float32)
        if plan.kind == "decode":
            return np.asarray(state.stages["vae_decoder"].forward(*plan.inputs)[0], np.float32)
        unet = state.stages["unet"]
        weights = state.banks.weights(plan.adapters)
        return np.asarray(unet.forward_with(weights, *plan.inputs)[0], np.float32)

    def complete(self, state: object, plan: object, result: object, ordinal: int) -> Completion:
        assert isinstance(state, ImageState) and isinstance(plan, Plan) and isinstance(result, np.ndarray)
        part = plan.parts[ordinal]
        job, out = part.job, result[part.start : part.stop]
        if plan.kind == "encode":
            job.states = out.copy()
            return Completion()
        if plan.kind == "decode":
            rgb = np.clip(out[0], -1.0, 1.0).astype(np.float32)
            if job.partial_due:
                job.partial_due = False
                job.partials_sent += 1
                return Completion(events=(ImagePartial(rgb, job.partials_sent - 1),))
            if state.metrics is not None:
                state.metrics.images_generated(1)
            return Completion(events=(ImageResult(rgb),), done=True)
        # guided as diffusers guides: unconditional + scale * (conditional - unconditional)
        noise = out[0:1] + np.float32(job.guidance) * (out[1:2] - out[0:1]) if job.rows == 2 else out[0:1]
        job.latents = job.schedule.step(noise.astype(np.float32), job.step, _latents(job))
        job.step += 1
        job.partial_due = job.step in job.partials
        if state.metrics is not None:
            state.metrics.denoised(1)
        return Completion(events=(ImageProgress(job.step, job.schedule.steps),))

    def release(self, state: object, request: object) -> None:
        assert isinstance(request, ImageJob)
        request.latents, request.states = None, None


def _latents(job: ImageJob) -> np.ndarray:
    assert job.latents is not None, "a request's latents live until it is released"
    return job.latents


def _pad_id(tokenizer: PackageTokenizer, eos: int) -> int:
    """The padding id: the tokenizer's `<|pad|>` where it has one, else the end id (as CLIP's own tokenizer pads)."""
    ids = tokenizer.encode("<|pad|>", add_special_tokens=False)
    return ids[0] if len(ids) == 1 else eos


class ImageWorker(StreamWorker):
    """The continuing-request worker, saying what the image model holds besides its weights: each resident
    request's latents and text states (`kv`: retained per request) and the merged adapter banks (`workspace`),
    which `trim` drops when the model is deactivated."""

    def resident_bytes(self) -> dict[str, int]:
        jobs = [r.state for r in list(self.waiting) if isinstance(r, StreamRequest) and isinstance(r.state, ImageJob)]
        retained = sum(array_bytes((job.latents, job.states)) for job in jobs)
        banks = self.state.banks.nbytes() if isinstance(self.state, ImageState) else 0
        return {"kv": retained, "workspace": banks}

    def trim(self) -> None:
        if isinstance(self.state, ImageState):
            self.state.banks.drop()


def serve_image(package: Package, control: Control, metrics: ModelMetrics) -> StreamWorker:
    """The image role's worker for `package`, once its control is seen to provide the continuing contract."""
    if not isinstance(control, StreamControl):
        raise refuse_control(package, StreamControl)
    state = control.prepare(package)
    if isinstance(state, ImageState):
        state.metrics = metrics
    return ImageWorker(package.spec.name, metrics, control, state, package.spec.capacities)
