"""The semantics suite: shape arithmetic over symbolic extents, checked against onnxruntime.

`scripts/make_semantics_models.py` writes one small model per construct into `models/` and lists in
`cases.json` the symbol assignments to run each at, and the violating ones.  A run is one (model,
assignment):

- an ordinary run: the model builds (`loam.testing.build_for`, once per model and process), and Loam's
  outputs at seeded random inputs of the assigned shapes match onnxruntime's (`loam.testing.assert_same`);
- a violation: onnxruntime fails on the inputs (ONNX itself refuses them), and Loam's `forward` raises its
  `ShapeError` whose message names the node relying on the owed condition (or the input that disagrees
  with its spelled dim_param).

A run's id is `<model>/<assignment>`, e.g. `slice_step2/N=5` or `add_unequal_axes/violates:M=4,N=3`.
`expected_failures.toml` lists the runs that fail for now (strict xfail; the reason is the first line of
their error); `python -m tests.semantics.summary --write-expectations` rewrites it from a run.
"""

from __future__ import annotations

import functools
import json
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.parser

HERE = Path(__file__).resolve().parent
MODELS = HERE / "models"
CASES = HERE / "cases.json"
EXPECTATIONS = HERE / "expected_failures.toml"

RTOL, ATOL = 1e-5, 1e-5
SEED = 0


@dataclass(frozen=True)
class Run:
    """One model at one assignment of its symbols (and, for a violation, of spelled input axes)."""

    model: str
    at: tuple[tuple[str, int], ...]
    match: tuple[str, ...] | None = None  # a violation: what the ShapeError must name (any one of these)
    why: str = ""

    @property
    def id(self) -> str:
        values = ",".join(f"{k}={v}" for k, v in self.at)
        return f"{self.model}/{'violates:' if self.match is not None else ''}{values}"

    @property
    def assignment(self) -> dict[str, int]:
        return dict(self.at)


@functools.cache
def manifest() -> dict[str, Any]:
    """cases.json's cases, by model name."""
    return json.loads(CASES.read_text(encoding="utf-8"))["cases"]


def runs() -> list[Run]:
    """Every run of the suite, ordinary runs first within each model."""
    out = []
    for name, case in manifest().items():
        out += [Run(name, tuple(sorted(at.items()))) for at in case["runs"]]
        for v in case["violations"]:
            match = (v["match"],) if isinstance(v["match"], str) else tuple(v["match"])
            out.append(Run(name, tuple(sorted(v["at"].items())), match, v["why"]))
    return out


@functools.cache
def load_model(name: str) -> onnx.ModelProto:
    """The model as the text form reads back (onnx.parser)."""
    return onnx.parser.parse_model((MODELS / f"{name}.onnxtext").read_text(encoding="utf-8"))


# Builds by model name within one process: the BuildResult, or the exception the build raised (re-raised for
# every run of that model, so a refused build costs one attempt).
_BUILDS: dict[str, Any] = {}


def built(name: str) -> Any:
    from loam.testing import build_for

    if name not in _BUILDS:
        try:
            _BUILDS[name] = build_for(load_model(name))
        except Exception as err:
            _BUILDS[name] = err
    result = _BUILDS[name]
    if isinstance(result, Exception):
        raise result
    return result


# ----------------------------------------------------------------------------------------------------------
# Inputs


def dim_value(spelling: int | str, at: Mapping[str, int], input_name: str) -> int:
    """An axis's length at an assignment: an int, a symbol, or a spelled dim_param (`past + 1`, `2 * N`,
    `batch * seq`: names and integers separated by spaced +, - and *, with * first).  `at[input_name]`
    overrides a spelled axis of that input (how a violation gives an input a length its spelling denies)."""
    if isinstance(spelling, int):
        return spelling
    if input_name in at and not spelling.isidentifier():
        return at[input_name]
    words = spelling.split(" ")
    total, sign, term = 0, 1, 1
    for i, word in enumerate(words):
        if i % 2:
            if word not in ("+", "-", "*"):
                raise ValueError(f"dim_param {spelling!r}: {word!r} is no operator")
            if word != "*":
                total += sign * term
                sign, term = (1 if word == "+" else -1), 1
        else:
            term *= int(word) if word.lstrip("-").isdigit() else at[word]
    return total + sign * term


