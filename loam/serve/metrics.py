"""Prometheus metrics of a server: one registry per server, one label set per model.

Names follow Prometheus' conventions (`_total` counters, `_seconds` histograms); tokens per second
are `rate()` of the token counters, and the two `_per_second` gauges give the rate over the last ten
seconds for a scrape that wants a number (llama.cpp's `prompt_tokens_seconds` and
`predicted_tokens_seconds` say the same).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

_WINDOW = 10.0


class Metrics:
    """The server's metric families."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.queue_depth = Gauge("loam_queue_depth", "Requests waiting or running", ["model"], registry=r)
        self.cohort_size = Histogram(
            "loam_cohort_size", "Requests per cohort", ["model"], registry=r, buckets=(1, 2, 4, 8, 16, 32, 64)
        )
        self.cohort_units = Histogram(
            "loam_cohort_units", "Units (tokens) per cohort", ["model"], registry=r,
            buckets=(1, 4, 16, 64, 256, 1024, 4096),
        )  # fmt: skip
        self.prompt_tokens = Counter("loam_prompt_tokens", "Prompt tokens read", ["model"], registry=r)
        self.cached_tokens = Counter(
            "loam_cached_prompt_tokens", "Prompt tokens found in retained state", ["model"], registry=r
        )
        self.generated_tokens = Counter("loam_generation_tokens", "Tokens generated", ["model"], registry=r)
        self.prompt_rate = Gauge("loam_prompt_tokens_per_second", "Prompt tokens/s, last 10 s", ["model"], registry=r)
        self.generation_rate = Gauge(
            "loam_generation_tokens_per_second", "Generated tokens/s, last 10 s", ["model"], registry=r
        )
        self.ttft = Histogram(
            "loam_time_to_first_token_seconds", "Arrival to first token", ["model"], registry=r,
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
        )  # fmt: skip
        self.requests = Counter("loam_requests", "Finished requests by outcome", ["model", "outcome"], registry=r)
        self.scored_pairs = Counter("loam_scored_pairs", "Pairs scored (score, rerank)", ["model"], registry=r)
        self.decisions = Counter("loam_decisions", "Inputs a decision model answered", ["model"], registry=r)
        self.specialization_hits = Counter(
            "loam_specialization_hits", "Requests finding their specialized build kept", ["model"], registry=r
        )
        self.specialization_misses = Counter(
            "loam_specialization_misses", "Specialized builds started for a request", ["model"], registry=r
        )
        self.specialization_evictions = Counter(
            "loam_specialization_evictions", "Specialized builds evicted from the cache", ["model"], registry=r
        )
        self.specialization_fallbacks = Counter(
            "loam_specialization_fallbacks",
            "Specialized builds that failed for another reason than their dims, served by the registered build",
            ["model"],
            registry=r,
        )
        self.specialization_entries = Gauge(
            "loam_specialization_entries", "Specialized builds held, compiling included", ["model"], registry=r
        )
        self.compile_seconds = Histogram(
            "loam_specialization_compile_seconds", "Time to build a specialized stage", ["model"], registry=r,
            buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
        )  # fmt: skip
        self.proposed_tokens = Counter(
            "loam_speculative_proposed_tokens", "Tokens a proposer guessed for verification", ["model"], registry=r
        )
        self.accepted_tokens = Counter(
            "loam_speculative_accepted_tokens", "Proposed tokens the decoder accepted", ["model"], registry=r
        )
        self.images = Counter("loam_images_generated", "Images generated", ["model"], registry=r)
        self.denoising_steps = Counter("loam_denoising_steps", "Denoising steps run (per image)", ["model"], registry=r)
        self.denoising_rate = Gauge(
            "loam_denoising_steps_per_second", "Denoising steps/s, last 10 s", ["model"], registry=r
        )
        self.projector_calls = Counter(
            "loam_image_projector_calls",
            "Calls of a text model's image projector (a cohort of images)",
            ["model"],
            registry=r,
        )
        self.projected_images = Counter(
            "loam_image_projected",
            "Images a text model's projector read (not found in retained state)",
            ["model"],
            registry=r,
        )
        self.kv_blocks_used = Gauge("loam_kv_blocks_used", "KV blocks held by requests", ["model"], registry=r)
        self.kv_blocks_cached = Gauge(
            "loam_kv_blocks_cached", "KV blocks retained for prefix reuse", ["model"], registry=r
        )
        self.audio_input_seconds = Counter(
            "loam_audio_input_seconds", "Seconds of audio a model has finished hearing", ["model"], registry=r
        )
        self.audio_real_time_factor = Histogram(
            "loam_audio_real_time_factor",
            "Processing seconds per second of audio, per transcribed window or spoken sentence",
            ["model"], registry=r, buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10),
        )  # fmt: skip
        self.audio_output_seconds = Counter(
            "loam_audio_output_seconds", "Seconds of audio produced", ["model"], registry=r
        )
        self.time_to_first_audio = Histogram(
            "loam_audio_time_to_first_audio_seconds", "Arrival to first audio", ["model"], registry=r,
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
        )  # fmt: skip

    def model(self, name: str) -> ModelMetrics:
        return ModelMetrics(self, name)

    def watch_memory(self, rows: Callable[[], Iterable[tuple[str, str, int]]], limit: int | None) -> None:
        """Report, at each scrape, `rows()`' resident bytes by model and kind, and the memory budget."""
        self.registry.register(_MemoryCollector(rows, limit))


