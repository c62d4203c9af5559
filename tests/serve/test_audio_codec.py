"""Audio files and raw PCM to samples at a model's rate, the streaming resampler, and samples to the
response formats, checked against independent readings: a sine's frequency and amplitude by FFT,
scipy's polyphase resampler, soundfile's own reader and writer."""

from __future__ import annotations

import io
import re
import struct

import numpy as np
import pytest
import soundfile
import soxr
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.signal import resample_poly

from loam.serve.audio_codec import (
    AUDIO_TYPES,
    Resampler,
    StreamingEncoder,
    decode_audio,
    encode_audio,
    pcm_to_float,
)
from loam.serve.scheduler import ServeError

TARGET = 16000
LOSSLESS = [("WAV", "PCM_16"), ("WAV", "FLOAT"), ("FLAC", "PCM_16")]
LOSSY = [("OGG", "VORBIS"), ("OGG", "OPUS"), ("MP3", "MPEG_LAYER_III")]
OPUS_RATES = {8000, 12000, 16000, 24000, 48000}


def sine(rate: int, seconds: float = 1.0, frequency: float = 440.0, amplitude: float = 0.5) -> np.ndarray:
    return (amplitude * np.sin(2 * np.pi * frequency * np.arange(int(rate * seconds)) / rate)).astype(np.float32)


def written(samples: np.ndarray, rate: int, container: str, subtype: str) -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, subtype=subtype, format=container)
    return buffer.getvalue()


def tone(samples: np.ndarray, rate: int) -> tuple[float, float]:
    """The strongest frequency of `samples` and its amplitude, read from a Hann-windowed FFT."""
    window = np.hanning(len(samples))
    spectrum = np.abs(np.fft.rfft(samples * window))
    peak = int(np.argmax(spectrum))
    return peak * rate / len(samples), 2 * spectrum[peak] / window.sum()


def snr_db(reference: np.ndarray, decoded: np.ndarray) -> float:
    """The signal-to-noise ratio of `decoded` against `reference`, after the lag that aligns them best (a
    lossy codec may add its encoder's delay)."""
    n = len(reference)
    lags = range(0, max(len(decoded) - n, 0) + 1)
    errors = [np.sum((decoded[lag : lag + n] - reference[: len(decoded[lag : lag + n])]) ** 2) for lag in lags]
    return float(10 * np.log10(np.sum(reference**2) / min(errors)))


@pytest.mark.parametrize(
    ("container", "subtype", "rate"),
    [
        (container, subtype, rate)
        for container, subtype in LOSSLESS + LOSSY
        for rate in (8000, 22050, 44100, 48000)
        if subtype != "OPUS" or rate in OPUS_RATES  # Opus takes 8, 12, 16, 24 and 48 kHz only
    ],
)
@pytest.mark.parametrize("channels", [1, 2])
def test_a_sine_decodes_to_its_frequency_and_amplitude(container: str, subtype: str, channels: int, rate: int) -> None:
    # Two channels of 0.6 and 0.4 amplitude mix down (their mean) to 0.5.
    left = sine(rate, amplitude=0.6 if channels == 2 else 0.5)
    samples = np.stack([left, sine(rate, amplitude=0.4)], axis=1) if channels == 2 else left
    decoded = decode_audio(written(samples, rate, container, subtype), TARGET)
    assert decoded.dtype == np.float32 and decoded.ndim == 1
    lossy = (container, subtype) in LOSSY
    assert abs(len(decoded) - TARGET) <= (2000 if lossy else 0)  # a lossy codec may keep its encoder's padding
    frequency, amplitude = tone(decoded[:TARGET], TARGET)
    assert frequency == pytest.approx(440.0, abs=1.0)
    assert amplitude == pytest.approx(0.5, abs=0.05 if lossy else 0.005)


