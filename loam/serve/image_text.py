"""Image-conditioned text: a text package's optional image component (LLaVA's composition).

A text package may name, under `model.json`'s `image` key, two stages beside its decoder: a `projector`
(pixel_values float [n, 3, crop, crop] -> rows float [n, rows, hidden]: the vision tower and its projector)
and an `embed` stage (input_ids -> inputs_embeds: the language model's token embedding), whose decoder then
takes `inputs_embeds` instead of `input_ids`.  A chat's content may then hold image parts beside its text
parts (`{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}`; the server fetches
nothing, so a remote URL is refused).  Each image is written into the rendered conversation as the package's
image token, which is then expanded to the projector's row count, as LLaVA's processor does.

An image's positions carry ids of their own outside the vocabulary (`ImageText.token_ids`): a serial number
the component gives the image's bytes (by their SHA-256, never reused for other bytes) and the row's index.
The decoder never sees them: the embedding hook (`ImageText.embed`, which `DecoderStage` calls for every
span it reads) looks ordinary ids up through the embed stage and writes each image's projected rows over
its positions.  Because the ids name the image, the text role's prefix retention
works unchanged: a prompt whose first blocks hold the same image bytes at the same positions as a retained
prefix finds them cached, and no span of it reaches the hook, so the projector never runs for it.  An image
is projected only when a span being read holds one of its rows: the images a cohort needs, from one request
or several, are preprocessed and projected in one projector call; the rows then stay with the image until
the last request holding it retires (`hold`, `release`).

Preprocessing is CLIPImageProcessor's, on the decoded RGB8 pixels (never resized before): the shortest edge
resized to `shortest_edge` (Pillow's bicubic, as the processor resizes), the centre cropped to `crop` x
`crop`, rescaled by 1/255 and normalized by the package's `mean` and `std`.

Memory: `ImageText.forecast_memory` reckons a request's images from their headers alone (PNG's IHDR, JPEG's
SOF: width and height, no pixel decoded), so a server with `--memory-limit` refuses a request that could not
fit alone before decoding it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from PIL import Image, UnidentifiedImageError

from loam.serve.metrics import ModelMetrics
from loam.serve.residency import array_bytes, module_pool
from loam.serve.scheduler import ServeError
from loam.serve.spec import Package, PackageError, Stage

IMAGE_IDS = 1 << 40
"""The first id of an image position: ids from here on name (image serial, row), never a vocabulary entry."""
_ROW_BITS = 12  # an image's rows are at most 4096; IMAGE_IDS + (serial << 12) + row stays below 2**63 for 2**50 serials
_SERIALS = 1 << 16  # the image digests whose serials are remembered (least recently seen forgotten first)
_PNG = b"\x89PNG\r\n\x1a\n"
_JPEG_FRAMES = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
_KEYS = ("projector", "embed", "token", "rows", "shortest_edge", "crop", "mean", "std", "max_images", "max_pixels")


@dataclass(frozen=True)
class ImageSpec:
    """`model.json`'s `image` key, checked."""

    projector: str
    embed: str
    token: str
    rows: int
    shortest_edge: int
    crop: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    max_images: int = 4
    max_pixels: int = 1 << 24


def read_image_spec(raw: object, where: str, stages: Sequence[str]) -> ImageSpec | None:
    """The image component `model.json` (at `where`) declares, or None; a malformed one is refused naming its key."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise PackageError(f"{where}: 'image' must be an object naming the projector and embed stages")
    unknown = sorted(set(raw) - set(_KEYS))
    if unknown:
        raise PackageError(f"{where}: 'image.{unknown[0]}' is not a key of the image component ({', '.join(_KEYS)})")

    def text(key: str) -> str:
        value = raw.get(key)
        if not isinstance(value, str) or not value:
            raise PackageError(f"{where}: 'image.{key}' must be a non-empty string")
        return value

    def count(key: str, default: int | None = None, most: int = 1 << 40) -> int:
        value = raw.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= most:
            raise PackageError(f"{where}: 'image.{key}' must be a positive integer (at most {most})")
        return value

    def triple(key: str) -> tuple[float, float, float]:
        value = raw.get(key)
        if not isinstance(value, list) or len(value) != 3 or not all(isinstance(v, int | float) for v in value):
            raise PackageError(f"{where}: 'image.{key}' must be three numbers (red, green, blue)")
        if key == "std" and not all(v > 0 for v in value):
            raise PackageError(f"{where}: 'image.std' must be positive")
        return (float(value[0]), float(value[1]), float(value[2]))

    spec = ImageSpec(
        projector=text("projector"), embed=text("embed"), token=text("token"), rows=count("rows", most=1 << _ROW_BITS),
        shortest_edge=count("shortest_edge"), crop=count("crop"), mean=triple("mean"), std=triple("std"),
        max_images=count("max_images", 4), max_pixels=count("max_pixels", 1 << 24),
    )  # fmt: skip
    if spec.crop > spec.shortest_edge:
        raise PackageError(f"{where}: 'image.crop' must be at most 'image.shortest_edge' (the resized image's)")
    for key in ("projector", "embed"):
        if getattr(spec, key) not in stages:
            raise PackageError(f"{where}: 'image.{key}' names no stage ({', '.join(stages)})")
    return spec


@dataclass(frozen=True)
class ImageHeader:
    """What an image's header says, read without decoding a pixel."""

    format: str  # "png" or "jpeg"
    width: int
    height: int


