"""The compiled packed products (`loam/runtime/kernels/compiled.py`) against the numpy kernel, their oracle.

numba is a dev dependency, so here the compiled kernels run; a generated module in a process where
numba cannot be imported must still load, run on numpy alone and give the same numbers.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loam
from loam.driver.draft import draft_layout
from loam.driver.options import Options
from loam.runtime.kernels.compiled import (
    _cohort_rows,
    _CompiledKernels,
    _halves_q4,
    _rows_nbits,
    _rows_q4,
    _rows_q8,
    _tiles_q4,
    _tiles_q8,
    _widen_nbits,
    jitted,
    set_compiled,
)
from loam.runtime.kernels.quantized import kernel_matmul_nbits, kernel_matmul_packed, nbits_codes
from tests.backends.test_packed_weights import _blocks, _model
from tests.checkpoints.gguf_writer import Tensor, quantize, write_gguf

RNG = np.random.default_rng(11)
ENCODINGS = ("Q4_0", "Q4_1", "Q8_0")


@pytest.fixture
def numpy_only() -> Iterator[None]:
    """Products by the numpy kernel for the test's duration, the compiled ones again after."""
    set_compiled(False)
    yield
    set_compiled(True)


def _numpy_product(x: np.ndarray, blocks: np.ndarray) -> np.ndarray:
    before = set_compiled(False)
    try:
        return kernel_matmul_packed(x, blocks, transposed=1)
    finally:
        set_compiled(before)


def _assert_within_rounding(encoding: str, rows: int, k: int, n: int, seed: int = 11) -> None:
    """A compiled product of `rows` rows by an [n, k] weight equals the numpy kernel's and the exact
    product over the widened weight, each within 8 k float32 epsilons of the sum of |terms|."""
    rng = np.random.default_rng(seed)
    blocks, widened = _blocks((rng.standard_normal((n, k)) * 3).astype(np.float32), encoding)
    x = rng.standard_normal((rows, k)).astype(np.float32)
    got = kernel_matmul_packed(x, blocks, transposed=1)
    assert _CompiledKernels.get() is not None and id(blocks) in _CompiledKernels.forms  # the compiled path ran
    want = _numpy_product(x, blocks)
    # Each differs from the exact sum by a few float32 roundings of the sum of |terms|.
    bound = 8 * k * np.finfo(np.float32).eps * (np.abs(x).astype(np.float64) @ np.abs(widened.T).astype(np.float64))
    assert got.dtype == np.float32 and got.shape == (rows, n)
    assert np.all(np.abs(got.astype(np.float64) - want) <= bound)
    assert np.all(np.abs(got.astype(np.float64) - x.astype(np.float64) @ widened.T.astype(np.float64)) <= bound)


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize(
    ("rows", "k"), [(1, 32), (2, 96), (3, 64), (5, 576), (7, 64), (8, 64), (16, 128), (17, 96), (33, 96), (64, 64)]
)
def test_a_compiled_product_is_the_numpy_kernels_within_float32_rounding(encoding: str, rows: int, k: int) -> None:
    _assert_within_rounding(encoding, rows, k, 41)


