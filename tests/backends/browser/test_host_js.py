"""host.js's kernels (what a page computes on its CPU with --host-fallback) give the numpy kernels' results.

A page built with `--target browser --host-fallback` computes NonZero, Range over run-time values,
integer reductions, casts and random draws in JavaScript where the WGSL module computes them in numpy
(`loam.runtime.kernels`); a difference would be a wrong number in the page only.  Seeded arrays of
every dtype the page holds (NaN, infinities, values past i32 and int64 sums past 2**63 among them) go
through both, the JavaScript in Node: integers, casts, NonZero and Range must be equal bit for bit;
float reductions (numpy sums pairwise in f32, the page in f64) within a few ulps.  The page's draws are
its own generator's, not numpy's: a seed repeats them, and their mean, spread and frequencies are
those asked for.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loam.backends.browser_module import host_source, runtime_source
from loam.runtime.errors import DataError
from loam.runtime.kernels import PIECES

NODE = shutil.which("node")
CASES = 60
KERNELS = ("kernel_nonzero", "kernel_range_of", "kernel_reduce", "kernel_random", "_astype")

RUNNER = """\
import * as rt from "./host.mjs";
import { readFileSync } from "node:fs";
const ARRAYS = {float32: Float32Array, float16: Uint16Array, int64: BigInt64Array, int32: Int32Array,
  uint8: Uint8Array, bool: Uint8Array};
