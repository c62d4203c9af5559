"""A generated module's `forward` prologue: its inputs checked, its symbols bound, its owed conditions.

Every piece here is a plain top-level function whose source a generated numpy module copies in
(`PIECES`; `loam/runtime/__init__.py`), reading only numpy, the builtins and other pieces.

- `_check_input`: one `forward` input checked (ndarray, dtype, rank, extents, symbol binding).
- `_read_back`, `_check_spelled`: a symbol read back from a spelled input axis (`past + 1`), and a
  spelled axis checked once every symbol is bound.
- `_owe`: an owed condition checked before any kernel (`shape_poly.owe`), naming the node relying on
  it and the values the inputs gave (`_gives`).
- `derived_extent`: the value of a derived extent symbol (`min(N, 1024)`), shared with the build
  (`loam.core.derived`).
- `_room`: forward's preallocated buffers checked against `loam.core.limits.MAX_ELEMENTS` before any is
  allocated (a ShapeError naming the input axes, never a MemoryError).
- `_keep`: forward's preallocated buffers given back to the module's pool.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from loam.runtime.errors import ShapeError


def _check_input(
    name: str,
    value: object,
    dtype: str,
    axes: tuple[tuple[str, int | str | None], ...],
    env: dict[str, int],
    src: dict[str, str],
) -> None:
    """Refuse `value` for input `name` unless it is an ndarray of `dtype` with the graph's extents.

    An extent is an int, a symbol's name, or None for a spelled extent (`past + 1`) that forward
    checks once every symbol is bound (`_check_spelled`).  The first axis carrying a symbol alone
    binds it in `env` (and records in `src` where it came from); every later one must agree.  No
    dtype is converted: a float64 array for an f32 input is most likely a caller's mistake, and a
    silent copy would hide it.
    """
    if not isinstance(value, np.ndarray):
        raise ShapeError(f"input '{name}' must be a numpy.ndarray, got {type(value).__name__}")
    want = np.dtype(dtype)
    if value.dtype != want:
        raise ShapeError(
            f"input '{name}' must have dtype {want.name}, got {value.dtype.name} "
            f"(convert it with .astype(np.{want.name}))"
        )
    if value.ndim != len(axes):
        axis_names = ", ".join(axis for axis, _ in axes)
        raise ShapeError(f"input '{name}' must have rank {len(axes)} [{axis_names}], got {value.ndim}")
    for i, ((axis, extent), got) in enumerate(zip(axes, value.shape, strict=True)):
        if extent is None:
            continue
        if isinstance(extent, str):
            if extent not in env:
                env[extent] = got
                src[extent] = f"{name} axis {i}"
            elif env[extent] != got:
                raise ShapeError(
                    f"input '{name}' axis {i} ({axis}) must be {extent} = {env[extent]} as {src[extent]} "
                    f"gives it, got {got}"
                )
        elif extent != got:
            raise ShapeError(f"input '{name}' axis {i} ({axis}) must be {extent}, got {got}")


def _gives(symbols: tuple[str, ...], env: dict[str, int], src: dict[str, str]) -> str:
    """Where each of `symbols` came from: `input_ids axis 1 gives sequence_length = 130, ...`."""
    return ", ".join(f"{src[s]} gives {s} = {env[s]}" for s in symbols)


def _read_back(
    name: str,
    axis: int,
    axis_name: str,
    got: int,
    symbol: str,
    spelling: str,
    coefficient: int,
    rest: int,
    env: dict[str, int],
    src: dict[str, str],
) -> None:
    """Bind `symbol` from axis `axis` of input `name`, whose length `got` is `coefficient * symbol + rest`.

    The spelling `spelling` is the axis's dim_param (`past + 1`, `2 * n`); the length must give a
    whole, non-negative value, or the input disagrees with it.
    """
    where = f"input '{name}' axis {axis} ({axis_name}) is {spelling}"
    if coefficient == 0:
        raise ShapeError(f"{where}, which reads no value of {symbol} here: its coefficient is 0")
    value, remainder = divmod(got - rest, coefficient)
    if remainder:
        raise ShapeError(f"{where}, got {got}, which gives no whole {symbol}")
    if value < 0:
        raise ShapeError(f"{where}, got {got}, which gives {symbol} = {value}; a length cannot be negative")
    env[symbol] = value
    src[symbol] = f"{name} axis {axis}"


def _check_spelled(
    name: str,
    axis: int,
    axis_name: str,
    got: int,
    spelling: str,
    want: int,
    symbols: tuple[str, ...],
    env: dict[str, int],
    src: dict[str, str],
) -> None:
    """Refuse axis `axis` of input `name` unless its length `got` is `want`, what its spelling gives."""
    if got != want:
        raise ShapeError(
            f"input '{name}' axis {axis} ({axis_name}) must be {spelling} = {want}, got {got} "
            f"({_gives(symbols, env, src)})"
        )


def _owe(
    holds: bool, condition: str, node: str, symbols: tuple[str, ...], env: dict[str, int], src: dict[str, str]
) -> None:
    """Refuse the inputs unless an owed condition `holds`: one the build could not prove for every input.

    The error names the condition, the node relying on it and the values the inputs gave.
    """
    if not holds:
        raise ShapeError(f"{condition} ({node}); {_gives(symbols, env, src)}")


def _room(
    shapes: tuple[tuple[int, ...], ...], symbols: tuple[str, ...], env: dict[str, int], src: dict[str, str], limit: int
) -> None:
    """Refuse the inputs before forward allocates unless each of its buffers' `shapes` holds at most
    `limit` elements (`loam.core.limits.MAX_ELEMENTS`): a huge extent (a broadcast view costs nothing)
    is a ShapeError naming the input axes that gave it, not a MemoryError."""
    for shape in shapes:
        count = 1
        for extent in shape:
            count *= extent
        if count > limit:
            raise ShapeError(
                f"the inputs make a buffer of extents {list(shape)} ({count} elements), past the {limit} one "
                f"tensor may hold ({_gives(symbols, env, src)})"
            )


def _keep(pool: dict, key: tuple, buffers: tuple) -> None:
    """Give forward's preallocated buffers back to `pool` for the next call with the extents `key`.

    A call takes its buffers out of the pool (`pool.pop`) and puts them back when it returns, so two
    threads never share one set (the second allocates its own); the four latest bindings are kept.
    Each step is one dict operation (atomic under the GIL); two threads trimming at once may find
    the oldest entry gone already, and then try the next.
    """
    pool[key] = buffers
    while len(pool) > 4:
        try:
            del pool[next(iter(pool))]
        except (KeyError, RuntimeError, StopIteration):  # another thread trimmed it first
            continue


def derived_extent(function: str, *args: int) -> int:
    """The value of a derived extent symbol (`loam.core.derived`): ONNX's shape arithmetic on ints.

    `min(N, 1024)` is `derived_extent("min", N, 1024)`.  Python ints do not wrap, so every operation is
    exact; the build refuses a value that some input could carry past int64.
    """
    if function == "min":
        return min(args[0], args[1])
    if function == "max":
        return max(args[0], args[1])
    if function in ("floordiv", "ceildiv", "truncdiv", "mod", "fmod"):
        a, b = args
        if b == 0:
            raise ShapeError(f"{function}({a}, {b}) divides by zero")
        if function == "floordiv":
            return a // b
        if function == "ceildiv":
            return -((-a) // b)
        if function == "truncdiv":
            q = abs(a) // abs(b)
            return q if (a >= 0) == (b > 0) else -q
        if function == "mod":
            return a % b
        r = abs(a) % abs(b)
        return r if a >= 0 else -r
    if function == "fromend":
        return args[0] + args[1] if args[0] < 0 else args[0]
    if function == "wrap32":
        return (args[0] + 2**31) % 2**32 - 2**31
    if function == "half":
        return int(np.float16(args[0]))
    if function == "select":
        return args[1] if args[0] else args[2]
    if function == "eq":
        return int(args[0] == args[1])
    if function == "lt":
        return int(args[0] < args[1])
    raise ValueError(f"unknown derived operation {function!r}")


PIECES: dict[str, Callable[..., object]] = {
    "_check_input": _check_input,
    "_gives": _gives,
    "_read_back": _read_back,
    "_check_spelled": _check_spelled,
    "_owe": _owe,
    "derived_extent": derived_extent,
    "_keep": _keep,
    "_room": _room,
}
