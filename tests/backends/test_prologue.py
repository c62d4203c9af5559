"""forward's prologue in the numpy module: binding symbols from spelled input axes, checking every
input axis against its spelling, computing derived symbols, and the owed conditions' checks.

The programs here are written as kernel IR by hand, so each piece of the prologue is tested on its
own; tests/test_dim_params.py builds whole ONNX models and compares them with onnxruntime.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from loam.core.errors import UnsupportedError
from loam.runtime import prologue
from tests.backends.printing import emit, forward_of, load, t

RNG = np.random.default_rng(0)


def f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


# A decoder-like boundary: the past keys carry `past` alone, the mask is `past + 1` long, and `y` is
# `2*n` long, so forward reads n back from it.  The owed conditions read an input symbol, a derived
# one (min(n, 4)), and two symbols that must be equal.
K, M, Y = t("f32", "B: 1, Past: past, D: 4"), t("f32", "B: 1, Total: past + 1"), t("f32", "Y: 2*n")
C = t("i64", "Two: 3")
OWING = f"""
kernel.program "forward" (%k : {K}, %m : {M}, %y : {Y}) names ["past_key", "mask", "y"] attributes {{model = "owe"}} {{
  shape_poly.owe past + 1 <= 128 for "Slice node '/attn/Slice_3'"
  shape_poly.owe min(n, 4) + past <= 16 for "Reshape node '/Reshape'"
  shape_poly.owe n == past for "Add node '/Add'"
  %c = kernel.constant [#shape_poly.extent<min(n, 4)>, #shape_poly.extent<2*n - past>,
       #shape_poly.extent<floordiv(past + 1, 2)>] {{node = "/Shape"}} : {C}
  kernel.return %c names ["s"] : {C}
}}
"""


def run_owing(mod: ModuleType, past: int, total: int, y: int) -> np.ndarray:
    return mod.forward(mod.Weights(), f32(1, past, 4), f32(1, total), f32(y))


@pytest.mark.parametrize("past", [0, 3, 5])
def test_symbols_bound_read_back_and_derived_values_computed(tmp_path: Path, past: int) -> None:
    mod = load(OWING, tmp_path)
    s = run_owing(mod, past, past + 1, 2 * past)
    assert s.dtype == np.int64 and s.shape == (3,)
    assert s.tolist() == [min(past, 4), 2 * past - past, (past + 1) // 2]


def test_spelled_axis_that_disagrees_names_input_spelling_and_source(tmp_path: Path) -> None:
    mod = load(OWING, tmp_path)
    with pytest.raises(mod.ShapeError, match=r"input 'mask' axis 1 \(Total\) must be past \+ 1 = 4, got 5") as err:
        run_owing(mod, 3, 5, 6)
    assert "past_key axis 1 gives past = 3" in str(err.value)


def test_read_back_length_that_gives_no_whole_symbol(tmp_path: Path) -> None:
    mod = load(OWING, tmp_path)
    with pytest.raises(mod.ShapeError, match=r"input 'y' axis 0 \(Y\) is 2\*n, got 5, which gives no whole n"):
        run_owing(mod, 2, 3, 5)


def test_owed_condition_names_condition_node_and_input_values(tmp_path: Path) -> None:
    mod = load(OWING, tmp_path)
    with pytest.raises(mod.ShapeError) as err:
        run_owing(mod, 200, 201, 400)
    assert str(err.value) == ("past + 1 <= 128 (Slice node '/attn/Slice_3'); past_key axis 1 gives past = 200")
    with pytest.raises(mod.ShapeError) as err:
        run_owing(mod, 14, 15, 28)
    assert str(err.value) == (
        "min(n, 4) + past <= 16 (Reshape node '/Reshape'); past_key axis 1 gives past = 14, y axis 0 gives n = 14"
    )


def test_owed_equality(tmp_path: Path) -> None:
    mod = load(OWING, tmp_path)
    with pytest.raises(mod.ShapeError) as err:
        run_owing(mod, 2, 3, 6)
    assert str(err.value) == "n == past (Add node '/Add'); past_key axis 1 gives past = 2, y axis 0 gives n = 3"


def test_prologue_lines_read_in_order(tmp_path: Path) -> None:
    source = emit(OWING)
    body = forward_of(source)
    order = [
        "_check_input('past_key'",
        "_check_input('mask'",
        "_check_input('y'",
        "_read_back('y', 0, 'Y', y.shape[0], 'n', '2*n', 2, 0, _env, _src)",
        "_check_spelled('mask', 1, 'Total', mask.shape[1], 'past + 1', _env['past'] + 1,",
        "_owe(_env['past'] + 1 <= 128, 'past + 1 <= 128',",
        "_env['min(n, 4)'] = derived_extent('min', _env['n'], 4)",
        "_owe(_env['min(n, 4)'] + _env['past'] <= 16,",
        "_owe(_env['n'] == _env['past'],",
        "_env['floordiv(past + 1, 2)'] = derived_extent('floordiv', _env['past'] + 1, 2)",
        "s = np.array([_env['min(n, 4)'], 2*_env['n'] - _env['past'], _env['floordiv(past + 1, 2)']], "
        "dtype=np.int64).reshape((3,))  # /Shape",
    ]
    positions = [body.index(line) for line in order]
    assert positions == sorted(positions)


def test_negative_read_back_stops_the_run(tmp_path: Path) -> None:
    x = t("f32", "X: n - 2")
    text = f"""
    kernel.program "forward" (%x : {x}) names ["x"] {{
      kernel.return %x names ["y"] : {x}
    }}
    """
    mod = load(text, tmp_path)
    assert mod.forward(mod.Weights(), f32(0)).shape == (0,)  # n - 2 = 0: n = 2
    y = t("f32", "Y: m + 2")
    text = f"""
    kernel.program "forward" (%y : {y}) names ["y"] {{
      kernel.return %y names ["z"] : {y}
    }}
    """
    mod = load(text, tmp_path, "gen2")
    assert mod.forward(mod.Weights(), f32(2)).shape == (2,)
    with pytest.raises(mod.ShapeError, match=r"input 'y' axis 0 \(Y\) is m \+ 2, got 1, which gives m = -1"):
        mod.forward(mod.Weights(), f32(1))


def test_symbol_read_back_with_a_symbolic_coefficient(tmp_path: Path) -> None:
    # batch is carried alone by x, so y's `batch*seq` reads seq back once batch is bound.
    x, y = t("f32", "B: batch, D: 2"), t("f32", "(B S): batch*seq")
    text = f"""
    kernel.program "forward" (%x : {x}, %y : {y}) names ["x", "y"] {{
      kernel.return %y names ["z"] : {y}
    }}
    """
    mod = load(text, tmp_path)
    assert mod.forward(mod.Weights(), f32(3, 2), f32(12)).shape == (12,)
    with pytest.raises(mod.ShapeError, match="gives no whole seq"):
        mod.forward(mod.Weights(), f32(3, 2), f32(10))
    with pytest.raises(mod.ShapeError, match="reads no value of seq here: its coefficient is 0"):
        mod.forward(mod.Weights(), f32(0, 2), f32(0))


def test_derived_symbols_in_shapes_and_kernel_parameters(tmp_path: Path) -> None:
    # A regroup to a derived extent: the reshape target reads `_env['min(N, 4)']`.
    x = t("f32", "A: min(N, 4), B: 3")
    flat = t("f32", "(A B): 3*min(N, 4)")
    n = t("f32", "N: N")
    text = f"""
    kernel.program "forward" (%n : {n}, %x : {x}) names ["n", "x"] {{
      %0 = kernel.regroup %x {{node = "flat"}} : {x} -> {flat}
      kernel.return %0 names ["y"] : {flat}
    }}
    """
    with pytest.raises(UnsupportedError, match=r"input 'x' axis A has extent min\(N, 4\)"):
        # An input extent is a spelling over input names only; a derived one is never an input's.
        emit(text)
    text = f"""
    kernel.program "forward" (%n : {n}) names ["n"] {{
      %c = kernel.constant [#shape_poly.extent<min(N, 4)>, #shape_poly.extent<3>] {{node = "shape"}}
           : {t("i64", "Two: 2")}
      kernel.return %c names ["s"] : {t("i64", "Two: 2")}
    }}
    """
    mod = load(text, tmp_path)
    assert mod.forward(mod.Weights(), f32(7)).tolist() == [4, 3]
    assert mod.forward(mod.Weights(), f32(2)).tolist() == [2, 3]


def test_unbound_symbol_is_refused() -> None:
    x = t("f32", "X: N")
    text = f"""
    kernel.program "forward" (%x : {x}) names ["x"] {{
      %c = kernel.constant [#shape_poly.extent<M + 1>] {{node = "shape"}} : {t("i64", "One: 1")}
      kernel.return %c names ["s"] : {t("i64", "One: 1")}
    }}
    """
    with pytest.raises(UnsupportedError, match="extent symbol 'M' is bound by no input axis"):
        emit(text)


def test_runtime_pieces_directly() -> None:
    env: dict[str, int] = {}
    src: dict[str, str] = {}
    prologue._check_input("a", np.zeros((2, 3), np.float32), "float32", (("A", "N"), ("B", None)), env, src)
    assert env == {"N": 2} and src == {"N": "a axis 0"}
    prologue._read_back("b", 1, "T", 7, "p", "p + 1", 1, 1, env, src)
    assert env["p"] == 6 and src["p"] == "b axis 1"
    with pytest.raises(prologue.ShapeError, match=r"as a axis 0 gives it, got 5"):
        prologue._check_input("c", np.zeros(5, np.float32), "float32", (("A", "N"),), env, src)
    prologue._owe(True, "N <= 4", "Slice node 's'", ("N",), env, src)
    with pytest.raises(prologue.ShapeError) as err:
        prologue._owe(False, "N + p <= 4", "Slice node 's'", ("N", "p"), env, src)
    assert str(err.value) == "N + p <= 4 (Slice node 's'); a axis 0 gives N = 2, b axis 1 gives p = 6"


A, B, C2 = t("f32", "B: n, D: 4"), t("f32", "B: n, E: m, E2: m"), t("i64", "Two: 2")
SYMBOLS = f"""
kernel.program "forward" (%a : {A}, %b : {B}) names ["a", "b"] attributes {{model = "bind"}} {{
  %c = kernel.constant [#shape_poly.extent<n>, #shape_poly.extent<m>] {{node = "/Shape"}} : {C2}
  kernel.return %c names ["s"] : {C2}
}}
"""


def test_well_formed_inputs_bind_without_the_checking_piece(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inputs of the right class, dtype, rank and extents bind their symbols in forward's own comparisons;
    `_check_input` runs only to word a refusal (or for an ndarray subclass), with the same outcome."""
    mod = load(SYMBOLS, tmp_path)
    a, b = f32(3, 4), f32(3, 5, 5)
    assert mod.forward(mod.Weights(), a, b).tolist() == [3, 5]
    calls: list[str] = []
    checking = mod._check_input

    def counted(name: str, *args: object) -> None:
        calls.append(name)
        checking(name, *args)

    monkeypatch.setattr(mod, "_check_input", counted)
    assert mod.forward(mod.Weights(), a, b).tolist() == [3, 5]
    assert calls == []
    # A subclass of ndarray, a second axis that disagrees with the first, an earlier input's symbol
    # that disagrees, a wrong fixed extent and a wrong dtype: each goes to the piece, which binds or words it.
    assert mod.forward(mod.Weights(), a.view(np.matrix), b).tolist() == [3, 5]
    for bad, message in [
        ((a, f32(3, 5, 6)), r"input 'b' axis 2 \(E2\) must be m = 5 as b axis 1 gives it, got 6"),
        ((a, f32(2, 5, 5)), r"input 'b' axis 0 \(B\) must be n = 3 as a axis 0 gives it, got 2"),
        ((f32(3, 5), b), r"input 'a' axis 1 \(D\) must be 4, got 5"),
        ((a.astype(np.float64), b), r"input 'a' must have dtype float32, got float64"),
    ]:
        with pytest.raises(mod.ShapeError, match=message):
            mod.forward(mod.Weights(), *bad)
    assert calls == ["a", "b", "b", "a", "a"]
