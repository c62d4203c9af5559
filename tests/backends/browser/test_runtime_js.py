"""runtime.js's kernel parameter functions and derived extents equal their Python pieces, case by case.

The browser module computes each dispatch's parameters with runtime.js's `_p_NAME`, the Python WGSL
module with `loam.backends.wgsl_kernels`' function of the same name; a difference would be wrong
numbers on one target only.  Seeded random arguments (negative pads and steps, empty extents,
broadcast shapes) go through both, the JavaScript in Node, and every result must be equal.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from loam.backends.browser_js import PORTED
from loam.backends.browser_module import runtime_source
from loam.backends.wgsl_kernel_printer import kernel_pieces
from loam.runtime import prologue

NODE = shutil.which("node")
CASES = 40


def _shape(r: random.Random, rank: int, low: int = 0) -> tuple[int, ...]:
    return tuple(r.randint(low, 5) for _ in range(rank))


def _broadcast(r: random.Random, shape: tuple[int, ...]) -> tuple[int, ...]:
    rank = r.randint(0, len(shape))
    return tuple(1 if r.random() < 0.4 else e for e in shape[len(shape) - rank :])


def _strides(r: random.Random, rank: int) -> tuple[int, ...]:
    return tuple(r.randint(-20, 40) for _ in range(rank))


def _draw(name: str, r: random.Random) -> tuple[list[object], dict[str, object]]:
    """Positional and keyword arguments for piece `name`, as the printer spells them."""
    rank = r.randint(1, 4)
    if name == "_row_major":
        return [_shape(r, rank)], {}
    if name == "_p_tile_program":
        grid: object = r.randint(0, 9) if r.random() < 0.5 else _shape(r, r.randint(1, 3))
        return [grid, tuple(r.randint(-(2**31), 2**32 - 1) for _ in range(r.randint(0, 8)))], {}
    if name == "_p_zip":
        out = _shape(r, rank)
        return [out, tuple(_broadcast(r, out) for _ in range(r.randint(0, 3)))], {}
    if name == "_p_copy":
        return [_shape(r, rank), r.randint(-9, 99), _strides(r, rank), r.randint(-9, 99), _strides(r, rank)], {}
    if name == "_p_permute":
        perm = list(range(rank))
        r.shuffle(perm)
        return [_shape(r, rank), tuple(perm)], {}
    if name == "_p_slice":
        shape = _shape(r, rank, 1)
        return [shape, tuple(r.randint(0, e - 1) for e in shape), _shape(r, rank),
                tuple(r.choice([-2, -1, 1, 2, 3]) for _ in shape)], {}  # fmt: skip
    if name == "_p_place":
        whole = _shape(r, rank, 1)
        axis = r.randrange(rank)
        piece = tuple(r.randint(0, e) if k == axis else e for k, e in enumerate(whole))
        return [piece, whole, axis, r.randint(0, whole[axis] - piece[axis]), r.random() < 0.5], {}
    if name == "_p_range":
        return [r.randint(-50, 50), r.randint(-50, 50), r.choice([-7, -1, 1, 2, 5])], {}
    if name == "_p_gather":
        data = _shape(r, rank, 1)
        return [(data, _shape(r, r.randint(0, 2)), ())], {"axis": r.randrange(rank)}
    if name == "_p_conv":
        group = r.choice([1, 2])
        x = (r.randint(1, 3), group * r.randint(1, 3), *_shape(r, 2, 3))
        w = (group * r.randint(1, 3), x[1] // group, *_shape(r, 2, 1))
        out = (x[0], w[0], *_shape(r, 2, 1))
        return [(x, w, out)], {"strides": _shape(r, 2, 1), "pads": tuple(r.randint(0, 2) for _ in range(4)),
                               "dilations": _shape(r, 2, 1), "group": group}  # fmt: skip
    if name == "_p_conv_transpose":
        group = r.choice([1, 2, 3])
        x = (r.randint(1, 3), group * r.randint(1, 3), *_shape(r, 2, 1))
        w = (x[1], r.randint(1, 3), *_shape(r, 2, 1))
        out = (x[0], group * w[1], *_shape(r, 2, 1))
        return [(x, w, out)], {"strides": _shape(r, 2, 1), "pads": tuple(r.randint(0, 2) for _ in range(4)),
                               "dilations": _shape(r, 2, 1), "group": group,
                               "output_padding": _shape(r, 2)}  # fmt: skip
    if name == "_p_scatter_elements":
        data = _shape(r, rank)
        indices = tuple(r.randint(0, e) for e in data)
        return [(data, indices, indices, ())], {
            "axis": r.randint(-rank, rank - 1),
            "reduction": r.choice(["none", "add"]),
        }
    if name == "_p_gather_elements":
        data = _shape(r, rank, 1)
        return [(data, tuple(r.randint(0, e) for e in data), ())], {"axis": r.randint(-rank, rank - 1)}
    if name == "_p_gather_nd":
        data = _shape(r, rank)
        batch_dims = r.randint(0, rank - 1)
        k = r.randint(1, rank - batch_dims)
        indices = (*data[:batch_dims], *_shape(r, r.randint(0, 2)), k)
        return [(data, indices, ())], {"batch_dims": batch_dims}
    if name == "_p_cumsum":
        return [(_shape(r, rank), ())], {"axis": r.randint(-rank, rank - 1), "exclusive": r.choice([0, 1]),
                                          "reverse": r.choice([0, 1])}  # fmt: skip
    if name == "_p_normalize":
        shape = _shape(r, rank, 1)
        axes = tuple(sorted(r.sample(range(rank), r.randint(1, rank))))
        channel = r.choice([-1, *range(rank)])
        params = [
            (shape[channel],) if channel >= 0 else shape[r.randint(0, rank - 1) :] for _ in range(r.randint(0, 2))
        ]
        stats = r.choice([0, 1])
        outs = [shape] * (3 if stats else 1)
        keywords = {"axes": axes, "epsilon": r.choice([1e-5, 1e-12, 0.1]), "channel_axis": channel, "stash": "float32"}
        return [(shape, *params, *outs)], {**keywords, "stats": stats}
    if name == "_p_pool":
        x = (r.randint(1, 3), r.randint(1, 4), *_shape(r, 2, 4))
        return [(x, ())], {"mode": r.choice(["max", "average", "lp"]), "kernel_shape": _shape(r, 2, 1),
                           "strides": _shape(r, 2, 1), "pads": tuple(r.randint(-1, 2) for _ in range(4)),
                           "dilations": _shape(r, 2, 1), "out_shape": _shape(r, 2, 1),
                           "indices": r.choice([0, 1])}  # fmt: skip
    if name in ("_p_softmax", "_p_reduce"):
        shape = _shape(r, rank)
        axes = tuple(sorted(r.sample(range(rank), r.randint(1, rank))))
        extra = {"keepdims": r.choice([0, 1])} if name == "_p_reduce" else {}
        return [(shape, ())], {"kind": "sum", "axes": axes, **extra}
    if name == "_p_matmul":
        m, k, n = (r.randint(0, 9) for _ in range(3))
        batch = _shape(r, r.randint(0, 2), 1)
        a = (*_broadcast(r, batch), m, k) if r.random() < 0.8 else (k,)
        b = (*_broadcast(r, batch), k, n) if r.random() < 0.8 else (k,)
        out = (*batch, *((m,) if len(a) > 1 else ()), *((n,) if len(b) > 1 else ()))
        return [a, b, _strides(r, len(a)), _strides(r, len(b)), out, tuple(_broadcast(r, out) for _ in range(2))], {}
    if name in ("_p_matmul_packed", "_p_gather_packed"):
        rows, blocks = r.randint(1, 9), r.randint(1, 4)
        encoding = r.choice(["Q4_0", "Q4_1", "Q8_0"])
        if name == "_p_gather_packed":
            return [((rows, blocks * 32), _shape(r, r.randint(0, 2)), ())], {"axis": 0, "encoding": encoding}
        transposed = r.choice([0, 1])
        k = blocks * 32 if transposed else rows
        return [((*_shape(r, r.randint(0, 2)), k), (rows, blocks * 32), ())], {
            "transposed": transposed, "encoding": encoding}  # fmt: skip
    if name == "_p_trilu":
        return [(_shape(r, r.randint(2, 4)), ())], {"upper": r.choice([0, 1]), "offset": r.randint(-9, 9)}
    if name == "_p_scatter_nd":
        data = _shape(r, rank)
        indices = (*_shape(r, r.randint(0, 2)), r.randint(0, rank))
        return [(data, indices, ())], {"reduction": r.choice(["none", "add"])}
    if name == "_p_pad":
        x = _shape(r, rank)
        pads = tuple(r.randint(-3, 4) for _ in range(2 * rank))
        y = tuple(max(0, e + pads[k] + pads[k + rank]) for k, e in enumerate(x))
        fill = [_shape(r, r.randint(0, 1))] if r.random() < 0.3 else []
        value = r.choice([0.0, -1.5, 3.0, 1e10, -7.25, -3e9])
        return [(x, *fill, y)], {"pads": pads, "mode": r.choice(["constant", "reflect", "edge"]), "value": value}
    if name in ("_p_recurrent", "_p_rnn", "_p_gru", "_p_lstm"):
        layout = r.choice([0, 1])
        steps, batch, size = r.randint(0, 4), r.randint(1, 3), r.randint(1, 5)
        hidden, dirs = r.randint(1, 6), r.randint(1, 2)
        x = (batch, steps, size) if layout else (steps, batch, size)
        shapes = (x, (dirs, 4 * hidden, size), (dirs, 4 * hidden, hidden), ())
        if name == "_p_recurrent":
            return [shapes, layout, r.random() < 0.5], {}
        common = {"direction": "forward", "activations": "Sigmoid,Tanh,Tanh", "alphas": (), "betas": (), "clip": 0.0}
        extra = {"linear_before_reset": r.choice([0, 1])} if name == "_p_gru" else {}
        extra |= {"input_forget": 0} if name == "_p_lstm" else {}
        return [shapes], {**common, "layout": layout, **extra, "present": 0}
    if name == "derived_extent":
        fn = r.choice(["min", "max", "floordiv", "ceildiv", "truncdiv", "mod", "fmod", "fromend", "wrap32",
                       "half", "select", "eq"])  # fmt: skip
        a, b = r.randint(-3000, 3000), r.choice([-7, -3, -1, 1, 2, 5, 70000])
        if fn == "wrap32":
            a = r.randint(-(2**40), 2**40)
        return ([fn, a, b, r.randint(-5, 5)] if fn == "select" else [fn, a, b]), {}
    raise AssertionError(f"no argument drawer for {name}")


def _python(name: str) -> Callable[..., object]:
    return {**kernel_pieces(), **prologue.PIECES}[name]  # type: ignore[return-value]


def _plain(value: object) -> object:
    """A result as JSON holds it (tuples as lists)."""
    return json.loads(json.dumps(value))


PIECES = [name for name in PORTED if name not in ("_check_input", "_read_back", "_check_spelled", "_owe", "_room")]


def test_every_ported_piece_gives_the_python_pieces_results(tmp_path: Path) -> None:
    import inspect

    if NODE is None:  # scripts/dev-setup.sh installs Node.js where missing: under CI its absence is a broken setup
        (pytest.fail if os.environ.get("CI") else pytest.skip)("Node.js is not installed (scripts/dev-setup.sh)")

    cases: list[dict[str, object]] = []
    want: list[object] = []
    r = random.Random(20261203)
    for name in PIECES:
        names = [p.name for p in inspect.signature(_python(name)).parameters.values()]
        for _ in range(CASES):
            args, keywords = _draw(name, r)
            try:
                result = _python(name)(*args, **keywords)
            except (ValueError, ZeroDivisionError) as e:  # ValueError: Python's ShapeError and out-of-range refusals
                result = {"error": type(e).__name__}
            positional = list(args) + [None] * (len(names) - len(args))
            for key, value in keywords.items():
                positional[names.index(key)] = value
            while positional and positional[-1] is None:
                positional.pop()
            cases.append({"name": name, "args": _plain(positional)})
            want.append(_plain(result))
    module = tmp_path / "runtime.mjs"
    module.write_text(runtime_source() + f"\nexport {{ {', '.join(PIECES)} }};\n", encoding="utf-8")
    script = tmp_path / "run.mjs"
    script.write_text(
        'import * as rt from "./runtime.mjs";\n'
        'import { readFileSync } from "node:fs";\n'
        'const cases = JSON.parse(readFileSync(process.argv[2], "utf8"));\n'
        "const out = cases.map(({name, args}) => {\n"
        "  try { return rt[name](...args.map((a) => (a === null ? undefined : a))); }\n"
        "  catch (e) { return {error: e.name}; }\n"
        "});\n"
        "process.stdout.write(JSON.stringify(out));\n",
        encoding="utf-8",
    )
    (tmp_path / "cases.json").write_text(json.dumps(cases), encoding="utf-8")
    ran = subprocess.run([NODE, str(script), str(tmp_path / "cases.json")], capture_output=True, text=True, timeout=120)  # type: ignore[list-item]
    assert ran.returncode == 0, ran.stderr
    got = json.loads(ran.stdout)
    errors = {"ValueError", "ShapeError", "ZeroDivisionError"}
    for case, g, w in zip(cases, got, want, strict=True):
        if isinstance(w, dict) and "error" in w:
            assert isinstance(g, dict) and g.get("error") in errors, (case, g, w)
        else:
            assert g == w, case