def make_feeds(inputs: Sequence[Mapping[str, Any]], at: Mapping[str, int], seed: int = SEED) -> dict[str, np.ndarray]:
    """Seeded random inputs of the shapes `at` gives: normal floats, ints in the input's [low, high), bools."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for spec in inputs:
        shape = tuple(dim_value(d, at, spec["name"]) for d in spec["shape"])
        if spec["dtype"] == "float32":
            feeds[spec["name"]] = rng.standard_normal(shape).astype(np.float32)
        elif spec["dtype"] == "bool":
            feeds[spec["name"]] = rng.random(shape) < 0.5
        else:
            feeds[spec["name"]] = rng.integers(spec["low"], spec["high"], size=shape).astype(spec["dtype"])
    return feeds


def feeds_for(run: Run) -> dict[str, np.ndarray]:
    return make_feeds(manifest()[run.model]["inputs"], run.assignment)


# ----------------------------------------------------------------------------------------------------------
# Checking one run


def check_run(run: Run) -> None:
    """Do what `run` demands (module docstring); raises AssertionError (or Loam's own error) when it does not."""
    from loam.testing import assert_same, run_built, run_onnxruntime

    model = load_model(run.model)
    feeds = feeds_for(run)
    result = built(run.model)
    if run.match is None:
        want = run_onnxruntime(model, feeds)
        got = run_built(result, feeds)
        assert_same(got, want, rtol=RTOL, atol=ATOL)
        return
    # The condition is genuinely violated: ONNX (onnxruntime) refuses these inputs too.
    try:
        run_onnxruntime(model, feeds)
    except Exception:  # any onnxruntime failure will do
        pass
    else:
        raise AssertionError(f"onnxruntime runs these inputs, so they violate nothing ONNX owes ({run.why})")
    shape_error = result.module.ShapeError
    try:
        run_built(result, feeds)
    except shape_error as err:
        if not any(names(name, str(err)) for name in run.match):
            raise AssertionError(f"ShapeError does not name {' or '.join(run.match)}: {err}") from err
        return
    raise AssertionError(f"forward ran without a ShapeError naming {' or '.join(run.match)} ({run.why})")


def names(name: str, message: str) -> bool:
    """Whether `message` names `name` whole: '/Slice' is not named by '/Slice_1', nor 'mask' by 'attn_mask'."""
    return re.search(rf"(?<![\w/.]){re.escape(name)}(?![\w/]|\.\w)", message) is not None


def first_line(err: BaseException) -> str:
    """`ErrorClass: first line of its message`, as an expectations reason."""
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[0] if lines else ''}"[:300]


def outcome(run: Run) -> tuple[bool, str]:
    """(passed, first line of the failure) without raising: what the summary and --write-expectations use."""
    try:
        check_run(run)
    except Exception as err:
        return False, first_line(err)
    return True, ""


# ----------------------------------------------------------------------------------------------------------
# Expectations


@functools.cache
def expectations() -> dict[str, str]:
    """`{run id: reason}` from expected_failures.toml's [xfail] table."""
    if not EXPECTATIONS.is_file():
        return {}
    return dict(tomllib.loads(EXPECTATIONS.read_text(encoding="utf-8")).get("xfail", {}))


def toml_string(text: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(text, ensure_ascii=False)


def write_expectations(failures: Mapping[str, str]) -> None:
    """Rewrite expected_failures.toml with `failures` (run id -> reason), in suite order."""
    order = {r.id: k for k, r in enumerate(runs())}
    out = [
        "# Semantics runs that do not (yet) do what harness.check_run demands, with the first line of why.",
        "# Written by `python -m tests.semantics.summary --write-expectations`; review the reasons.",
        "# Each is a strict pytest xfail: it must still fail, so a fix shows up as an XPASS to delist.",
        "",
        "[xfail]",
    ]
    out += [f"{toml_string(i)} = {toml_string(failures[i])}" for i in sorted(failures, key=lambda i: order.get(i, -1))]
    EXPECTATIONS.write_text("\n".join(out) + "\n", encoding="utf-8")
