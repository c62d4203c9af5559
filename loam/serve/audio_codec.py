"""Audio in and out of `loam serve`'s audio routes: encoded files and raw PCM to float32 samples at a
model's rate, a streaming resampler, and samples to the response formats OpenAI's speech route offers.

Decoding and encoding go through `soundfile` (pinned 0.13.1), whose manylinux wheel bundles libsndfile
1.2 with FLAC, Ogg Vorbis, Opus and MPEG (mpg123 to read, LAME to write): no system package is needed,
and files are read from and written to memory, never to disk.  Resampling goes through `soxr` (pinned
1.1.0, libsoxr's "HQ" quality: a linear-phase filter with a 20-bit stopband): its `ResampleStream`
keeps the filter's history across packets, so a stream resampled packet by packet gives the samples of
the whole signal resampled at once, bit for bit, where a polyphase filter applied per request (scipy's
`resample_poly`) would have to be re-implemented with carried state for the live routes.

Every refusal of a request's audio is a `ServeError` naming the request field at fault: 400 for a file
that is empty, not audio, corrupt or holds non-finite samples, 413 for one longer than the route allows.
"""

from __future__ import annotations

import io
import struct

import numpy as np
import soundfile
import soxr

from loam.serve.scheduler import ServeError

AUDIO_TYPES: dict[str, str] = {
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/pcm",
}
"""The content type of each response format `encode_audio` writes (OpenAI's `aac` is absent: libsndfile
has no AAC encoder). `opus` is Ogg Opus, whose type RFC 7845 makes audio/ogg; `pcm` is headerless 16-bit
little-endian samples, as OpenAI's `pcm` is."""

PCM_ENCODINGS = ("s16le", "f32le")
"""The raw PCM sample encodings `pcm_to_float` reads."""

# libsndfile's major formats a request may upload, as a refusal names them.
_ACCEPTED = {"WAV": "a WAV", "WAVEX": "a WAV", "RF64": "a WAV", "FLAC": "a FLAC", "MP3": "an MP3", "OGG": "an Ogg"}
_UNKNOWN_LENGTH = 2**62  # libsndfile reports a stream of unknown length as SF_COUNT_MAX frames
_BLOCK = 1 << 16  # samples decoded per read (over all channels), so a long file is refused as soon as it runs long
_OPUS_RATES = (8000, 12000, 16000, 24000, 48000)
_MP3_RATES = (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000)


def _container(data: bytes) -> str | None:
    """The container a file's first bytes announce, for a refusal to say what it recognised."""
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return "a WAV"
    if data[:4] == b"fLaC":
        return "a FLAC"
    if data[:4] == b"OggS":
        return "an Ogg"
    if data[:3] == b"ID3" or (len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0):
        return "an MP3"
    return None


def _refuse_file(data: bytes, param: str, reason: str) -> ServeError:
    found = _container(data)
    what = f"{found} file" if found else f"no audio container (the file begins {data[:8]!r})"
    return ServeError(
        f"{param} could not be decoded: {reason}; it looks like {what} (WAV, FLAC, MP3 and Ogg are read)", param=param
    )