class _MemoryCollector(Collector):
    """`loam_resident_bytes{model, kind}` read when scraped, and `loam_memory_limit_bytes` (absent: no limit)."""

    def __init__(self, rows: Callable[[], Iterable[tuple[str, str, int]]], limit: int | None) -> None:
        self.rows = rows
        self.limit = limit

    def collect(self) -> Iterator[Metric]:
        resident = GaugeMetricFamily(
            "loam_resident_bytes", "Bytes a model holds by kind (weights, kv, workspace)", labels=["model", "kind"]
        )
        for model, kind, count in self.rows():
            resident.add_metric([model, kind], count)
        yield resident
        if self.limit is not None:
            yield GaugeMetricFamily("loam_memory_limit_bytes", "The memory budget (--memory-limit)", self.limit)


class ModelMetrics:
    """The metrics of one model, labels bound."""

    def __init__(self, metrics: Metrics, name: str) -> None:
        self.queue_depth = metrics.queue_depth.labels(name)
        self.cohort_size = metrics.cohort_size.labels(name)
        self.cohort_units = metrics.cohort_units.labels(name)
        self._prompt = metrics.prompt_tokens.labels(name)
        self._cached = metrics.cached_tokens.labels(name)
        self._generated = metrics.generated_tokens.labels(name)
        self._prompt_rate = metrics.prompt_rate.labels(name)
        self._generation_rate = metrics.generation_rate.labels(name)
        self.ttft = metrics.ttft.labels(name)
        self._requests = metrics.requests
        self._name = name
        self.decisions = metrics.decisions.labels(name)
        self.kv_used = metrics.kv_blocks_used.labels(name)
        self.kv_cached = metrics.kv_blocks_cached.labels(name)
        self._scored = metrics.scored_pairs.labels(name)
        self.specialization_hits = metrics.specialization_hits.labels(name)
        self.specialization_misses = metrics.specialization_misses.labels(name)
        self.specialization_evictions = metrics.specialization_evictions.labels(name)
        self.specialization_entries = metrics.specialization_entries.labels(name)
        self.specialization_fallbacks = metrics.specialization_fallbacks.labels(name)
        self.compile_seconds = metrics.compile_seconds.labels(name)
        self._proposed = metrics.proposed_tokens.labels(name)
        self._accepted = metrics.accepted_tokens.labels(name)
        self.projector_calls = metrics.projector_calls.labels(name)
        self.projected_images = metrics.projected_images.labels(name)
        self._audio_in = metrics.audio_input_seconds.labels(name)
        self._audio_rtf = metrics.audio_real_time_factor.labels(name)
        self._audio_out = metrics.audio_output_seconds.labels(name)
        self.time_to_first_audio = metrics.time_to_first_audio.labels(name)
        self._lock = threading.Lock()
        self._recent: deque[tuple[float, int, int]] = deque()
        self._images = metrics.images.labels(name)
        self._steps = metrics.denoising_steps.labels(name)
        self._step_rate = metrics.denoising_rate.labels(name)
        self._recent_steps: deque[tuple[float, int]] = deque()

    def tokens(self, prompt: int, generated: int, cached: int = 0) -> None:
        self._prompt.inc(prompt)
        self._generated.inc(generated)
        self._cached.inc(cached)
        now = time.monotonic()
        with self._lock:
            self._recent.append((now, prompt, generated))
            while self._recent and self._recent[0][0] < now - _WINDOW:
                self._recent.popleft()
            span = max(now - self._recent[0][0], 1.0)
            self._prompt_rate.set(sum(p for _, p, _ in self._recent) / span)
            self._generation_rate.set(sum(g for _, _, g in self._recent) / span)

    def scored(self, pairs: int) -> None:
        self._scored.inc(pairs)

    def speculated(self, proposed: int, accepted: int) -> None:
        """A verifier span read `proposed` guessed tokens, of which the decoder accepted `accepted`."""
        self._proposed.inc(proposed)
        self._accepted.inc(accepted)

    def audio_input(self, seconds: float, processing: float) -> None:
        """A model finished hearing `seconds` of audio, which took it `processing` seconds of work."""
        self._audio_in.inc(seconds)
        if seconds > 0:
            self._audio_rtf.observe(processing / seconds)

    def audio_out(self, seconds: float, compute: float) -> None:
        """`seconds` of audio were produced in `compute` seconds of numerical work."""
        self._audio_out.inc(seconds)
        if seconds > 0:
            self._audio_rtf.observe(compute / seconds)

    def finished(self, outcome: str) -> None:
        self._requests.labels(self._name, outcome).inc()

    def images_generated(self, count: int) -> None:
        self._images.inc(count)

    def denoised(self, steps: int) -> None:
        """`steps` denoising steps ran (one per image per step)."""
        self._steps.inc(steps)
        now = time.monotonic()
        with self._lock:
            self._recent_steps.append((now, steps))
            while self._recent_steps and self._recent_steps[0][0] < now - _WINDOW:
                self._recent_steps.popleft()
            span = max(now - self._recent_steps[0][0], 1.0)
            self._step_rate.set(sum(s for _, s in self._recent_steps) / span)