@settings(max_examples=40, deadline=None)
@given(
    encoding=st.sampled_from(ENCODINGS),
    rows=st.integers(1, 70),
    blocks=st.integers(1, 12),
    n=st.integers(1, 70),
    seed=st.integers(0, 2**16),
)
def test_a_compiled_product_within_float32_rounding_on_chosen_shapes(
    encoding: str, rows: int, blocks: int, n: int, seed: int
) -> None:
    """Any rows (the row kernels' few, the cohort kernel's tiles of 4 with a ragged last tile) by any N
    (groups of 4 of W's rows with a ragged last group) and K of whole blocks."""
    _assert_within_rounding(encoding, rows, 32 * blocks, n, seed)


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("rows", [0, 3, 17])
def test_empty_and_strided_rows_give_the_numpy_kernels_product(encoding: str, rows: int) -> None:
    """No rows give an empty product; rows that are a strided, transposed view (a slice of a wider
    activation) give what their contiguous copy gives, within the same float32 bound."""
    blocks, widened = _blocks(RNG.standard_normal((37, 96)).astype(np.float32), encoding)
    wide = RNG.standard_normal((96 * 2, rows)).astype(np.float32)
    x = wide[::2].T  # [rows, 96], neither C- nor F-contiguous
    got = kernel_matmul_packed(x, blocks, transposed=1)
    assert got.shape == (rows, 37)
    want = _numpy_product(np.ascontiguousarray(x), blocks)
    bound = 8 * 96 * np.finfo(np.float32).eps * (np.abs(x).astype(np.float64) @ np.abs(widened.T).astype(np.float64))
    assert np.all(np.abs(got.astype(np.float64) - want) <= bound)


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("rows", [9, 17, 64])
def test_a_cohort_split_over_threads_is_the_one_thread_product_bit_for_bit(encoding: str, rows: int) -> None:
    """W's rows spread over several threads (runs of whole groups of 4, the last ragged) give every element
    the sum one call gives, in the same order: the outputs are equal, not only close."""
    blocks, _ = _blocks(RNG.standard_normal((262, 96)).astype(np.float32), encoding)
    x = RNG.standard_normal((rows, 96)).astype(np.float32)
    before = _CompiledKernels.threads
    try:
        _CompiledKernels.threads = 1
        alone = kernel_matmul_packed(x, blocks, transposed=1)
        _CompiledKernels.threads = 3
        split = kernel_matmul_packed(x, blocks, transposed=1)
    finally:
        _CompiledKernels.threads = before
    assert _CompiledKernels.pool is not None  # the split ran
    np.testing.assert_array_equal(split, alone)


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("rows", [2, 5])
def test_nan_and_infinity_in_x_come_out_where_the_kernels_meaning_puts_them(encoding: str, rows: int) -> None:
    """The row kernels (a decode step's rows) sum as the numpy kernel does, d * (q . x) + m * sum(x), and
    put NaN and infinity where it does; the cohort kernel (more rows) sums the widened weights' products,
    as x @ W^T over W widened does, and puts them there (an infinite x times a weight d * q + m of one
    sign is infinite, where d * inf + m * inf may be NaN)."""
    blocks, widened = _blocks(RNG.standard_normal((16, 64)).astype(np.float32), encoding)
    x = RNG.standard_normal((rows, 64)).astype(np.float32)
    x[0, 5] = np.nan
    x[1, 40] = np.inf
    got = kernel_matmul_packed(x, blocks, transposed=1)
    if rows <= _CompiledKernels.tile_rows:
        want = _numpy_product(x, blocks)
    else:
        with np.errstate(invalid="ignore"):
            want = x.astype(np.float64) @ widened.T.astype(np.float64)
    assert np.isnan(got[0]).all() and np.isfinite(got[rows - 1]).all() == (rows > 2)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    np.testing.assert_array_equal(np.sign(got[1]), np.sign(want[1]))