@pytest.mark.parametrize("rate", [8000, 22050, 44100, 48000])
def test_decoding_agrees_with_scipys_polyphase_resampler(rate: int) -> None:
    """Two different filters agree on a 440 Hz tone to 2e-3 away from the ends (where each filter pads
    the signal its own way)."""
    samples = sine(rate, 2.0) + sine(rate, 2.0, frequency=1800.0, amplitude=0.3)
    decoded = decode_audio(written(samples, rate, "WAV", "FLOAT"), TARGET)
    reference = resample_poly(samples.astype(np.float64), TARGET, rate)
    assert len(decoded) == len(reference)
    inner = slice(TARGET // 20, -TARGET // 20)
    assert np.max(np.abs(decoded[inner] - reference[inner])) < 2e-3


def test_at_the_target_rate_the_samples_are_the_files_own() -> None:
    ints = np.random.default_rng(0).integers(-32768, 32768, 4000).astype(np.int16)
    decoded = decode_audio(written(ints, TARGET, "WAV", "PCM_16"), TARGET)
    np.testing.assert_array_equal(decoded, ints.astype(np.float32) / 32768)


def test_an_over_range_float_file_is_clipped_to_full_scale() -> None:
    decoded = decode_audio(written(np.array([0.5, 1.5, -3.0], np.float32), TARGET, "WAV", "FLOAT"), TARGET)
    np.testing.assert_array_equal(decoded, [0.5, 1.0, -1.0])


def refusal(data: bytes, **options: float) -> ServeError:
    with pytest.raises(ServeError) as caught:
        decode_audio(data, TARGET, param="file", **options)
    assert caught.value.param == "file"
    return caught.value


def test_an_empty_body_is_refused() -> None:
    error = refusal(b"")
    assert error.status == 400 and "empty" in str(error)
    error = refusal(written(np.zeros(0, np.float32), TARGET, "WAV", "PCM_16"))
    assert error.status == 400 and "no samples decode" in str(error) and "a WAV file" in str(error)


def test_text_posing_as_audio_is_refused_saying_no_container_was_found() -> None:
    error = refusal(b"RIFX this is not audio at all, only text pretending to be a file.\n" * 20)
    assert error.status == 400 and "no audio container" in str(error)


@pytest.mark.parametrize(("container", "subtype", "name"), [("WAV", "PCM_16", "WAV"), ("FLAC", "PCM_16", "FLAC")])
def test_a_file_cut_inside_its_header_is_refused_naming_its_container(container: str, subtype: str, name: str) -> None:
    error = refusal(written(sine(TARGET), TARGET, container, subtype)[:30])
    assert error.status == 400 and f"a {name} file" in str(error)


def corrupt_flac() -> bytes:
    """Three seconds of FLAC whose middle frames are overwritten with bytes that are not FLAC."""
    noisy = sine(TARGET, 3.0) + 0.1 * np.random.default_rng(1).standard_normal(3 * TARGET).astype(np.float32)
    data = bytearray(written(noisy, TARGET, "FLAC", "PCM_16"))
    data[len(data) // 2 : len(data) // 2 + 400] = bytes(range(200)) * 2
    return bytes(data)


@pytest.mark.parametrize(
    ("container", "subtype", "name"),
    [
        ("WAV", "PCM_16", "a WAV"),
        ("FLAC", "PCM_16", "a FLAC"),
        ("OGG", "VORBIS", "an Ogg"),
        ("MP3", "MPEG_LAYER_III", "an MP3"),
    ],
)
def test_a_file_cut_short_is_refused_naming_its_container(container: str, subtype: str, name: str) -> None:
    """Cut at 60%: libsndfile alone would read the first part of a WAV or MP3 as the whole recording."""
    data = written(sine(TARGET, 3.0), TARGET, container, subtype)
    error = refusal(data[: len(data) * 6 // 10])
    assert error.status == 400 and f"{name} file" in str(error)


def test_a_flac_file_with_corrupt_frames_is_refused() -> None:
    error = refusal(corrupt_flac())
    assert error.status == 400 and "a FLAC file" in str(error)


def test_a_container_outside_the_accepted_ones_is_refused_naming_it() -> None:
    error = refusal(written(sine(TARGET), TARGET, "AIFF", "PCM_16"))
    assert error.status == 400 and "AIFF" in str(error)


def test_non_finite_samples_are_refused() -> None:
    error = refusal(written(np.array([0.1, np.nan, 0.2], np.float32), TARGET, "WAV", "FLOAT"))
    assert error.status == 400 and "not finite" in str(error)


def test_a_recording_past_the_limit_is_refused_with_413() -> None:
    error = refusal(written(sine(TARGET, 3.0), TARGET, "WAV", "PCM_16"), max_seconds=2.5)
    assert error.status == 413 and "3.0 s" in str(error)
    assert len(decode_audio(written(sine(TARGET, 2.0), TARGET, "WAV", "PCM_16"), TARGET, max_seconds=2.5)) == 2 * TARGET


def test_the_limit_is_read_from_the_header_before_the_samples() -> None:
    """A FLAC file whose frames are corrupt past its header: refused as too long (from its header's count)
    rather than as corrupt (which decoding its samples would find)."""
    assert refusal(corrupt_flac()).status == 400
    assert refusal(corrupt_flac(), max_seconds=1.0).status == 413


def test_a_file_of_unknown_length_is_refused_once_its_samples_pass_the_limit() -> None:
    """A FLAC header whose total sample count is 0 ("unknown", as a streamed FLAC's is): the limit is
    checked as the samples are decoded, block by block (65536 samples, 4.1 s here), so twenty seconds are
    refused within a block of the limit."""
    data = bytearray(written(sine(TARGET, 20.0), TARGET, "FLAC", "PCM_16"))
    data[21] &= 0xF0  # STREAMINFO's 36-bit total sample count: the low nibble of byte 21, then bytes 22-25
    data[22:26] = bytes(4)
    assert soundfile.info(io.BytesIO(bytes(data))).frames > 2**62  # libsndfile reads the length as unknown
    error = refusal(bytes(data), max_seconds=2.0)
    assert error.status == 413
    said = re.search(r"holds ([\d.]+) s", str(error))
    assert said is not None and 2.0 < float(said.group(1)) <= 2.0 + 65536 / TARGET


def test_raw_pcm_reads_both_encodings_and_interleaved_channels() -> None:
    ints = np.array([[0, -32768], [16384, 32767], [-16384, 1]], "<i2")
    np.testing.assert_array_equal(pcm_to_float(ints.tobytes(), "s16le", 2, "audio"), ints / np.float32(32768))
    floats = np.array([0.25, -0.5, 1.0], "<f4")
    np.testing.assert_array_equal(pcm_to_float(floats.tobytes(), "f32le", 1, "audio"), floats[:, None])


@pytest.mark.parametrize(
    ("data", "encoding", "channels"), [(b"\0" * 3, "s16le", 1), (b"\0" * 6, "s16le", 2), (b"\0" * 6, "f32le", 1)]
)
def test_raw_pcm_not_in_whole_frames_is_refused_naming_its_field(data: bytes, encoding: str, channels: int) -> None:
    with pytest.raises(ServeError) as caught:
        pcm_to_float(data, encoding, channels, "audio")
    assert caught.value.status == 400 and caught.value.param == "audio" and "whole number" in str(caught.value)


def test_raw_pcm_refuses_non_finite_floats_and_unknown_encodings() -> None:
    with pytest.raises(ServeError) as caught:
        pcm_to_float(np.array([np.inf], "<f4").tobytes(), "f32le", 1, "audio")
    assert caught.value.param == "audio"
    with pytest.raises(ServeError) as caught:
        pcm_to_float(b"\0\0", "u8", 1, "audio")
    assert caught.value.param == "encoding" and "s16le" in str(caught.value)


RATE_PAIRS = [(44100, 16000), (48000, 16000), (8000, 16000), (22050, 16000), (16000, 22050), (16000, 24000)]


def resampled(resampler: Resampler, samples: np.ndarray, sizes: list[int]) -> np.ndarray:
    parts, start = [], 0
    for size in sizes:
        parts.append(resampler.push(samples[start : start + size]))
        start += size
    parts.append(resampler.push(samples[start:]))
    parts.append(resampler.flush())
    return np.concatenate(parts)


@settings(max_examples=40, deadline=None)
@given(
    pair=st.sampled_from(RATE_PAIRS),
    n=st.integers(0, 20000),
    sizes=st.lists(st.integers(0, 3000), max_size=30),
)
def test_any_packetization_resamples_as_the_whole_signal_does(pair: tuple[int, int], n: int, sizes: list[int]) -> None:
    source, target = pair
    samples = np.random.default_rng(n).standard_normal(n).astype(np.float32) * 0.3
    whole = soxr.resample(samples, source, target, quality="HQ")
    packets = resampled(Resampler(source, target), samples, sizes)
    assert len(packets) == (2 * n * target + source) // (2 * source)
    assert len(whole) == len(packets)
    np.testing.assert_allclose(packets, whole, atol=1e-6, rtol=0)


def test_two_channels_resample_each_on_its_own() -> None:
    stereo = np.stack([sine(44100), sine(44100, frequency=1000.0)], axis=1)
    both = resampled(Resampler(44100, 16000, channels=2), stereo, [441] * 50)
    assert both.shape == (16000, 2)
    for channel in range(2):
        alone = resampled(Resampler(44100, 16000), np.ascontiguousarray(stereo[:, channel]), [1000] * 20)
        np.testing.assert_allclose(both[:, channel], alone, atol=1e-6, rtol=0)


def test_a_long_stream_keeps_the_exact_clock() -> None:
    """Ten minutes at 44.1 kHz in 20 ms packets: the total at 16 kHz is the exact ratio's, not one off."""
    resampler, produced, packet = Resampler(44100, 16000), 0, np.zeros(882, np.float32)
    for _ in range(30000):
        produced += len(resampler.push(packet))
    produced += len(resampler.push(packet[:7]))
    produced += len(resampler.flush())
    assert produced == round((30000 * 882 + 7) * 16000 / 44100)


def test_an_equal_rate_passes_the_samples_through_untouched() -> None:
    resampler, samples = Resampler(16000, 16000), np.random.default_rng(2).standard_normal(999).astype(np.float32)
    pushed = np.concatenate([resampler.push(samples[:500]), resampler.push(samples[500:])])
    np.testing.assert_array_equal(pushed, samples)
    assert len(resampler.flush()) == 0


def quantized(rate: int, seconds: float = 1.0) -> np.ndarray:
    """A signal on the 16-bit grid, which lossless formats must give back exactly."""
    return np.round((sine(rate, seconds) + sine(rate, seconds, 3000.0, 0.2)) * 32768) / np.float32(32768)


@pytest.mark.parametrize("fmt", ["wav", "flac"])
@pytest.mark.parametrize("rate", [16000, 22050, 24000])
def test_lossless_formats_round_trip_exactly(fmt: str, rate: int) -> None:
    samples = quantized(rate)
    np.testing.assert_array_equal(decode_audio(encode_audio(samples, rate, fmt), rate), samples)


def test_pcm_is_headerless_little_endian_16_bit() -> None:
    samples = quantized(24000)
    data = encode_audio(samples, 24000, "pcm")
    assert len(data) == 2 * len(samples)
    np.testing.assert_array_equal(pcm_to_float(data, "s16le", 1, "audio")[:, 0], samples)


# Waveform SNR floors at libsndfile's default bitrates on two tones: MP3 measures 33-46 dB (26 dB at the
# streamed constant bitrate), Opus, a perceptual codec that keeps the spectrum rather than the waveform,
# 13-26 dB; a codec fed the wrong rate, channel count or scale falls far below either.
LOSSY_FLOORS = [("mp3", 20.0), ("opus", 10.0)]


@pytest.mark.parametrize(("fmt", "floor_db"), LOSSY_FLOORS)
@pytest.mark.parametrize("rate", [16000, 22050, 24000])
def test_lossy_formats_round_trip_above_a_signal_to_noise_floor(fmt: str, rate: int, floor_db: float) -> None:
    samples = quantized(rate)
    data = encode_audio(samples, rate, fmt)
    assert snr_db(samples, decode_audio(data, rate)) > floor_db


def test_an_over_range_sample_saturates_instead_of_wrapping() -> None:
    data = encode_audio(np.array([1.5, -1.5, 1.0, -1.0, 0.5], np.float32), 16000, "pcm")
    assert list(np.frombuffer(data, "<i2")) == [32767, -32768, 32767, -32768, 16384]


def test_an_unknown_response_format_is_refused_listing_the_known_ones() -> None:
    for make in (lambda: encode_audio(np.zeros(10, np.float32), 16000, "aac"), lambda: StreamingEncoder(16000, "ogg")):
        with pytest.raises(ServeError) as caught:
            make()
        assert caught.value.status == 400 and caught.value.param == "response_format"
        assert all(fmt in str(caught.value) for fmt in AUDIO_TYPES)


def streamed(fmt: str, samples: np.ndarray, rate: int) -> tuple[bytes, bytes]:
    """The bytes the pushes returned, and all of the stream's bytes."""
    encoder, pushed, start = StreamingEncoder(rate, fmt), b"", 0
    for size in [1, 2399, 4800, 777, 12000] * 4:
        pushed += encoder.push(samples[start : start + size])
        start += size
    pushed += encoder.push(samples[start:])
    return pushed, pushed + encoder.close()


@pytest.mark.parametrize("fmt", ["wav", "pcm", "flac"])
def test_a_lossless_stream_decodes_to_its_samples(fmt: str) -> None:
    samples = quantized(22050, 4.0)
    pushed, stream = streamed(fmt, samples, 22050)
    decoded = pcm_to_float(stream, "s16le", 1, "audio")[:, 0] if fmt == "pcm" else decode_audio(stream, 22050)
    np.testing.assert_array_equal(decoded, samples)
    assert len(pushed) >= (2 * len(samples) if fmt != "flac" else 0)  # flac is encoded whole at close


def test_a_streamed_wav_announces_an_unknown_length() -> None:
    _, stream = streamed("wav", quantized(24000), 24000)
    assert stream[:4] == b"RIFF" and struct.unpack("<I", stream[4:8])[0] == 0xFFFFFFFF
    assert stream[36:40] == b"data" and struct.unpack("<I", stream[40:44])[0] == 0xFFFFFFFF
    assert soundfile.info(io.BytesIO(stream)).samplerate == 24000


@pytest.mark.parametrize(("fmt", "floor_db"), LOSSY_FLOORS)
@pytest.mark.parametrize("rate", [22050, 24000])
def test_a_lossy_stream_arrives_as_it_is_made_and_decodes_to_its_samples(fmt: str, rate: int, floor_db: float) -> None:
    samples = quantized(rate, 4.0)
    pushed, stream = streamed(fmt, samples, rate)
    assert len(pushed) > len(stream) // 2  # most of the stream is sent before close
    assert snr_db(samples, decode_audio(stream, rate)) > floor_db


def test_a_streamed_mp3_leaves_out_the_placeholder_frame() -> None:
    """LAME writes a zero-filled frame first and fills it in at close; a stream that has sent it cannot,
    so the stream starts at the first audio frame (its side information is not all zeros)."""
    _, stream = streamed("mp3", quantized(24000, 2.0), 24000)
    assert stream[0] == 0xFF and stream[1] & 0xE0 == 0xE0
    assert any(stream[4:12])