def decode_audio(data: bytes, rate: int, *, param: str = "file", max_seconds: float | None = None) -> np.ndarray:
    """A WAV, FLAC, MP3 or Ogg (Vorbis, Opus) file's bytes as mono float32 samples in [-1, 1] at `rate`:
    channels are averaged, the rate converted by `soxr`'s HQ filter, and the result clipped (a float file
    may hold samples past full scale, and a filter's ringing may overshoot it).  A file longer than
    `max_seconds` is refused with 413 from its header's frame count before any sample is decoded where the
    header says it, and otherwise as soon as the decoded samples pass the limit.  A file with fewer samples
    than its header announces is refused as cut short; an Ogg stream, or an MP3 without a Xing header,
    announces no exact length, so one cut at a page or frame reads as a shorter recording."""
    if not data:
        raise ServeError(f"{param} is empty: send an audio file", param=param)
    try:
        with soundfile.SoundFile(io.BytesIO(data)) as sound:
            kind = _ACCEPTED.get(sound.format)
            if kind is None:
                raise ServeError(
                    f"{param} is {sound.format_info}, which is not accepted (WAV, FLAC, MP3 and Ogg are)", param=param
                )
            source_rate, declared = sound.samplerate, (sound.frames if sound.frames < _UNKNOWN_LENGTH else None)
            limit = None if max_seconds is None else int(max_seconds * source_rate)
            if declared is not None and limit is not None and declared > limit:
                raise _too_long(param, declared / source_rate, max_seconds)
            blocks, frames, block_frames = [], 0, max(_BLOCK // sound.channels, 1024)
            while True:
                block = sound.read(block_frames, dtype="float32", always_2d=True)
                if not np.isfinite(block).all():
                    raise ServeError(
                        f"{param} holds samples that are not finite numbers (NaN or infinity)", param=param
                    )
                blocks.append(block.mean(axis=1, dtype=np.float32) if block.shape[1] > 1 else block[:, 0])
                frames += len(block)
                if limit is not None and frames > limit:
                    raise _too_long(param, frames / source_rate, max_seconds)
                if len(block) < block_frames:
                    break
    except soundfile.SoundFileError as err:
        raise _refuse_file(
            data, param, getattr(err, "error_string", str(err)).removeprefix("Error : ").rstrip(".")
        ) from None
    if frames == 0:
        raise _refuse_file(data, param, "no samples decode from it (it is empty or cut short)")
    # An MP3's count may be an estimate from its bitrate; an exact one (its Xing header's) is within a frame.
    slack = 0 if declared is None or kind != "an MP3" else declared // 100 + 1152
    if (declared is not None and frames < declared - slack) or _wav_cut_short(data):
        raise _refuse_file(data, param, f"it is cut short (its header announces more than the {frames} frames present)")
    mono = np.concatenate(blocks)
    if source_rate != rate:
        mono = soxr.resample(mono, source_rate, rate, quality="HQ")
    return np.clip(mono, -1.0, 1.0).astype(np.float32, copy=False)


def _wav_cut_short(data: bytes) -> bool:
    """Whether a RIFF WAV's data chunk announces more bytes than the file holds (libsndfile reads what is
    there without a word).  A streamed WAV's size, 0 or 0xFFFFFFFF, announces nothing."""
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return False
    position = 12
    while position + 8 <= len(data):
        chunk, size = data[position : position + 4], int.from_bytes(data[position + 4 : position + 8], "little")
        if chunk == b"data":
            return size not in (0, 0xFFFFFFFF) and position + 8 + size > len(data)
        position += 8 + size + (size & 1)
    return False


def _too_long(param: str, seconds: float, max_seconds: float | None) -> ServeError:
    return ServeError(
        f"{param} holds {seconds:.1f} s of audio, more than the {max_seconds:g} s allowed", status=413, param=param
    )


def pcm_to_float(
    data: bytes, encoding: str, channels: int, param: str, *, encoding_param: str = "encoding"
) -> np.ndarray:
    """Raw little-endian PCM (`s16le` or `f32le`, channels interleaved) as float32 frames, shape (frames,
    channels): 16-bit samples scaled by 1/32768, as libsndfile reads them.  A byte count that is not a whole
    number of frames is refused naming `param`, an unknown encoding naming `encoding_param`."""
    if encoding not in PCM_ENCODINGS:
        raise ServeError(
            f"{encoding_param} {encoding!r} is not a PCM encoding Loam reads ({', '.join(PCM_ENCODINGS)})",
            param=encoding_param,
        )
    width = 2 if encoding == "s16le" else 4
    if channels < 1 or len(data) % (width * channels):
        raise ServeError(
            f"{param} holds {len(data)} bytes, not a whole number of {channels}-channel {encoding} frames "
            f"({width * channels} bytes each)",
            param=param,
        )
    if encoding == "s16le":
        samples = np.frombuffer(data, dtype="<i2").astype(np.float32) / np.float32(32768)
    else:
        samples = np.frombuffer(data, dtype="<f4").astype(np.float32)
        if not np.isfinite(samples).all():
            raise ServeError(f"{param} holds samples that are not finite numbers (NaN or infinity)", param=param)
    return samples.reshape(-1, channels)


class Resampler:
    """A stream's rate conversion, packet by packet: `push` takes a packet of any size (shape (n,) for one
    channel or (n, channels)) and returns the samples that are ready, `flush` the filter's tail at the end.
    The filter's history is kept across packets, so any packetization gives the samples of the whole signal
    converted at once, and the stream's total is exactly round(n * target / source) (halves rounded up) for
    n samples pushed: the clock is the exact ratio, so a long stream never drifts.  Equal rates pass the
    samples through untouched."""

    def __init__(self, source_rate: int, target_rate: int, channels: int = 1) -> None:
        if source_rate <= 0 or target_rate <= 0 or channels < 1:
            raise ValueError(
                f"a resampler needs positive rates and channels, not {source_rate}, {target_rate}, {channels}"
            )
        self.source_rate, self.target_rate, self.channels = source_rate, target_rate, channels
        self.consumed = self.produced = 0
        self._stream = (
            None
            if source_rate == target_rate
            else soxr.ResampleStream(source_rate, target_rate, channels, dtype="float32", quality="HQ")
        )
        self._flushed = False

    def expected(self, frames: int) -> int:
        """The stream's length at the target rate after `frames` source frames: round(frames * target / source)."""
        return (2 * frames * self.target_rate + self.source_rate) // (2 * self.source_rate)

    def push(self, samples: np.ndarray) -> np.ndarray:
        """The converted samples that `samples` completes (fewer than its share while the filter fills)."""
        if self._flushed:
            raise ValueError("a flushed resampler takes no more samples")
        samples = np.ascontiguousarray(samples, dtype=np.float32)
        self.consumed += len(samples)
        out = samples if self._stream is None else self._stream.resample_chunk(samples)
        self.produced += len(out)
        return out

    def flush(self) -> np.ndarray:
        """The filter's remaining samples, making the stream's total exactly `expected(consumed)`."""
        if self._flushed:
            raise ValueError("a resampler is flushed once")
        self._flushed = True
        shape = (0,) if self.channels == 1 else (0, self.channels)
        if self._stream is None:
            return np.zeros(shape, np.float32)
        tail = self._stream.resample_chunk(np.zeros(shape, np.float32), last=True)
        # libsoxr's own count is this one; the correction only guards its double-precision clock.
        short = self.expected(self.consumed) - (self.produced + len(tail))
        if short < 0:
            tail = tail[: max(len(tail) + short, 0)]
        elif short > 0:
            tail = np.concatenate([tail, np.zeros((short, *tail.shape[1:]), np.float32)])
        self.produced += len(tail)
        return tail


def _format(fmt: str) -> str:
    if fmt not in AUDIO_TYPES:
        raise ServeError(
            f"response_format {fmt!r} is not one Loam encodes ({', '.join(AUDIO_TYPES)})", param="response_format"
        )
    return fmt


def _to_int16(samples: np.ndarray) -> np.ndarray:
    """Samples clipped to [-1, 1] then scaled by 32768 (the scale decoders divide by), the top one kept at
    32767: an over-range sample saturates instead of wrapping around."""
    scaled = np.round(np.clip(np.asarray(samples, np.float64), -1.0, 1.0) * 32768.0)
    return np.clip(scaled, -32768, 32767).astype("<i2")


def _codec_rate(fmt: str, rate: int) -> int:
    """The rate a codec is written at: the speech's own where the codec takes it, else the next it takes
    (Opus takes five rates, MPEG nine)."""
    rates = _OPUS_RATES if fmt == "opus" else _MP3_RATES if fmt == "mp3" else None
    if rates is None or rate in rates:
        return rate
    return next((r for r in rates if r > rate), rates[-1])


def _open_writer(
    buffer: io.BytesIO, fmt: str, rate: int, channels: int, *, stream: bool = False
) -> soundfile.SoundFile:
    if fmt == "flac":
        return soundfile.SoundFile(buffer, "w", rate, channels, "PCM_16", format="FLAC")
    if fmt == "opus":
        return soundfile.SoundFile(buffer, "w", rate, channels, "OPUS", format="OGG")
    if not stream:
        return soundfile.SoundFile(buffer, "w", rate, channels, "MPEG_LAYER_III", format="MP3")
    # A constant bitrate lets a reader size an MP3 stream that has no header frame giving its length
    # (libsndfile sets a bitrate mode only beside a compression level; 0.5 is its middle bitrate).
    return soundfile.SoundFile(
        buffer, "w", rate, channels, "MPEG_LAYER_III", format="MP3", compression_level=0.5, bitrate_mode="CONSTANT"
    )


def _wav_header(rate: int, channels: int, data_bytes: int) -> bytes:
    """A 16-bit PCM WAV header; `data_bytes` 0xFFFFFFFF marks a stream of unknown length."""
    riff = 0xFFFFFFFF if data_bytes == 0xFFFFFFFF else 36 + data_bytes
    fields = (rate, rate * channels * 2, channels * 2, 16)  # sample rate, byte rate, frame bytes, sample bits
    return struct.pack(
        "<4sI4s4sIHHIIHH4sI", b"RIFF", riff, b"WAVE", b"fmt ", 16, 1, channels, *fields, b"data", data_bytes
    )


def _frames(samples: np.ndarray) -> np.ndarray:
    samples = np.asarray(samples, np.float32)
    return samples[:, None] if samples.ndim == 1 else samples


def encode_audio(samples: np.ndarray, rate: int, fmt: str) -> bytes:
    """Samples (shape (n,) or (n, channels), nominally in [-1, 1]) as a file of response format `fmt`: wav
    and flac are 16-bit, pcm headerless 16-bit, mp3 and opus lossy at libsndfile's default quality.  Opus
    and MP3 are written at the speech's rate where the codec takes it, else resampled to the next rate
    it takes.  An unknown format is refused naming `response_format`."""
    fmt, frames = _format(fmt), _frames(samples)
    if fmt == "pcm":
        return _to_int16(frames).tobytes()
    if fmt == "wav":
        data = _to_int16(frames).tobytes()
        return _wav_header(rate, frames.shape[1], len(data)) + data
    codec_rate = _codec_rate(fmt, rate)
    if codec_rate != rate:
        frames = _frames(soxr.resample(frames, rate, codec_rate, quality="HQ"))
    buffer = io.BytesIO()
    with _open_writer(buffer, fmt, codec_rate, frames.shape[1]) as sound:
        sound.write(_to_int16(frames) if fmt == "flac" else np.clip(frames, -1.0, 1.0))
    return buffer.getvalue()


class StreamingEncoder:
    """Speech encoded as it is made: `push(block)` returns the bytes a client can play now, `close()` the
    rest, and their concatenation is one playable file.

    - wav: a header whose RIFF and data sizes are 0xFFFFFFFF (a stream of unknown length, as OpenAI's
      streamed wav is), then 16-bit samples; pcm: 16-bit samples.
    - opus: Ogg pages as libsndfile completes them (about one a second); Ogg never rewrites a page.
    - mp3: constant-bitrate frames as LAME completes them.  LAME's first frame is a placeholder for the
      header it fills in at close (the stream's length and encoder delay); that frame is left out, since
      bytes already sent cannot be rewritten, so the stream carries the encoder's delay and padding as any
      streamed MP3 does.
    - flac: libsndfile rewrites the FLAC header at close (total samples, MD5), and its own reader cannot
      read a FLAC stream whose header says neither, so FLAC is not streamed honestly: the whole file is
      encoded at close and `push` returns nothing.
    """

    def __init__(self, rate: int, fmt: str, channels: int = 1) -> None:
        self.fmt, self.rate, self.channels = _format(fmt), rate, channels
        self._held: list[np.ndarray] = []  # flac's samples until close
        self._sent = 0  # bytes of the writer's buffer already returned
        self._skip: int | None = None if self.fmt == "mp3" else 0  # the placeholder frame's length, once known
        self._sound: soundfile.SoundFile | None = None
        self._resampler: Resampler | None = None
        self._buffer = io.BytesIO()
        self._header = self.fmt == "wav"
        if self.fmt in ("mp3", "opus"):
            codec_rate = _codec_rate(self.fmt, rate)
            if codec_rate != rate:
                self._resampler = Resampler(rate, codec_rate, channels)
            self._sound = _open_writer(self._buffer, self.fmt, codec_rate, channels, stream=True)

    def push(self, block: np.ndarray) -> bytes:
        """The bytes that encoding `block` (shape (n,) or (n, channels)) makes ready."""
        frames = _frames(block)
        if self.fmt in ("wav", "pcm"):
            header, self._header = (_wav_header(self.rate, self.channels, 0xFFFFFFFF) if self._header else b""), False
            return header + _to_int16(frames).tobytes()
        if self.fmt == "flac":
            self._held.append(frames)
            return b""
        return self._write(frames)

    def close(self) -> bytes:
        """The stream's last bytes (for flac, the whole file)."""
        if self.fmt in ("wav", "pcm"):
            header, self._header = (_wav_header(self.rate, self.channels, 0xFFFFFFFF) if self._header else b""), False
            return header
        if self.fmt == "flac":
            frames = np.concatenate(self._held) if self._held else np.zeros((0, self.channels), np.float32)
            self._held = []
            return encode_audio(frames, self.rate, "flac")
        assert self._sound is not None
        tail = b""
        if self._resampler is not None:
            tail = self._write(_frames(self._resampler.flush()), resampled=True)
        self._sound.close()
        return tail + self._drain(final=True)

    def _write(self, frames: np.ndarray, *, resampled: bool = False) -> bytes:
        assert self._sound is not None
        if self._resampler is not None and not resampled:
            frames = _frames(self._resampler.push(frames[:, 0] if self.channels == 1 else frames))
        if len(frames):
            self._sound.write(np.clip(frames, -1.0, 1.0))
        return self._drain()

    def _drain(self, *, final: bool = False) -> bytes:
        data = self._buffer.getbuffer()
        if self._skip is None:
            self._skip = _placeholder_length(bytes(data[:4096]), final)
            if self._skip is None:
                return b""
        start = max(self._sent, self._skip)
        new = bytes(data[start:])
        self._sent = len(data)
        return new


def _placeholder_length(head: bytes, final: bool) -> int | None:
    """The length of LAME's zero-filled placeholder frame at the start of an MP3 (0 where there is none),
    or None while the bytes written so far do not yet show where the next frame begins."""
    if len(head) < 4 or head[0] != 0xFF:
        return 0 if head or final else None
    for index in range(4, len(head)):
        if head[index]:
            return index if head[index] == 0xFF else 0
    return len(head) if final else None