def read_header(data: bytes) -> ImageHeader | None:
    """The format and size of a PNG or JPEG image from its header alone; None where it is neither or is cut short."""
    if data.startswith(_PNG):
        if len(data) < 24 or data[12:16] != b"IHDR":
            return None
        return ImageHeader("png", int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big"))
    if not data.startswith(b"\xff\xd8"):
        return None
    at = 2
    while at + 4 <= len(data):  # markers: FF, kind, then a big-endian length that counts itself
        if data[at] != 0xFF:
            return None
        kind = data[at + 1]
        if kind == 0xFF:  # fill byte
            at += 1
            continue
        length = int.from_bytes(data[at + 2 : at + 4], "big")
        if kind in _JPEG_FRAMES:
            if at + 9 > len(data):
                return None
            height, width = int.from_bytes(data[at + 5 : at + 7], "big"), int.from_bytes(data[at + 7 : at + 9], "big")
            return ImageHeader("jpeg", width, height)
        at += 2 + length
    return None


@dataclass(eq=False)
class ImageInput:
    """One image of a request: where the request gave it (`param`), its bytes, its header, the serial number its
    component gave its bytes (`key`) and, once decoded, its RGB8 pixels [height, width, 3]."""

    param: str
    data: bytes
    header: ImageHeader
    key: int
    pixels: np.ndarray | None = None


@dataclass(eq=False)
class _Held:
    """An image some live request holds: its pixels until projected, then its projected rows."""

    image: ImageInput
    holders: int = 0
    rows: np.ndarray | None = None


@dataclass(frozen=True)
class MemoryForecast:
    """What a request's images need, in bytes: the projector's private peak (the decoded RGB8 planes, the
    preprocessed pixel values and the projector's output), the rows retained until the language model has read
    them, and the rows gathered into a decoder call's embeddings (each row aligned to 16 bytes)."""

    private_peak: int
    retained: int
    gathered: int

    @property
    def producer(self) -> int:
        """What the projector's phase holds: its private peak and the rows it leaves."""
        return self.private_peak + self.retained

    @property
    def consumer(self) -> int:
        """What the images add to the language model's phase: the rows held and those a call gathers."""
        return self.retained + self.gathered


@dataclass
class ImageText:
    """A text model's image component: it reads a chat's image parts, expands their tokens, and embeds the spans
    a decoder call reads (projecting the images they need, a cohort at a time)."""

    spec: ImageSpec
    projector: Stage
    embed_stage: Stage
    token_id: int
    hidden: int  # the language model's embedding width
    metrics: ModelMetrics
    _held: dict[int, _Held] = field(default_factory=dict)
    _serials: OrderedDict[bytes, int] = field(default_factory=OrderedDict)  # SHA-256 of an image's bytes -> serial
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _next: int = 0

    @property
    def stages(self) -> tuple[str, str]:
        """The stages the component runs (the text role's decoder is another)."""
        return (self.spec.projector, self.spec.embed)

    # -- the request's side (the HTTP thread) -------------------------------------------------------------------

    def read_parts(self, messages: object) -> list[ImageInput]:
        """The image parts of OpenAI chat `messages`, in order, each from a data: URL with its header read (no pixel
        decoded); a malformed part is refused naming its field."""
        images: list[ImageInput] = []
        if not isinstance(messages, list):
            return images
        for i, message in enumerate(messages):
            content = message.get("content") if isinstance(message, dict) else None
            if not isinstance(content, list):
                continue
            for j, part in enumerate(content):
                if isinstance(part, dict) and part.get("type") == "image_url":
                    images.append(self._read_part(part, f"messages[{i}].content[{j}]"))
        if len(images) > self.spec.max_images:
            raise ServeError(
                f"the chat holds {len(images)} images; this model takes at most {self.spec.max_images}",
                param="messages",
            )
        return images

    def _read_part(self, part: Mapping[str, object], where: str) -> ImageInput:
        holder = part.get("image_url")
        url = holder.get("url") if isinstance(holder, dict) else None
        if not isinstance(url, str):
            raise ServeError(f"'{where}.image_url' must be an object with a 'url' string", param=f"{where}.image_url")
        if not url.startswith("data:"):
            raise ServeError(
                "the server fetches nothing: give the image inline as a data: URL (data:image/png;base64,...)",
                param=f"{where}.image_url.url",
            )
        meta, comma, payload = url.partition(",")
        if not comma or not meta.endswith(";base64"):
            raise ServeError("a data: URL must be base64 (data:image/png;base64,...)", param=f"{where}.image_url.url")
        try:
            data = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise ServeError("the data: URL's payload is not base64", param=f"{where}.image_url.url") from None
        header = read_header(data)
        if header is None:
            raise ServeError("the image is not a PNG or JPEG image (its header could not be read)", param=where)
        if not 0 < header.width * header.height <= self.spec.max_pixels:
            raise ServeError(
                f"the image is {header.width} x {header.height} pixels; this model takes 1 to {self.spec.max_pixels}",
                param=where,
            )
        return ImageInput(where, data, header, self._serial(hashlib.sha256(data).digest()))

    def _serial(self, digest: bytes) -> int:
        """The serial number of the image bytes whose SHA-256 is `digest`: the same while it is remembered, never
        another image's (serials are not reused), so equal image ids at a position are equal image bytes.  A
        digest forgotten gets a new serial: its retained prefixes are then missed, never mistaken."""
        with self._lock:
            serial = self._serials.pop(digest, None)
            if serial is None:
                serial = self._next
                self._next += 1
            self._serials[digest] = serial
            while len(self._serials) > _SERIALS:
                self._serials.popitem(last=False)
            return serial

    def forecast_memory(self, headers: Sequence[ImageHeader]) -> MemoryForecast:
        """A request's images' memory from their headers alone (see `MemoryForecast`)."""
        hidden = self.hidden
        pixel_values = 3 * self.spec.crop * self.spec.crop * 4
        rows = self.spec.rows * hidden * 4
        peak = sum(h.width * h.height * 3 + pixel_values for h in headers) + len(headers) * rows
        gathered = len(headers) * self.spec.rows * (-(-hidden * 4 // 16) * 16)
        return MemoryForecast(peak, len(headers) * rows, gathered)

    def decode(self, images: Sequence[ImageInput]) -> None:
        """Decode each image to RGB8 (no resizing); a corrupt one is refused naming its content part."""
        for image in images:
            image.pixels = decode_rgb8(image.data, image.param)

    def expand(self, ids: list[int], images: Sequence[ImageInput]) -> list[int]:
        """`ids` with the k-th image token expanded to the k-th image's rows (`token_ids`)."""
        found = sum(1 for t in ids if t == self.token_id)
        if found != len(images):
            raise ServeError(
                f"the rendered chat holds {found} {self.spec.token} tokens for {len(images)} images "
                f"(write no {self.spec.token} in a text part)",
                param="messages",
            )
        out: list[int] = []
        pending = iter(images)
        for t in ids:
            out.extend(self.token_ids(next(pending)) if t == self.token_id else (t,))
        return out

    def token_ids(self, image: ImageInput) -> list[int]:
        """The ids of `image`'s positions: its serial and each row's index."""
        base = IMAGE_IDS + (image.key << _ROW_BITS)
        return list(range(base, base + self.spec.rows))

    # -- the worker's side ------------------------------------------------------------------------------------

    def hold(self, images: Sequence[ImageInput]) -> None:
        """A request holding `images` was submitted: keep each (its pixels, then its rows) until it retires."""
        with self._lock:
            for image in images:
                held = self._held.setdefault(image.key, _Held(image))
                held.holders += 1

    def release(self, images: Sequence[ImageInput]) -> None:
        """A request holding `images` retired: an image no request holds any more is dropped, rows and all."""
        with self._lock:
            for image in images:
                held = self._held.get(image.key)
                if held is not None:
                    held.holders -= 1
                    if held.holders <= 0:
                        del self._held[image.key]

    def held(self) -> int:
        """How many images live requests hold."""
        with self._lock:
            return len(self._held)

    def resident_bytes(self) -> int:
        """The bytes the component keeps: the held images' decoded pixels not yet projected and projected rows, and
        its stages' pooled intermediates (made by their first call: the projector's on the first image read)."""
        with self._lock:
            held = [h.rows if h.rows is not None else h.image.pixels for h in self._held.values()]
        pools = [module_pool(stage.module).values() for stage in (self.projector, self.embed_stage)]
        return array_bytes([*held, *(list(pool) for pool in pools)])

    def trim(self) -> None:
        """Drop the stages' pooled intermediates (an idle model's trim; the next call makes them again)."""
        for stage in (self.projector, self.embed_stage):
            module_pool(stage.module).clear()

    def embed(self, ids: np.ndarray) -> np.ndarray:
        """The embeddings of a decoder call's ids [rows, span] (float32 [rows, span, hidden]): ordinary ids through
        the embed stage, image positions from their image's projected rows (the images not yet projected are
        projected first, all in one call).  Changes nothing the call's failure would leave wrong: the rows an
        image gains are its own whatever call reads them."""
        image_at = ids >= IMAGE_IDS
        plain = np.where(image_at, 0, ids).astype(np.int64)
        embeds = np.array(self.embed_stage.forward(plain)[0], np.float32)
        if image_at.any():
            wanted = ids[image_at]
            keys = (wanted - IMAGE_IDS) >> _ROW_BITS
            rows = (wanted - IMAGE_IDS) & ((1 << _ROW_BITS) - 1)
            projected = self._project(sorted({int(k) for k in keys}))
            embeds[image_at] = np.stack([projected[int(k)][int(r)] for k, r in zip(keys, rows, strict=True)])
        return embeds

    def _project(self, keys: Sequence[int]) -> dict[int, np.ndarray]:
        """Each image's projected rows, projecting those that have none yet in one projector call."""
        with self._lock:
            held = {key: self._held.get(key) for key in keys}
        missing = [key for key, h in held.items() if h is None]
        if missing:
            raise ServeError("an image position names no image held by a request", status=400, param="messages")
        todo = [h for h in held.values() if h is not None and h.rows is None]
        if todo:
            batch = []
            for h in todo:
                if h.image.pixels is None:
                    h.image.pixels = decode_rgb8(h.image.data, h.image.param)
                batch.append(preprocess(h.image.pixels, self.spec))
            out = np.asarray(self.projector.forward(np.stack(batch))[0], np.float32)
            if out.ndim != 3 or out.shape[:2] != (len(todo), self.spec.rows):
                raise PackageError(
                    f"stage {self.spec.projector!r} gave rows of shape {list(out.shape)}: the package's image.rows "
                    f"says [{len(todo)}, {self.spec.rows}, hidden]"
                )
            self.metrics.projector_calls.inc()
            self.metrics.projected_images.inc(len(todo))
            for h, rows in zip(todo, out, strict=True):
                h.rows = np.array(rows)
                h.image.pixels = None  # the rows stand for it now
        return {key: h.rows for key, h in held.items() if h is not None and h.rows is not None}


def decode_rgb8(data: bytes, param: str) -> np.ndarray:
    """An image's pixels as RGB8 [height, width, 3], at the size it has; a corrupt image is refused naming `param`."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            return np.asarray(image.convert("RGB"), np.uint8)
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as err:
        raise ServeError(f"the image could not be decoded: {err}", param=param) from None


def preprocess(pixels: np.ndarray, spec: ImageSpec) -> np.ndarray:
    """CLIPImageProcessor's pixel_values [3, crop, crop] of RGB8 `pixels`: the shortest edge resized (bicubic),
    the centre cropped, rescaled to [0, 1] and normalized."""
    height, width = pixels.shape[:2]
    short, long = (height, width) if height <= width else (width, height)
    new_short, new_long = spec.shortest_edge, int(spec.shortest_edge * long / short)
    size = (new_long, new_short) if height <= width else (new_short, new_long)  # Pillow's (width, height)
    resized = np.asarray(Image.fromarray(pixels, "RGB").resize(size, Image.Resampling.BICUBIC), np.uint8)
    h, w = resized.shape[:2]
    top, left = (h - spec.crop) // 2, (w - spec.crop) // 2
    cropped = resized[top : top + spec.crop, left : left + spec.crop]
    scaled = (cropped.astype(np.float64) * (1 / 255)).astype(np.float32)
    normalized = (scaled - np.array(spec.mean, np.float32)) / np.array(spec.std, np.float32)
    return np.ascontiguousarray(normalized.transpose(2, 0, 1))


def image_component(package: Package, metrics: ModelMetrics) -> ImageText | None:
    """The image component a text package's `model.json` declares (None where it declares none), its token
    checked against the tokenizer and its embed stage probed once for the embedding width."""
    where = str(package.spec.folder / "model.json")
    spec = read_image_spec(package.spec.role_keys.get("image"), where, list(package.spec.stages))
    if spec is None:
        return None
    tokenizer = package.tokenizer
    ids = [] if tokenizer is None else tokenizer.encode(spec.token, add_special_tokens=False)
    if len(ids) != 1:
        raise PackageError(f"{where}: 'image.token' {spec.token!r} is not one token of the package's tokenizer")
    embed = package.stages[spec.embed]
    probe = np.asarray(embed.forward(np.zeros((1, 1), np.int64))[0])
    if probe.ndim != 3:
        raise PackageError(
            f"{where}: stage {spec.embed!r} gives {probe.ndim}-d output: inputs_embeds is [batch, span, hidden]"
        )
    return ImageText(spec, package.stages[spec.projector], embed, ids[0], int(probe.shape[-1]), metrics)
