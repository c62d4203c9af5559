"""The runtime a generated numpy module inlines: plain functions whose source is copied in.

`backends/numpy_module.py` copies only the pieces a program uses (`pieces_for`, `source_of`), so
the generated file imports nothing but numpy and carries no separate runtime package to drift out
of date.  Every piece here is ordinary, tested Python that reads only numpy, the builtins and the
other pieces it lists in `DEPENDS`; nothing in this file outside those pieces is copied.

Pieces:

- `ShapeError`, `LoadError`: the module's own errors (it cannot import Loam's).
- `_parse_json`: a strict JSON reader (the safetensors header), since `json` is not numpy.
- `_read_safetensors`: header length, header JSON, dtypes and offsets, refusing malformed bytes.
- `_take_weight`: one checkpoint tensor checked against the graph (name, dtype, rank, extents).
- `_check_input`: one `forward` input checked (ndarray, dtype, rank, extents, symbol binding).
- `_read_back`, `_check_spelled`: a symbol read back from a spelled input axis (`past + 1`), and a
  spelled axis checked once every symbol is bound.
- `_owe`: an owed condition checked before any kernel (`shape_poly.owe`), naming the node relying on
  it and the values the inputs gave (`_gives`).
- `_derived`: the value of a derived extent symbol (`min(N, 1024)`), shared with the build.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable

import numpy as np

from loam import dtypes
from loam.backends import numpy_kernels


class ShapeError(ValueError):
    """`forward` was given an input that disagrees with the graph: kind, dtype, rank or an extent."""


class LoadError(ValueError):
    """`Weights.load` was given bytes that are not a safetensors checkpoint matching the graph."""


def _parse_json(text: str) -> object:
    """Parse strict JSON (RFC 8259) text; ValueError names the offset of the first fault."""

    def fail(pos: int, what: str) -> ValueError:
        return ValueError(f"{what} at offset {pos}")

    def skip(pos: int) -> int:
        while pos < len(text) and text[pos] in " \t\n\r":
            pos += 1
        return pos

    def string(pos: int) -> tuple[str, int]:
        out: list[str] = []
        pos += 1  # the opening quote
        while True:
            if pos >= len(text):
                raise fail(pos, "unterminated string")
            ch = text[pos]
            if ch == '"':
                return "".join(out), pos + 1
            if ch == "\\":
                esc = text[pos + 1 : pos + 2]
                simple = '"\\/bfnrt'
                if esc and esc in simple:
                    out.append('"\\/\b\f\n\r\t'[simple.index(esc)])
                    pos += 2
                elif esc == "u":
                    digits = text[pos + 2 : pos + 6]
                    if len(digits) != 4 or any(c not in "0123456789abcdefABCDEF" for c in digits):
                        raise fail(pos, "bad \\u escape")
                    code = int(digits, 16)
                    pos += 6
                    low = text[pos : pos + 6]
                    if 0xD800 <= code < 0xDC00 and low[:2] == "\\u":  # a surrogate pair
                        tail = int(low[2:], 16) if all(c in "0123456789abcdefABCDEF" for c in low[2:]) else 0
                        if 0xDC00 <= tail < 0xE000:
                            code = 0x10000 + ((code - 0xD800) << 10) + (tail - 0xDC00)
                            pos += 6
                    out.append(chr(code))
                else:
                    raise fail(pos, "bad escape")
            elif ch < " ":
                raise fail(pos, "control character in string")
            else:
                out.append(ch)
                pos += 1

    def number(pos: int) -> tuple[int | float, int]:
        start = pos
        if text[pos : pos + 1] == "-":
            pos += 1
        digits_start = pos
        while pos < len(text) and text[pos].isdigit() and text[pos].isascii():
            pos += 1
        if pos == digits_start or (text[digits_start] == "0" and pos - digits_start > 1):
            raise fail(start, "bad number")
        is_float = False
        if text[pos : pos + 1] == ".":
            is_float = True
            pos += 1
            frac = pos
            while pos < len(text) and text[pos] in "0123456789":
                pos += 1
            if pos == frac:
                raise fail(start, "bad number")
        if text[pos : pos + 1] in ("e", "E"):
            is_float = True
            pos += 1
            if text[pos : pos + 1] in ("+", "-"):
                pos += 1
            exp = pos
            while pos < len(text) and text[pos] in "0123456789":
                pos += 1
            if pos == exp:
                raise fail(start, "bad number")
        literal = text[start:pos]
        return (float(literal) if is_float else int(literal)), pos

    def value(pos: int, depth: int) -> tuple[object, int]:
        if depth > 64:
            raise fail(pos, "nesting too deep")
        pos = skip(pos)
        ch = text[pos : pos + 1]
        if ch == "{":
            obj: dict[str, object] = {}
            pos = skip(pos + 1)
            if text[pos : pos + 1] == "}":
                return obj, pos + 1
            while True:
                pos = skip(pos)
                if text[pos : pos + 1] != '"':
                    raise fail(pos, "expected a string key")
                key, pos = string(pos)
                pos = skip(pos)
                if text[pos : pos + 1] != ":":
                    raise fail(pos, "expected ':'")
                if key in obj:
                    raise fail(pos, f"duplicate key {key!r}")
                obj[key], pos = value(pos + 1, depth + 1)
                pos = skip(pos)
                if text[pos : pos + 1] == ",":
                    pos += 1
                elif text[pos : pos + 1] == "}":
                    return obj, pos + 1
                else:
                    raise fail(pos, "expected ',' or '}'")
        if ch == "[":
            arr: list[object] = []
            pos = skip(pos + 1)
            if text[pos : pos + 1] == "]":
                return arr, pos + 1
            while True:
                item, pos = value(pos, depth + 1)
                arr.append(item)
                pos = skip(pos)
                if text[pos : pos + 1] == ",":
                    pos += 1
                elif text[pos : pos + 1] == "]":
                    return arr, pos + 1
                else:
                    raise fail(pos, "expected ',' or ']'")
        if ch == '"':
            return string(pos)
        for word, result in (("true", True), ("false", False), ("null", None)):
            if text.startswith(word, pos):
                return result, pos + len(word)
        if ch == "-" or ch.isdigit():
            return number(pos)
        raise fail(pos, "expected a value")

    result, end = value(0, 0)
    end = skip(end)
    if end != len(text):
        raise fail(end, "extra data")
    return result


def _read_safetensors(data: bytes) -> dict[str, tuple[str, tuple[int, ...], memoryview]]:
    """The tensors of a safetensors checkpoint: name -> (dtype name, shape, raw little-endian bytes).

    The layout is an 8-byte little-endian header length, that many bytes of JSON mapping each
    tensor name to its dtype, shape and `data_offsets` (begin, end) into the payload that follows.
    Anything else is refused with a LoadError: nothing past the header is trusted until checked.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise LoadError(f"a checkpoint is bytes, got {type(data).__name__}")
    view = memoryview(data).cast("B")
    if len(view) < 8:
        raise LoadError(f"checkpoint is {len(view)} bytes long, too short for its 8-byte header length")
    header_len = int.from_bytes(view[:8], "little")
    if header_len > len(view) - 8:
        raise LoadError(
            f"checkpoint header length {header_len} runs past the end of the data ({len(view) - 8} bytes follow)"
        )
    try:
        header = _parse_json(bytes(view[8 : 8 + header_len]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise LoadError(f"checkpoint header is not valid JSON: {e}") from None
    if not isinstance(header, dict):
        raise LoadError("checkpoint header is not a JSON object")
    payload = view[8 + header_len :]
    tensors: dict[str, tuple[str, tuple[int, ...], memoryview]] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(entry, dict):
            raise LoadError(f"tensor '{name}': header entry is not an object")
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if dtype not in _SAFETENSORS_DTYPES:
            raise LoadError(f"tensor '{name}' has unknown dtype {dtype!r}")
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            raise LoadError(f"tensor '{name}': shape {shape!r} is not a list of extents")
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(type(o) is int for o in offsets)
            or not 0 <= offsets[0] <= offsets[1] <= len(payload)
        ):
            raise LoadError(
                f"tensor '{name}': data_offsets {offsets!r} lie outside the payload of {len(payload)} bytes"
            )
        tensors[name] = (dtype, tuple(shape), payload[offsets[0] : offsets[1]])
    return tensors


def _convertible(source: np.dtype, target: np.dtype) -> bool:
    """Whether checkpoint dtype `source` supplies graph dtype `target`: same kind, without loss."""
    kinds = {"f": "float", "i": "int", "u": "int", "b": "bool"}
    return kinds.get(source.kind) == kinds.get(target.kind) and bool(np.can_cast(source, target, "safe"))


def _take_weight(
    tensors: dict[str, tuple[str, tuple[int, ...], memoryview]],
    name: str,
    dtype: str,
    axes: tuple[tuple[str, int | None], ...],
) -> np.ndarray:
    """Checkpoint tensor `name` as an array of `dtype`, checked against the graph's `axes`.

    `axes` holds (axis name, extent) per axis, None where the graph leaves the extent open.  A
    dtype converts only without loss and within its kind (F16 to f32, I32 to i64): an integer
    tensor given for a float weight, or a wider float for a narrower one, is refused.
    """
    entry = tensors.get(name)
    if entry is None:
        raise LoadError(f"tensor '{name}' is missing from the checkpoint")
    st_dtype, shape, raw = entry
    source_name = _SAFETENSORS_DTYPES[st_dtype]
    target = np.dtype(dtype)
    if source_name is None:
        raise LoadError(f"tensor '{name}' is {st_dtype} in the checkpoint, which this module cannot read")
    source = np.dtype(source_name).newbyteorder("<")
    if not _convertible(source, target):
        raise LoadError(
            f"tensor '{name}' is {st_dtype} in the checkpoint; the graph reads {target.name}, "
            f"which {st_dtype} does not convert to without loss"
        )
    if len(shape) != len(axes):
        raise LoadError(f"tensor '{name}' has rank {len(axes)} in the graph, {len(shape)} in the checkpoint")
    for i, ((axis, extent), got) in enumerate(zip(axes, shape, strict=True)):
        if extent is not None and extent != got:
            raise LoadError(f"tensor '{name}' axis {i} ({axis}) is {extent} in the graph, {got} in the checkpoint")
    count = 1
    for extent in shape:
        count *= extent
    if len(raw) != count * source.itemsize:
        raise LoadError(
            f"tensor '{name}' holds {len(raw)} bytes; shape {list(shape)} of {st_dtype} needs {count * source.itemsize}"
        )
    # astype copies into native order and owned memory, so the checkpoint bytes can be dropped.
    return np.frombuffer(raw, dtype=source).reshape(shape).astype(target)


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


def _derived(function: str, *args: int) -> int:
    """The value of a derived extent symbol (`loam.derived`): ONNX's shape arithmetic on ints.

    `min(N, 1024)` is `_derived("min", N, 1024)`.  Python ints do not wrap, so every operation is
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


_SAFETENSORS_DTYPES: dict[str, str | None] = {}  # filled below; the emitter prints it as a literal


def safetensors_dtypes() -> dict[str, str | None]:
    """safetensors dtype name -> numpy dtype name, None where plain numpy has no such dtype (BF16)."""
    table: dict[str, str | None] = {}
    for st_name, loam_name in dtypes.SAFETENSORS_NAMES.items():
        np_dtype = dtypes.by_name(loam_name).numpy
        # Extension dtypes (ml_dtypes) are not plain numpy, which the module is limited to.
        plain = np_dtype is not None and np_dtype.type.__module__ == "numpy"
        table[st_name] = np_dtype.name if plain and np_dtype is not None else None
    return table


_SAFETENSORS_DTYPES.update(safetensors_dtypes())

PIECES: dict[str, object] = {
    "ShapeError": ShapeError,
    "LoadError": LoadError,
    "_parse_json": _parse_json,
    "_read_safetensors": _read_safetensors,
    "_convertible": _convertible,
    "_take_weight": _take_weight,
    "_check_input": _check_input,
    "_gives": _gives,
    "_read_back": _read_back,
    "_check_spelled": _check_spelled,
    "_owe": _owe,
    "_derived": _derived,
}
"""Every piece that may be copied, in the order the module declares them."""

PIECES.update(numpy_kernels.PIECES)

DEPENDS: dict[str, tuple[str, ...]] = {
    "_read_safetensors": ("LoadError", "_parse_json", "_SAFETENSORS_DTYPES"),
    "_take_weight": ("LoadError", "_SAFETENSORS_DTYPES", "_convertible"),
    "_check_input": ("ShapeError",),
    "_gives": (),
    "_read_back": ("ShapeError",),
    "_check_spelled": ("ShapeError", "_gives"),
    "_owe": ("ShapeError", "_gives"),
    "_derived": ("ShapeError",),
}
"""The other pieces (and `_SAFETENSORS_DTYPES`, a generated table) each piece reads."""

DEPENDS.update(numpy_kernels.DEPENDS)


def pieces_for(names: Iterable[str]) -> list[str]:
    """`names` and everything they read, in declaration order (`_SAFETENSORS_DTYPES` first)."""
    wanted: set[str] = set()
    stack = list(names)
    while stack:
        name = stack.pop()
        if name not in wanted:
            wanted.add(name)
            stack.extend(DEPENDS.get(name, ()))
    order = ["_SAFETENSORS_DTYPES", *PIECES]
    return [n for n in order if n in wanted]


def source_of(name: str) -> str:
    """The source text the module declares for piece `name`."""
    if name == "_SAFETENSORS_DTYPES":
        rows = "".join(f"    {k!r}: {v!r},\n" for k, v in _SAFETENSORS_DTYPES.items())
        head = "# safetensors dtype -> numpy dtype (None: not plain numpy)\n_SAFETENSORS_DTYPES = {\n"
        return head + rows + "}\n"
    return inspect.getsource(PIECES[name])  # type: ignore[arg-type]
