"""Committed exports in a folder, each graph `NAME.onnxtext` with its weights in a safetensors checkpoint,
built once per backend as a user builds them and held to onnxruntime at two extents: what the vision and
Whisper test modules share.

A build is the layout `loam layout` drafts, unedited, and the checkpoint; on WGSL every kernel runs on
the device but the nodes `host` names, which the build's device summary must list.  Where a build stops
today, `fails` records the exception and its first line (the build's message less the graph's path):
the case is a strict xfail, and a failure other than the recorded one fails it, so the reason stays true.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnx.parser
import pytest
from onnx.external_data_helper import load_external_data_for_model

from loam.driver.draft import draft_layout
from loam.driver.options import Options
from loam.driver.pipeline import BuildResult, build
from loam.testing import assert_same, forward_inputs, run_onnxruntime

Feeds = dict[str, np.ndarray]
Size = tuple[int, ...]


@dataclass(frozen=True)
class Case:
    """A graph, how to make its inputs at an extent, and the extents (batch first) it runs at."""

    feeds: Callable[..., Feeds]
    sizes: tuple[Size, ...]
    seed: int = 0

    def inputs(self, size: Size) -> Feeds:
        return self.feeds(np.random.default_rng(self.seed), *size)


@dataclass(eq=False)
class GraphFolder:
    """The graphs of `root` that `cases` names, compared with onnxruntime within `rtol` and `atol`."""

    root: Path
    cases: Mapping[str, Case]
    rtol: float
    atol: float
    fails: Mapping[str, tuple[type[Exception], str]] = field(default_factory=dict)
    host: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """The nodes each graph's WGSL module computes on the host (through the host fallback)."""
    checkpoint: str | None = None
    """One checkpoint every graph reads; None: each graph's own `NAME.safetensors`."""
    _builds: dict[tuple[str, str], BuildResult] = field(default_factory=dict, repr=False)
    _references: dict[str, onnx.ModelProto] = field(default_factory=dict, repr=False)

    def graph(self, model: str) -> Path:
        return self.root / f"{model}.onnxtext"

    def checkpoint_of(self, model: str) -> Path:
        return self.root / (self.checkpoint or f"{model}.safetensors")

    def built(self, model: str, backend: str) -> BuildResult:
        """`model` built once for `backend` (a failure other than the one `fails` records is an
        AssertionError, not the expected failure)."""
        key = (model, backend)
        if key not in self._builds:
            graph, checkpoint = self.graph(model), self.checkpoint_of(model)
            options = Options(checkpoints=(checkpoint,))
            try:
                draft = draft_layout(graph, [checkpoint], options)
                host = backend == "wgsl" and model in self.host
                self._builds[key] = build(graph, options=draft.options(options), backend=backend, host_fallback=host)
            except Exception as failure:
                first = str(failure).splitlines()[0].removeprefix(f"{graph}: ")
                kind, recorded = self.fails.get(model, (None, ""))
                assert type(failure) is kind and recorded.startswith(first), (
                    f"{model} ({backend}) stops otherwise now: {first}"
                )
                raise
        return self._builds[key]

    def reference(self, model: str) -> onnx.ModelProto:
        """The graph as onnxruntime reads it: the text with its external weights loaded."""
        if model not in self._references:
            proto = onnx.parser.parse_model(self.graph(model).read_text(encoding="utf-8"))
            load_external_data_for_model(proto, str(self.root))
            self._references[model] = proto
        return self._references[model]

    def run(self, result: BuildResult, model: str, feeds: Feeds) -> list[np.ndarray]:
        """`result`'s forward on `feeds`, its weights loaded from the checkpoint."""
        module = result.module
        weights = module.Weights.load_file([str(self.checkpoint_of(model))])
        out = module.forward(weights, *(feeds[name] for name in forward_inputs(result)))
        return list(out) if isinstance(out, tuple) else [out]

    def params(self) -> list[object]:
        """One pytest parameter per graph, a strict xfail where `fails` records why its build stops."""
        return [
            pytest.param(
                model,
                id=model,
                marks=[pytest.mark.xfail(strict=True, raises=self.fails[model][0], reason=self.fails[model][1])]
                if model in self.fails
                else [],
            )
            for model in self.cases
        ]

    def matches_onnxruntime(self, model: str, backend: str, sizes: Sequence[Size] | None = None) -> None:
        """The one build of `model` at each of `sizes` (the case's own by default): every output's shape
        and values are onnxruntime's, and the extents are two extents of the module.  On WGSL the
        device summary lists exactly the nodes `host` names."""
        result = self.built(model, backend)
        if backend == "wgsl":
            assert result.fusion is not None and result.fusion.device is not None
            assert tuple(entry.split(" (")[0] for entry in result.fusion.device.host) == self.host.get(model, ())
        case = self.cases[model]
        shapes = []
        for size in case.sizes if sizes is None else sizes:
            feeds = case.inputs(size)
            want = run_onnxruntime(self.reference(model), feeds)
            assert_same(self.run(result, model, feeds), want, rtol=self.rtol, atol=self.atol)
            shapes.append([w.shape for w in want])
        assert len({repr(s) for s in shapes}) == len(shapes)  # each size is another extent of the one module