function decode(v) {
  if (v === null || typeof v !== "object" || !("dtype" in v)) return v;
  const data = v.dtype === "int64" ? BigInt64Array.from(v.data, BigInt)
    : ARRAYS[v.dtype].from(v.data, (x) => (typeof x === "string" ? Number(x) : x));
  return new rt.Tensor(v.dtype, data, v.shape);
}
function encode(t) {
  const data = Array.from(t.data, (x) => (typeof x === "bigint" ? x.toString() : Number.isFinite(x) ? x : String(x)));
  return {dtype: t.dtype, shape: t.shape, data};
}
const cases = JSON.parse(readFileSync(process.argv[2], "utf8"));
const out = cases.map(({name, args}) => {
  try {
    if (name === "draws") {  // [seed, dist, a, b, to, count] twice: does the seed repeat them?
      const [seed, dist, a, b, to, count] = args;
      const draw = () => rt.kernel_random(null, seed === null ? null : new rt._Rng(seed), dist, a, b, to, [count]);
      return [encode(draw()), encode(draw())];
    }
    return encode(rt[name](...args.map(decode)));
  } catch (e) { return {error: e.name, message: e.message}; }
});
process.stdout.write(JSON.stringify(out));
"""


def _array(a: np.ndarray) -> dict[str, Any]:
    """`a` as JSON holds it: int64 elements as decimal strings, NaN and infinities by name."""
    dtype = "bool" if a.dtype == np.bool_ else a.dtype.name
    if a.dtype == np.float16:
        data: list[Any] = a.view(np.uint16).reshape(-1).tolist()
    elif a.dtype == np.int64:
        data = [str(v) for v in a.reshape(-1).tolist()]
    elif a.dtype.kind == "f":
        named = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
        data = [v if np.isfinite(v) else named[str(v)] for v in a.reshape(-1).astype(np.float64).tolist()]
    else:
        data = a.reshape(-1).astype(np.int64).tolist()
    return {"dtype": dtype, "shape": list(a.shape), "data": data}


def _from_json(t: dict[str, Any]) -> np.ndarray:
    dtype = np.dtype(np.bool_) if t["dtype"] == "bool" else np.dtype(t["dtype"])
    if dtype == np.float16:
        return np.array(t["data"], np.uint16).view(np.float16).reshape(t["shape"])
    if dtype == np.int64:
        return np.array([int(v) for v in t["data"]], np.int64).reshape(t["shape"])
    return np.array([float(v) for v in t["data"]], np.float64).astype(dtype).reshape(t["shape"])


def _values(r: random.Random, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    count = int(np.prod(shape))
    picks: list[float]
    if dtype in ("float32", "float16"):
        special = [0.0, -0.0, float("nan"), float("inf"), -float("inf"), 3e9, -3e9, 1e20, 0.5, -2.5]
        picks = [r.choice(special) if r.random() < 0.3 else r.uniform(-100, 100) for _ in range(count)]
        with np.errstate(over="ignore"):  # 1e20 is a half's infinity
            return np.array(picks, np.float64).astype(dtype).reshape(shape)
    if dtype == "bool":
        return np.array([r.random() < 0.5 for _ in range(count)], np.bool_).reshape(shape)
    wide = 2**62 if dtype == "int64" else 2**31 - 1
    ints = [r.choice([0, 0, 1, -1, wide, -wide, r.randint(-9, 9)]) for _ in range(count)]
    return np.array(ints, np.int64).astype(dtype).reshape(shape)


def _shape(r: random.Random, low: int = 0) -> tuple[int, ...]:
    return tuple(r.randint(low, 4) for _ in range(r.randint(0, 3)))


def _draw(name: str, r: random.Random) -> list[Any]:
    if name == "kernel_nonzero":
        return [_values(r, r.choice(["float32", "float16", "int64", "int32", "bool"]), _shape(r))]
    if name == "kernel_range_of":
        dtype = r.choice(["int64", "int32", "float32"])
        if dtype == "float32":
            numbers = [r.choice([r.uniform(-50, 50), float(r.randint(-9, 9))]) for _ in range(3)]
            if r.random() < 0.1:
                numbers[2] = 0.0
        else:
            numbers = [r.randint(-40, 40), r.randint(-40, 40), r.choice([-7, -3, -1, 0, 1, 2, 5])]
        return [np.array(v, np.float64).astype(dtype) for v in numbers]
    if name == "kernel_reduce":
        dtype = r.choice(["int64", "int32", "float32", "bool"])
        shape = _shape(r)
        kind = r.choice(["max", "min"] if dtype == "bool" else ["sum", "prod", "mean", "max", "min"])
        axes = sorted(r.sample(range(len(shape)), r.randint(0, len(shape))))
        return [_values(r, dtype, shape), kind, axes, r.choice([0, 1])]
    raise AssertionError(f"no argument drawer for {name}")


DTYPES = ("float32", "float16", "int64", "int32", "bool")


def _casts(r: random.Random) -> list[list[Any]]:
    """Every pair of host dtypes, twice, over eight elements or more (so NaN and 3e9 meet each integer)."""
    return [[_values(r, a, (r.randint(8, 12),)), b] for a in DTYPES for b in DTYPES for _ in range(2)]


def _numpy(name: str, args: list[Any]) -> np.ndarray:
    with np.errstate(all="ignore"):  # NaN and 3e9 cast to integers: x86's lowest value, as the page gives
        return args[0].astype(args[1]) if name == "_astype" else np.asarray(PIECES[name](*args))


def _node(tmp_path: Path, cases: list[dict[str, Any]]) -> list[Any]:
    if NODE is None:  # scripts/dev-setup.sh installs Node.js where missing: under CI its absence is a broken setup
        (pytest.fail if os.environ.get("CI") else pytest.skip)("Node.js is not installed (scripts/dev-setup.sh)")
    assert NODE is not None
    exported = ", ".join(["_Rng", *KERNELS])  # Tensor: runtime.js exports it
    source = runtime_source() + host_source() + f"\nexport {{ {exported} }};\n"
    (tmp_path / "host.mjs").write_text(source, encoding="utf-8")
    (tmp_path / "run.mjs").write_text(RUNNER, encoding="utf-8")
    (tmp_path / "cases.json").write_text(json.dumps(cases), encoding="utf-8")
    command = [NODE, str(tmp_path / "run.mjs"), str(tmp_path / "cases.json")]
    ran = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    return list(json.loads(ran.stdout))


def test_each_host_kernel_gives_the_numpy_kernels_results(tmp_path: Path) -> None:
    r = random.Random(20261207)
    cases: list[dict[str, Any]] = []
    wanted: list[np.ndarray | str] = []
    kernels = ("kernel_nonzero", "kernel_range_of", "kernel_reduce")
    drawn = [(name, _draw(name, r)) for name in kernels for _ in range(CASES)]
    for name, args in [*drawn, *(("_astype", args) for args in _casts(r))]:
        try:
            wanted.append(_numpy(name, args))
        except DataError:
            wanted.append("DataError")
        cases.append({"name": name, "args": [_array(a) if isinstance(a, np.ndarray) else a for a in args]})
    got = _node(tmp_path, cases)
    for case, g, w in zip(cases, got, wanted, strict=True):
        if isinstance(w, str):
            assert g.get("error") == w, (case, g)
            continue
        assert "error" not in g, (case, g)
        page = _from_json(g)
        assert page.dtype == w.dtype and page.shape == w.shape, (case, page, w)
        if case["name"] == "kernel_reduce" and w.dtype.kind == "f":
            np.testing.assert_allclose(page, w, rtol=1e-6, atol=1e-6, err_msg=json.dumps(case))
        else:
            bits = np.uint16 if w.dtype == np.float16 else w.dtype  # halves by their bits: NaN's included
            np.testing.assert_array_equal(page.view(bits), w.view(bits), err_msg=json.dumps(case))


def test_the_pages_draws_repeat_for_a_seed_and_follow_their_distribution(tmp_path: Path) -> None:
    count = 20000
    cases = [
        {"name": "draws", "args": [7, "normal", 1.5, 2.0, "float32", count]},
        {"name": "draws", "args": [8, "normal", 1.5, 2.0, "float32", count]},
        {"name": "draws", "args": [7, "uniform", -3.0, 5.0, "float32", count]},
        {"name": "draws", "args": [None, "uniform", 0.0, 1.0, "float32", count]},
    ]
    seven, eight, uniform, fresh = ([_from_json(t) for t in pair] for pair in _node(tmp_path, cases))
    # One generator per call: a seed gives the same draws each time, another seed others, no seed fresh ones.
    np.testing.assert_array_equal(seven[0], seven[1])
    assert not np.array_equal(seven[0], eight[0]) and not np.array_equal(fresh[0], fresh[1])
    for normal in (seven[0], eight[0]):
        assert abs(normal.mean() - 1.5) < 0.05 and abs(normal.std() - 2.0) < 0.05
        assert abs(np.mean(np.abs(normal - 1.5) < 2.0) - 0.6827) < 0.015  # within one standard deviation
    u = uniform[0]
    assert u.min() >= -3.0 and u.max() < 5.0 and abs(u.mean() - 1.0) < 0.1
    assert np.histogram(u, bins=8, range=(-3, 5))[0].min() > count / 8 * 0.9


def test_bernoulli_draws_fall_below_each_probability(tmp_path: Path) -> None:
    p = np.repeat(np.array([0.0, 0.25, 0.9, 1.0], np.float32), 5000)
    (got,) = _node(tmp_path, [{"name": "kernel_random", "args": [_array(p), None, "bernoulli", 0.0, 1.0, "float32"]}])
    drawn = _from_json(got).reshape(4, 5000)
    assert drawn.dtype == np.float32 and set(np.unique(drawn)) <= {0.0, 1.0}
    frequency = drawn.mean(axis=1)
    assert frequency[0] == 0.0 and frequency[3] == 1.0
    assert abs(frequency[1] - 0.25) < 0.03 and abs(frequency[2] - 0.9) < 0.02
