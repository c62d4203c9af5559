"""A long elementwise expression written into a buffer: by blocks of rows in numpy, or one compiled loop.

The printer evaluates a zip of three or more computing steps written into a buffer a block of rows
at a time (`_by_rows`), one numpy pass per step, each a call: MiniLM's bias + exact GELU, x * 0.5 *
(1 + erf((x + b) / sqrt 2)), is 29 passes (erf's rational fit alone is 22) over 1.5M elements a
layer.  The expression's steps are data (`#kernel.expr`); from them this module writes the source
of one loop computing every step of an element in registers, and numba compiles it, once per
expression and operand kinds in a process.  Where numba is not installed the module imports nothing
more and `zip_rows` calls `_by_rows` with the numpy expression function, which is also the compiled
loop's oracle (tests/runtime/test_zip_compiled.py).

The loop computes each step as the numpy function does, in float32, in the same order, without
fastmath (no reassociation, no fused multiply-add): the products, sums and quotients are IEEE
float32 either way, and `erf` is `_erf`'s float32 rational fit, its coefficients in its order.
So the compiled loop gives the numpy function's bits, and the tests hold it to that (0 ulps).

- `_by_rows(fn, out, *args)`: the numpy expression function `fn` over a cache-sized block of out's
  rows at a time (an expression the compiled loop does not take, or every one without numba).
- `STEP_OPS`: the step operators the loop computes (all float32); an expression with another step,
  another element type or a cast stays in numpy (the printer checks this at build time).
- `_zip_source(steps, kinds)`: the loop's source for an expression's steps (`("operand", i)`,
  `("const", value)`, `(op, arg)`, `(op, lhs, rhs)`) and its operands' kinds: `out` (the result
  buffer itself, read before it is written), `full` (out's extents, as [rows, width]), `row` (one
  value per column, as a bias [width]) or `scalar` (one value).
- `_CompiledZips`: the loops compiled so far by (steps, kinds), made on first use (about 0.3 s each),
  whether zips use them, and from how many elements (smaller zips, a decode step's, stay in numpy).
- `zip_rows(fn, steps, out, *args)`: what the numpy module calls where it would call
  `_by_rows(fn, out, *args)`.
- `set_compiled_zips(enabled)`: turns the compiled zips off (or back on) for the process;
  `set_compiled(False)` turns every compiled kernel off, these included.

The loop runs on its caller's thread and releases the GIL.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from loam.runtime.kernels.compiled import compiled_path, jitted

STEP_OPS = frozenset({"add", "sub", "mul", "div", "neg", "abs", "erf"})
"""The step operators `_zip_source` writes (besides operands and float32 constants)."""


def _by_rows(fn: object, out: np.ndarray, *args: np.ndarray) -> np.ndarray:
    """fn(*args, out=out), an expression function, evaluated a block of out's rows at a time.

    A chain of whole-array ufunc calls streams every temporary through memory once per step; over
    rows of 64K elements (256 KiB of float32) the temporaries stay in cache (MiniLM's bias-GELU
    epilogue: 12.7 ms whole, 5.0 ms by rows).  Operands shaped like `out` are cut as it is; an
    operand that repeats along out's leading axes (a bias [N] or [1, 1, N]) goes whole to each
    block.  Anything else, or an `out` too small to gain, is one call.  Every element is computed by
    the same steps either way: the numbers are the same.
    """
    width = out.shape[-1] if out.ndim >= 2 else 0
    chunk = 65536  # 4 x this is the printer's ROWS_MIN_ELEMENTS (backends/numpy_kernel_printer.py)
    if not width or out.size < 4 * chunk or not out.flags.c_contiguous:
        return fn(*args, out=out)  # type: ignore[operator]  # an expression function
    rows = out.size // width
    cut: list[tuple[bool, np.ndarray]] = []
    for a in args:
        if a.shape == out.shape and a.flags.c_contiguous:
            cut.append((True, a.reshape(rows, width)))
        elif a.ndim == 0 or (a.shape[-1] in (1, width) and all(e == 1 for e in a.shape[:-1])):
            cut.append((False, a.reshape(a.shape[-1:])))
        else:
            return fn(*args, out=out)  # type: ignore[operator]  # an expression function
    flat = out.reshape(rows, width)
    step = max(1, chunk // width)
    for i in range(0, rows, step):
        fn(*[a[i : i + step] if sliced else a for sliced, a in cut], out=flat[i : i + step])  # type: ignore[operator]  # an expression function
    return out


def _zip_source(steps: tuple, kinds: tuple) -> str:
    """The source of `_zip_kernel(out, *operands)`: out [rows, width] float32 = the expression `steps`
    of the operands of `kinds` (an `out` operand is read from out and not passed), element by element
    in float32, each step as the numpy expression function computes it."""
    binary = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
    params = [f"a{i}" for i, kind in enumerate(kinds) if kind != "out"]
    head = ["    rows, width = out.shape"]
    per_row = ["        o = out[i]"]
    body: list[str] = []
    for i, kind in enumerate(kinds):
        if kind == "scalar":
            head.append(f"    r{i} = a{i}[0]")
        elif kind == "row":
            head.append(f"    r{i} = a{i}")
        elif kind == "full":
            per_row.append(f"        r{i} = a{i}[i]")
        elif kind != "out":
            raise ValueError(f"_zip_source: unknown operand kind {kind!r}")
    for n, step in enumerate(steps):
        op, s = step[0], f"s{n}"
        if op == "operand":
            kind = kinds[step[1]]
            read = {"out": "o[j]", "full": f"r{step[1]}[j]", "row": f"r{step[1]}[j]"}.get(kind, f"r{step[1]}")
            body.append(f"{s} = {read}")
        elif op == "const":
            body.append(f"{s} = np.float32({float(step[1])!r})")
        elif op in binary:
            body.append(f"{s} = s{step[1]} {binary[op]} s{step[2]}")
        elif op == "neg":
            body.append(f"{s} = -s{step[1]}")
        elif op == "abs":
            body.append(f"{s} = abs(s{step[1]})")
        elif op == "erf":
            # `_erf`'s float32 branch step by step: x clamped to [-4, 4] (NaN stays NaN: both tests fail),
            # then x P(x^2) / Q(x^2) by Horner's rule, the product by x last.
            x = f"s{step[1]}"
            body.append(f"z = np.float32(-4.0) if {x} < np.float32(-4.0) else {x}")
            body.append("z = np.float32(4.0) if z > np.float32(4.0) else z")
            body.append("z2 = z * z")
            body.append("p = z2 * np.float32(-2.72614225801306e-10)")
            for c in (2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05, -7.34990630326855e-04,
                      -2.95459980854025e-03):  # fmt: skip
                body.append(f"p = (p + np.float32({c!r})) * z2")
            body.append("p = p + np.float32(-1.60960333262415e-02)")
            body.append("q = z2 * np.float32(-1.45660718464996e-05)")
            for c in (-2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03):
                body.append(f"q = (q + np.float32({c!r})) * z2")
            body.append("q = q + np.float32(-1.42647390514189e-02)")
            body.append(f"{s} = p / q * z")
        else:
            raise ValueError(f"_zip_source: no compiled step for {op!r}")
    body.append(f"o[j] = s{len(steps) - 1}")
    lines = [f"def _zip_kernel({', '.join(['out', *params])}):", *head, "    for i in range(rows):", *per_row]
    lines.append("        for j in range(width):")
    lines.extend(f"            {line}" for line in body)
    return "\n".join(lines) + "\n"


class _CompiledZips:
    """The process's compiled zip loops by (steps, kinds) (None until numba has been imported, and where
    it is not installed), and whether zips use them.  A generated module evaluates these annotations (it
    has no `from __future__ import annotations`): builtins only."""

    kernels: dict | None = None
    enabled: bool = True  # this family's own switch (bench.epilogues times the module with it off and on)
    # Elements from which a zip runs compiled: below, the call's checks cost more than the numpy passes save
    # (a decode step's zips of one token, [1, 1, 576] to [1, 1, 1536], ran 1 to 2% slower compiled).
    elements: int = 8192

    @classmethod
    def get(cls) -> dict | None:
        """The compiled loops made so far, by (steps, kinds); None where they or the process's compiled
        path (`set_compiled`) are off, or numba is not installed."""
        if not cls.enabled or not compiled_path():
            return None
        if cls.kernels is None:
            cls.kernels = {}
        return cls.kernels

    @classmethod
    def compile(cls, steps: tuple, kinds: tuple) -> object | None:
        """The loop for `steps` over operands of `kinds`, compiled now and kept (None where the compiled path
        is off)."""
        namespace: dict = {"np": np}
        exec(_zip_source(steps, kinds), namespace)  # the loop's source, written from the expression's steps
        # No fastmath: every step rounds as numpy's does, in the same order (the numpy function's bits).
        made = jitted((namespace["_zip_kernel"],), fastmath=False)
        if made is None:
            return None
        kernel = made["_zip_kernel"]
        if cls.kernels is not None:
            cls.kernels[_zip_key(steps, kinds)] = kernel
        return kernel


def _zip_key(steps: tuple, kinds: tuple) -> tuple:
    """What a compiled loop is kept by: its steps with each constant by its repr, since -0.0 == 0.0 (and they
    hash alike) would give a loop made for one the other's sign, and its operands' kinds."""
    return tuple(("const", repr(step[1])) if step[0] == "const" else step for step in steps), kinds


def zip_rows(fn: object, steps: tuple, out: np.ndarray, *args: np.ndarray) -> np.ndarray:
    """out = fn(*args) for the float32 expression function `fn` whose steps are `steps`: the compiled
    loop where numba is and the operands allow it (float32; each of out's extents, a row along its last
    axis, or one value; none overlapping out but out itself), else `_by_rows(fn, out, *args)`, its oracle."""
    if out.size < _CompiledZips.elements:
        return _by_rows(fn, out, *args)
    kernels = _CompiledZips.get()
    if kernels is None or out.dtype != np.float32 or not out.ndim or not out.size or not out.flags.c_contiguous:
        return _by_rows(fn, out, *args)
    width = out.shape[-1]
    kinds: list[str] = []
    operands: list[np.ndarray] = []
    for a in args:
        if not isinstance(a, np.ndarray) or a.dtype != np.float32:
            return _by_rows(fn, out, *args)
        if a is out:
            kinds.append("out")  # read where it is written, element by element, before the write
            continue
        if np.may_share_memory(a, out):  # another view of out's memory: numpy's order of passes decides
            return _by_rows(fn, out, *args)
        if a.shape == out.shape:
            kinds.append("full")
            operands.append(a.reshape(-1, width))  # a view where a's layout has one, else a copy to read
        elif a.size == 1:
            kinds.append("scalar")
            operands.append(a.reshape(1))
        elif a.shape[-1] == width and all(e == 1 for e in a.shape[:-1]):
            kinds.append("row")
            operands.append(a.reshape(width))
        else:
            return _by_rows(fn, out, *args)
    key = _zip_key(steps, tuple(kinds))
    kernel = kernels.get(key)
    if kernel is None:
        kernel = _CompiledZips.compile(steps, key[1])
        if kernel is None:  # the compiled path was turned off meanwhile
            return _by_rows(fn, out, *args)
    kernel(out.reshape(-1, width), *operands)  # type: ignore[operator]  # a numba dispatcher
    return out


def set_compiled_zips(enabled: bool) -> bool:
    """Let long zips use the compiled loops (numba, where installed) from now on, in the whole process, or
    not; returns whether they were on before.  Without numba the numpy functions run either way."""
    if not isinstance(enabled, bool):
        raise ValueError(f"set_compiled_zips: enabled must be True or False, not {enabled!r}")
    before, _CompiledZips.enabled = _CompiledZips.enabled, enabled
    return before


PIECES: dict[str, Callable[..., object]] = {
    "_by_rows": _by_rows,
    "_zip_source": _zip_source,
    "_CompiledZips": _CompiledZips,
    "_zip_key": _zip_key,
    "zip_rows": zip_rows,
    "set_compiled_zips": set_compiled_zips,
}