def test_the_row_kernels_source_computes_the_same_in_plain_python() -> None:
    """The function numba compiles is ordinary Python: run as it is, it gives the compiled numbers."""
    blocks, _ = _blocks(RNG.standard_normal((6, 64)).astype(np.float32), "Q4_1")
    x = RNG.standard_normal((2, 64)).astype(np.float32)
    out = np.empty((2, 5), np.float32)
    _rows_q4(*_CompiledKernels.form(blocks[:5]), x, out)  # an odd count of rows: the last in a pair alone
    np.testing.assert_allclose(out, kernel_matmul_packed(x, blocks[:5], transposed=1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_the_tile_kernels_source_computes_the_same_in_plain_python(encoding: str) -> None:
    """3 to `tile_rows` rows of x take `_tiles_q4` or `_tiles_q8`: as plain Python, with neither W's rows nor
    x's a multiple of its tiles of 4, it gives the compiled numbers."""
    blocks, _ = _blocks(RNG.standard_normal((7, 64)).astype(np.float32), encoding)
    x = RNG.standard_normal((5, 64)).astype(np.float32)
    assert _CompiledKernels.row_kernel_rows < x.shape[0] <= _CompiledKernels.tile_rows
    out = np.empty((5, 7), np.float32)
    (_tiles_q8 if encoding == "Q8_0" else _tiles_q4)(*_CompiledKernels.form(blocks), x, out)
    np.testing.assert_allclose(out, kernel_matmul_packed(x, blocks, transposed=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out, _numpy_product(x, blocks), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_the_cohort_kernels_source_computes_the_same_in_plain_python(encoding: str) -> None:
    """A cohort's rows (more than `tile_rows`) take `_cohort_rows`: as plain Python, with W's row count not a
    multiple of its groups of 4 and x's not of its tiles, it gives the compiled numbers."""
    blocks, _ = _blocks(RNG.standard_normal((7, 64)).astype(np.float32), encoding)
    x = RNG.standard_normal((9, 64)).astype(np.float32)
    assert x.shape[0] > _CompiledKernels.tile_rows
    form = _CompiledKernels.form(blocks)
    q8 = encoding == "Q8_0"
    out = np.empty((9, 7), np.float32)
    _cohort_rows(*form, *((form[1],) if q8 else ()), x, out, q8)
    np.testing.assert_allclose(out, kernel_matmul_packed(x, blocks, transposed=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out, _numpy_product(x, blocks), rtol=1e-5, atol=1e-5)


def test_set_compiled_turns_the_path_off_and_on(numpy_only: None) -> None:
    blocks, _ = _blocks(RNG.standard_normal((8, 32)).astype(np.float32), "Q8_0")
    x = RNG.standard_normal((1, 32)).astype(np.float32)
    assert _CompiledKernels.enabled is False and _CompiledKernels.get() is None
    off = kernel_matmul_packed(x, blocks, transposed=1)
    assert id(blocks) not in _CompiledKernels.forms
    assert set_compiled(True) is False  # compiled then, not later:
    assert any("_rows_q4" in made for made in _CompiledKernels.made.values())
    assert set_compiled(True) is True
    on = kernel_matmul_packed(x, blocks, transposed=1)
    assert id(blocks) in _CompiledKernels.forms
    np.testing.assert_allclose(on, off, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="enabled must be True or False, not 1"):
        set_compiled(1)  # type: ignore[arg-type]


def test_jitted_compiles_a_family_once_for_each_choice_of_fast_math() -> None:
    """`jitted` gives the same compiled functions again for the same functions and the same choice (a
    family compiles once a process), others for the other choice, and None while the path is off; without
    fast-math the compiled function keeps the source's order and roundings: the Python function's bits."""
    fast = jitted((_rows_q8,))
    assert fast is not None and set(fast) == {"_rows_q8"} and jitted((_rows_q8,), fastmath=True) is fast
    exact = jitted((_rows_q8,), fastmath=False)
    assert exact is not None and exact is not fast and jitted((_rows_q8,), fastmath=False) is exact
    before = set_compiled(False)
    try:
        assert jitted((_rows_q8,)) is None and jitted((_rows_q8,), fastmath=False) is None
    finally:
        set_compiled(before)
    assert jitted((_rows_q8,)) is fast
    q = RNG.integers(-128, 128, (5, 64)).astype(np.int8)
    d = RNG.random((5, 2)).astype(np.float32)
    x = RNG.standard_normal((3, 64)).astype(np.float32)
    want, got = np.empty((3, 5), np.float32), np.empty((3, 5), np.float32)
    _rows_q8(q, d, x, want)  # the plain Python function, each step rounded to float32 as numpy rounds it
    exact["_rows_q8"](q, d, x, got)
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("rows", [1, 3, 8])
def test_the_q4_kernels_halves_of_x_are_its_blocks_halves_and_sums(rows: int) -> None:
    """`_halves_q4`, as Python and as the compiled helper the Q4 kernels call: each block's first and last 16
    elements exactly, and each block's sum within float32 rounding of the sum of |x| (also of a strided x)."""
    x = RNG.standard_normal((rows, 2 * 96)).astype(np.float32)[:, ::2]  # [rows, 96], strided
    blocks = x.reshape(rows, 3, 2, 16).astype(np.float64)
    kernels = _CompiledKernels.get()
    assert kernels is not None
    for halves in (_halves_q4, kernels["_halves_q4"]):
        xl, xh, xs = halves(x)
        assert xl.tobytes() == np.ascontiguousarray(x.reshape(rows, 3, 2, 16)[:, :, 0]).reshape(rows, 48).tobytes()
        assert xh.tobytes() == np.ascontiguousarray(x.reshape(rows, 3, 2, 16)[:, :, 1]).reshape(rows, 48).tobytes()
        bound = 32 * np.finfo(np.float32).eps * np.abs(blocks).sum(axis=(2, 3))
        assert np.all(np.abs(xs - blocks.sum(axis=(2, 3))) <= bound)


def test_a_weights_unpacked_form_goes_when_the_weight_does() -> None:
    blocks, _ = _blocks(RNG.standard_normal((8, 32)).astype(np.float32), "Q4_0")
    key = id(blocks)
    kernel_matmul_packed(np.ones((1, 32), np.float32), blocks, transposed=1)
    assert key in _CompiledKernels.forms
    del blocks
    gc.collect()
    assert key not in _CompiledKernels.forms


def _packed_module(folder: Path) -> tuple[str, Path]:
    """A packed model's generated source and its GGUF checkpoint."""
    path, weights = _model(folder)
    kinds = {"embed": "Q8_0", "proj": "Q4_1", "head": "Q4_0"}
    tensors = {name: Tensor(kinds[name], value.shape, quantize(value, kinds[name])) for name, value in weights.items()}
    gguf = write_gguf(folder / "weights.gguf", tensors)
    built = loam.build(path, options=draft_layout(path).options(Options(checkpoints=(gguf,))))
    return built.source, gguf


RUN_WITHOUT_NUMBA = r"""
import importlib.util, json, sys
sys.modules["numba"] = None  # `import numba` raises ImportError, as where it is not installed
import numpy as np
spec = importlib.util.spec_from_file_location("packed_module", sys.argv[1])
module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
weights = module.Weights.load_file(sys.argv[2])
y = module.forward(weights, np.array([[3, 17]], np.int64))
print(json.dumps({"y": y.tolist(), "numba_found": module._CompiledKernels.numba_found,
                  "compiled": bool(module._CompiledKernels.made),
                  "imported": sorted({m.split(".")[0] for m, v in sys.modules.items() if v is not None}
                                     - set(sys.stdlib_module_names))}))
"""


def test_a_module_runs_on_numpy_alone_where_numba_is_absent(tmp_path: Path) -> None:
    source, gguf = _packed_module(tmp_path)
    module_path = tmp_path / "packed_module.py"
    module_path.write_text(source, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-c", RUN_WITHOUT_NUMBA, str(module_path), str(gguf)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["numba_found"] is False and not report["compiled"]  # numba was asked for, nothing compiled
    # Beyond the standard library (and site's own hooks, `_...`), only numpy came in.
    assert [name for name in report["imported"] if not name.startswith("_")] == ["numpy"]
    # The same module with numba, in this process: the same numbers within float32 rounding.
    namespace: dict[str, object] = {"__name__": "packed_with_numba"}
    exec(compile(source, str(module_path), "exec"), namespace)  # the module Loam just printed
    compiled_kernels = namespace["_CompiledKernels"]
    assert callable(namespace["set_compiled"])  # a module with packed products lets its user turn them off
    y = namespace["forward"](namespace["Weights"].load_file(str(gguf)), np.array([[3, 17]], np.int64))  # type: ignore[operator]
    assert compiled_kernels.made  # type: ignore[attr-defined]
    np.testing.assert_allclose(y, np.array(report["y"], np.float32), rtol=1e-5, atol=1e-4)


def _nbits_operands(bits: int, block: int, k: int, n: int, zero: str | None) -> tuple[list[np.ndarray], int]:
    """Random MatMulNBits operands after A (B, scales, zero points as `zero` says) and their `present`."""
    nb = -(-k // block)
    given = [RNG.integers(0, 256, (n, nb, block * bits // 8), dtype=np.uint8), RNG.random((n, nb)).astype(np.float32)]
    if zero == "packed":
        given.append(RNG.integers(0, 256, (n, -(-nb * bits // 8)), dtype=np.uint8))
    elif zero == "float":
        given.append(RNG.integers(0, 1 << bits, (n, nb)).astype(np.float32))
    return given, int(zero is not None)


@pytest.mark.parametrize(("bits", "block"), [(4, 32), (4, 16), (8, 32), (2, 16), (4, 128)])
@pytest.mark.parametrize("zero", [None, "packed", "float"])
@pytest.mark.parametrize(("rows", "k"), [(1, 64), (2, 100), (5, 96), (20, 160)])
@pytest.mark.parametrize("n", [37, 1])
def test_compiled_and_numpy_matmul_nbits_agree(
    bits: int, block: int, zero: str | None, rows: int, k: int, n: int
) -> None:
    """kernel.matmul_nbits by numba's row kernel (1-2 rows) or widening kernel (more), and by numpy alone; N = 1
    too, whose per-block zero points are one row (the compiled kernels took that row for one shared zero point)."""
    given, present = _nbits_operands(bits, block, k, n, zero)
    a = RNG.standard_normal((rows, k)).astype(np.float32)
    options = {"k": k, "n": n, "bits": bits, "block_size": block, "present": present}
    assert _CompiledKernels.get() is not None
    got = kernel_matmul_nbits(a, *given, **options)
    before = set_compiled(False)
    try:
        want = kernel_matmul_nbits(a, *given, **options)
    finally:
        set_compiled(before)
    # W widened in float64 as the operator defines it: both within float32 rounding of the exact product.
    q = nbits_codes(given[0].reshape(n, -1), bits).reshape(n, -1, block).astype(np.float64)
    zp = 1 << (bits - 1) if zero is None else given[2].astype(np.float64)
    if zero == "packed":
        zp = nbits_codes(given[2], bits)[:, : q.shape[1]].astype(np.float64)
    w = ((q - (zp if zero is None else zp[:, :, None])) * given[1][:, :, None]).reshape(n, -1)[:, :k]
    bound = 8 * k * np.finfo(np.float32).eps * (np.abs(a).astype(np.float64) @ np.abs(w).T + 1)
    assert got.dtype == want.dtype == np.float32 and got.shape == want.shape == (rows, n)
    assert np.all(np.abs(got - want) <= bound)
    assert np.all(np.abs(got - a.astype(np.float64) @ w.T) <= bound)


def test_the_nbits_row_kernels_source_computes_the_same_in_plain_python() -> None:
    """The n-bit kernels numba compiles are ordinary Python: run as they are, they give the compiled numbers."""
    given, _ = _nbits_operands(4, 16, 64, 5, "float")
    packed, s, z = given[0].reshape(5, -1), given[1], given[2]
    x = RNG.standard_normal((2, 64)).astype(np.float32)
    out, widened = np.empty((2, 5), np.float32), np.empty((5, 64), np.float32)
    _rows_nbits(packed, s, z, x, out, 4, 16)
    _widen_nbits(packed, s, z, 4, 16, widened)
    want = kernel_matmul_nbits(x, *given, k=64, n=5, bits=4, block_size=16, present=1)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(x @ widened.T, want, rtol=1e-5, atol=1e-5)
