"""`kernel.zip` (and `kernel.cast`, and a product's epilogue) as WGSL: an `Expr` per element.

`expr_lines` prints an `Expr`'s steps as WGSL `let`s, each in the device type of the step's Loam
element type (`step_types`), with the meaning the numpy backend gives it: halves are computed in
f32 and rounded back to their precision after every step whose type is a half; integer division
truncates; `mod` takes the divisor's sign; comparisons give bool (u32 0 or 1).  Where WGSL's
builtin differs from numpy's (tanh overflowing, pow of a negative base, no erf or isnan), the
helper functions below compute numpy's value.

The zip kernel runs one invocation per result element.  Its params: the element count, the
result's extents, then per operand that does not have the result's extents its strides over the
result's axes (0 where it broadcasts).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence

from loam.backends.wgsl_kernels.common import FLAT, device_type, f32_bits, kernel, narrow
from loam.core.errors import UnsupportedError
from loam.core.poly import Poly
from loam.dialects.expr import Binary, Const, Convert, Expr, Operand, Select, Unary, step_types

HELPERS = """
fn nan_() -> f32 { return bits_f32(0x7fc00000u); }
fn tanh_(x: f32) -> f32 {
  // Near 0 a device tanh may lose relative precision (a quotient of exponentials): its series keeps it.
  let x2 = x * x;
  let near = x * (1.0 - x2 * (0.33333334 - x2 * (0.13333334 - x2 * 0.053968254)));
  return select(select(tanh(clamp(x, -15.0, 15.0)), near, abs(x) < 0.125), x, is_nan(x));
}
fn max_(a: f32, b: f32) -> f32 { return select(max(a, b), nan_(), is_nan(a) || is_nan(b)); }
fn min_(a: f32, b: f32) -> f32 { return select(min(a, b), nan_(), is_nan(a) || is_nan(b)); }
fn relu_(x: f32) -> f32 { return select(max(x, 0.0), x, is_nan(x)); }
fn sign_(x: f32) -> f32 { return select(sign(x), x, is_nan(x)); }
fn log1p_(y: f32) -> f32 {
  // WGSL log is only absolutely accurate (2^-21) near 1: a series keeps the relative precision of small y.
  if (abs(y) < 0.01) { return y * (1.0 - y * (0.5 - y * (0.33333334 - y * 0.25))); }
  let u = 1.0 + y;
  if (u == 1.0) { return y; }
  return select(log(u) * y / (u - 1.0), log(u), is_inf(u));
}
fn outside_(x: f32) -> bool { return is_nan(x) || abs(x) > 1.0; }
fn asin_(x: f32) -> f32 { return select(atan2(x, sqrt(max(0.0, 1.0 - x * x))), nan_(), outside_(x)); }
fn acos_(x: f32) -> f32 { return select(atan2(sqrt(max(0.0, 1.0 - x * x)), x), nan_(), outside_(x)); }
fn atan_(x: f32) -> f32 { return select(atan(x), x, is_nan(x)); }
fn sigmoid_(x: f32) -> f32 {
  let e = exp(-abs(x));
  return select(e / (1.0 + e), 1.0 / (1.0 + e), x >= 0.0);
}
fn softplus_(x: f32) -> f32 { return max(x, 0.0) + log1p_(exp(-abs(x))); }
fn erf_(x: f32) -> f32 {
  let z = abs(x);
  let t = 1.0 / (1.0 + 0.5 * z);
  let p = t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806 + t * (0.27886807
          + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))));
  let far = 1.0 - t * exp(-z * z - 1.26551223 + p);
  let z2 = z * z;
  let near = z * 1.1283791670955126 * (1.0 - z2 / 3.0 + z2 * z2 / 10.0 - z2 * z2 * z2 / 42.0
             + z2 * z2 * z2 * z2 / 216.0 - z2 * z2 * z2 * z2 * z2 / 1320.0);
  let y = select(far, near, z < 0.5);
  return select(sign(x) * y, x, is_nan(x));
}
fn pow_(a: f32, b: f32) -> f32 {
  if (b == 0.0) { return 1.0; }
  let m = pow(abs(a), b);
  if (a >= 0.0 || is_nan(a)) { return select(m, pow(a, b), is_nan(a)); }
  if (floor(b) != b) { return nan_(); }
  let odd = (abs(b) < 16777216.0) && (floor(b * 0.5) * 2.0 != b);
  return select(m, -m, odd);
}
fn fmod_f(a: f32, b: f32) -> f32 {
  if (is_inf(b) && !is_inf(a) && !is_nan(a)) { return a; }
  return a - trunc(a / b) * b;
}
fn mod_f(a: f32, b: f32) -> f32 {
  let r = fmod_f(a, b);
  return select(r, r + b, r != 0.0 && ((r < 0.0) != (b < 0.0)));
}
fn div_i(a: i32, b: i32) -> i32 { if (b == 0) { return 0; } return a / b; }
fn fmod_i(a: i32, b: i32) -> i32 { if (b == 0) { return 0; } return a - (a / b) * b; }
fn mod_i(a: i32, b: i32) -> i32 {
  let r = fmod_i(a, b);
  return select(r, r + b, r != 0 && ((r < 0) != (b < 0)));
}
fn pow_i(a: i32, b: i32) -> i32 {
  if (b < 0) {
    if (a == 1) { return 1; }
    if (a == -1) { return select(1, -1, (b & 1) != 0); }
    return select(0, i32(-2147483647 - 1), a == 0);
  }
  var r = 1;
  var base = a;
  var e = b;
  loop {
    if ((e & 1) != 0) { r = r * base; }
    e = e >> 1u;
    if (e == 0) { break; }
    base = base * base;
  }
  return r;
}
fn pow_if(a: i32, b: f32) -> i32 {
  if (floor(b) == b && abs(b) < 2147483648.0) { return pow_i(a, i32(b)); }
  let r = pow_(f32(a), b);
  if (is_nan(r) || !(abs(r) < 2147483648.0)) { return i32(-2147483647 - 1); }
  let n = round(r);
  return select(i32(r), i32(n), abs(r - n) <= 1e-6 * max(1.0, abs(n)));
}
fn shl_i(a: i32, b: i32, width: i32) -> i32 {
  if (b < 0 || b >= width) { return 0; }
  return a << u32(b);
}
fn shr_i(a: i32, b: i32, width: i32) -> i32 {
  if (b < 0 || b >= width) { return select(0, -1, a < 0); }
  return a >> u32(b);
}
"""

_FLOAT_UNARY = {
    "neg": "-({0})", "abs": "abs({0})", "relu": "relu_({0})", "sigmoid": "sigmoid_({0})",
    "tanh": "tanh_({0})", "exp": "exp({0})", "log": "log({0})", "sqrt": "sqrt({0})",
    "reciprocal": "(1.0 / ({0}))", "floor": "floor({0})", "ceil": "ceil({0})", "round": "round({0})",
    "sin": "sin({0})", "cos": "cos({0})", "tan": "tan({0})", "asin": "asin_({0})", "acos": "acos_({0})",
    "atan": "atan_({0})", "sinh": "sinh({0})", "cosh": "cosh({0})", "asinh": "asinh({0})",
    "acosh": "acosh({0})", "atanh": "atanh({0})", "erf": "erf_({0})", "sign": "sign_({0})",
    "softplus": "softplus_({0})", "softsign": "(({0}) / (1.0 + abs({0})))", "identity": "{0}",
    "isnan": "select(0u, 1u, is_nan({0}))", "isinf": "select(0u, 1u, is_inf({0}))",
}  # fmt: skip
_INT_UNARY = {
    "neg": "-({0})", "abs": "abs({0})", "relu": "max({0}, 0)", "sign": "sign({0})", "identity": "{0}",
    "bitnot": "(~({0}))",
}  # fmt: skip
_FLOAT_BINARY = {
    "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "({0} / {1})",
    "pow": "pow_({0}, {1})", "max": "max_({0}, {1})", "min": "min_({0}, {1})", "mod": "mod_f({0}, {1})",
    "fmod": "fmod_f({0}, {1})",
}  # fmt: skip
_INT_BINARY = {
    "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})", "div": "div_i({0}, {1})",
    "max": "max({0}, {1})", "min": "min({0}, {1})", "mod": "mod_i({0}, {1})", "fmod": "fmod_i({0}, {1})",
    "pow": "pow_i({0}, {1})", "shl": "shl_i({0}, {1}, {2})", "shr": "shr_i({0}, {1}, {2})",
    "bitand": "({0} & {1})", "bitor": "({0} | {1})", "bitxor": "({0} ^ {1})",
}  # fmt: skip
_SHIFT_WIDTH = {"i8": 8, "ui8": 8, "i16": 16, "ui16": 16, "i32": 32}
"""The widths `shl`/`shr` shift within (an i64 held in i32 would lose its high bits: refused)."""
_COMPARE = {"equal": "==", "less": "<", "less_equal": "<=", "greater": ">", "greater_equal": ">="}
_LOGIC = {"and": "&", "or": "|", "xor": "^"}
_NARROW_INTS = {"i8": 8, "ui8": 8, "i16": 16, "ui16": 16}


def literal(value: float, elem: str) -> str:
    """Constant `value` of element type `elem` as a WGSL literal of its device type (an f32 by its bits
    where it is NaN or infinite, which WGSL has no literal for)."""
    dtype = device_type(elem)
    if dtype == "u32":
        return "1u" if value else "0u"
    if dtype == "i32":
        if not -(2**31) <= value < 2**31:
            raise UnsupportedError(f"constant {value} of type {elem} does not fit WGSL's i32")
        return f"i32({int(value)})"
    single = struct.unpack("<f", struct.pack("<f", value))[0]  # the f32 the numpy module's constant holds
    if math.isnan(single) or math.isinf(single):
        return f32_bits(struct.unpack("<I", struct.pack("<f", single))[0])
    return f"{single!r}f"


def _wrap_int(elem: str, value: str) -> str:
    """An i32 holding a narrower integer type, wrapped to that type's range as numpy's astype does."""
    bits = _NARROW_INTS.get(elem)
    if bits is None:
        return value
    if elem.startswith("u"):
        return f"(({value}) & {(1 << bits) - 1})"
    return f"((({value}) << {32 - bits}u) >> {32 - bits}u)"


def _convert(value: str, source: str, target: str) -> str:
    src, dst = device_type(source), device_type(target)
    if dst == "u32":  # to bool
        zero = {"f32": "0.0", "i32": "0", "u32": "0u"}[src]
        return f"select(0u, 1u, ({value}) != {zero})"
    if dst == "f32":
        converted = value if src == "f32" else f"f32({value})"
        return narrow(target, converted)
    # to an integer type: floats truncate toward zero (numpy's astype; out-of-range values are undefined)
    converted = value if src == "i32" else f"i32({value})"
    return _wrap_int(target, converted)


_I64_GROWING = frozenset({"neg", "abs", "add", "sub", "mul", "div", "pow", "shl"})
"""Integer steps whose i64 result can leave the range of i32 operands (the device computes i64 in i32)."""


class UnboundedI64(UnsupportedError):
    """An i64 step the device cannot compute without risking a wrap (the module computes it on the host)."""


_I64_CHECKED = {
    "add": "(({0} ^ {2}) & ({1} ^ {2})) < 0",
    "sub": "(({0} ^ {1}) & ({0} ^ {2})) < 0",
    "mul": "{0} != 0 && ({2} / {0} != {1} || ({0} == -1 && {1} == i32(-2147483647 - 1)))",
    "neg": "{0} == i32(-2147483647 - 1)",
    "abs": "{0} == i32(-2147483647 - 1)",
}
"""i64 steps the device computes in i32 with a check: WGSL wrapping `{2}` = `{0} op {1}` left the i32
range exactly when the condition holds.  Then the shader raises the wrap flag (`WRAP_FLAG`), and the
runtime refuses the forward's results (a DeviceError, never a wrapped number)."""

WRAP_FLAG = "_loam_flags[1] = 1u;"
"""What a shader runs when a checked i64 step wrapped (`wgsl_runtime._FLAGS`: element 1 is the wrap flag)."""


def _refuse_unbounded_i64(step: object, types: Sequence[tuple[object, str]]) -> None:
    """Refuse an i64 step whose result could leave the i32 range WGSL computes it in and that the
    shader cannot check (`_I64_CHECKED`): a wrap there would be a silent wrong number where numpy's
    i64 keeps the value."""
    what = None
    if isinstance(step, (Unary, Binary)) and step.op in _I64_GROWING and step.op not in _I64_CHECKED:
        what = f"'{step.op}'"
    elif isinstance(step, Convert) and device_type(types[step.arg][1]) == "f32":
        what = f"a cast from {types[step.arg][1]}"
    if what is not None:
        raise UnboundedI64(
            f"i64 {what}: WGSL computes i64 in i32, and this result could leave the i32 range that numpy's "
            "i64 keeps; the WGSL backend runs no i64 arithmetic it cannot bound"
        )


def expr_lines(
    expr: Expr, operands: Sequence[str], shapes: Sequence[tuple[Poly, ...]], elems: Sequence[str], result: tuple
) -> tuple[list[str], str]:
    """WGSL `let`s computing `expr` from the WGSL expressions `operands` (one per operand), and the
    name of the result.  `shapes`/`elems` are the operands' extents and Loam element types; `result`
    the zip's (extents, element type), used to type each step."""
    types = step_types(expr, shapes, elems)
    names: list[str] = []
    lines: list[str] = []
    for i, step in enumerate(expr.steps):
        elem = types[i][1]
        dev = device_type(elem)
        if elem == "i64":
            _refuse_unbounded_i64(step, types)
        if isinstance(step, Operand):
            names.append(operands[step.index])
            continue
        if isinstance(step, Const):
            rhs = literal(step.value, step.elem)
        elif isinstance(step, Unary):
            arg_elem = types[step.arg][1]
            table = _FLOAT_UNARY if device_type(arg_elem) == "f32" else _INT_UNARY
            if step.op == "not":
                rhs = f"(1u - {names[step.arg]})"
            elif step.op in table:
                rhs = narrow(elem, table[step.op].format(names[step.arg]))
                rhs = _wrap_int(elem, rhs) if dev == "i32" else rhs
            else:
                raise UnsupportedError(f"WGSL has no form for '{step.op}' on {arg_elem}")
        elif isinstance(step, Binary):
            a, b = names[step.lhs], names[step.rhs]
            arg_dev = device_type(types[step.lhs][1])
            right = expr.steps[step.rhs]
            if step.op in _COMPARE:
                rhs = f"select(0u, 1u, {a} {_COMPARE[step.op]} {b})"
            elif step.op in _LOGIC:
                rhs = f"({a} {_LOGIC[step.op]} {b})"
            elif step.op == "pow" and isinstance(right, Const) and arg_dev == "f32":
                n = right.value
                rhs = {2.0: f"({a} * {a})", 3.0: f"({a} * {a} * {a})", 1.0: a, 0.5: f"sqrt({a})"}.get(
                    n, f"pow_({a}, {b})"
                )
                rhs = narrow(elem, rhs)
            elif arg_dev == "f32" and step.op in _FLOAT_BINARY:
                if device_type(types[step.rhs][1]) != "f32":  # Pow's exponent may be an integer
                    b = f"f32({b})"
                rhs = narrow(elem, _FLOAT_BINARY[step.op].format(a, b))
            elif arg_dev == "i32" and step.op == "pow":
                # numpy's integer pow: f64 pow cast back; an exact integer exponent squares exactly
                if device_type(types[step.rhs][1]) == "f32":
                    rhs = _wrap_int(elem, f"pow_if({a}, {b})")
                else:
                    rhs = _wrap_int(elem, _INT_BINARY["pow"].format(a, f"i32({b})"))
            elif arg_dev == "i32" and step.op in ("shl", "shr"):
                width = _SHIFT_WIDTH.get(types[step.lhs][1])
                if width is None or device_type(types[step.rhs][1]) != "i32":
                    raise UnsupportedError(
                        f"WGSL has no form for '{step.op}' of {types[step.lhs][1]} by {types[step.rhs][1]}"
                    )
                rhs = _wrap_int(elem, _INT_BINARY[step.op].format(a, b, width))
            elif arg_dev == "i32" and step.op in _INT_BINARY:
                rhs = _wrap_int(elem, _INT_BINARY[step.op].format(a, b))
            else:
                raise UnsupportedError(f"WGSL has no form for '{step.op}' on {types[step.lhs][1]}")
        elif isinstance(step, Select):
            rhs = f"select({names[step.b]}, {names[step.a]}, {names[step.cond]} != 0u)"
        else:
            assert isinstance(step, Convert)
            rhs = _convert(names[step.arg], types[step.arg][1], step.elem)
        lines.append(f"let s{i}: {dev} = {rhs};")
        if elem == "i64" and isinstance(step, (Unary, Binary)) and step.op in _I64_CHECKED:
            args = [names[step.arg]] * 2 if isinstance(step, Unary) else [names[step.lhs], names[step.rhs]]
            lines.append(f"if ({_I64_CHECKED[step.op].format(*args, f's{i}')}) {{ {WRAP_FLAG} }}")
        names.append(f"s{i}")
    return lines, names[-1]


def index_lines(rank: int, extents: int, strided: Sequence[tuple[str, int]]) -> list[str]:
    """WGSL computing, from the flat index `i` over extents `params[extents + k]`, each strided
    operand's element offset `NAME` from its strides at `params[base + k]` (per (NAME, base))."""
    lines = [f"var o_{name}: u32 = 0u;" for name, _ in strided]
    if not strided:
        return lines
    lines.append("var rem: u32 = i;")
    for k in range(rank - 1, -1, -1):
        lines.append(f"let c{k} = rem % params[{extents + k}]; rem = rem / params[{extents + k}];")
        for name, base in strided:
            lines.append(f"o_{name} = o_{name} + c{k} * params[{base + k}];")
    return lines


def source_zip(
    expr: Expr, shapes: Sequence[tuple[Poly, ...]], elems: Sequence[str], result: tuple[tuple[Poly, ...], str]
) -> str:
    """The zip kernel: one invocation per element of the result, operands read through strides
    unless they have the result's extents."""
    out_shape, out_elem = result
    rank = len(out_shape)
    strided = [(f"in{j}", 1 + rank + n * rank) for n, j in enumerate(_strided(shapes, out_shape))]
    reads = []
    for j in range(len(shapes)):
        index = f"o_in{j}" if any(name == f"in{j}" for name, _ in strided) else "i"
        reads.append(f"in{j}[{index}]")
    lines, last = expr_lines(expr, reads, shapes, elems, result)
    body = FLAT + "  if (i >= params[0]) { return; }\n"
    body += "".join(f"  {line}\n" for line in [*index_lines(rank, 1, strided), *lines])
    body += f"  out0[i] = {last};\n"
    return kernel([out_elem], elems, body, HELPERS)


def _strided(shapes: Sequence[tuple[Poly, ...]], out_shape: tuple[Poly, ...]) -> list[int]:
    """The operands that do not have the result's extents (they are read through strides)."""
    return [j for j, shape in enumerate(shapes) if tuple(shape) != tuple(out_shape)]


def strided_operands(shapes: Sequence[tuple[Poly, ...]], out_shape: tuple[Poly, ...]) -> list[int]:
    """The operands the zip kernel reads through strides (the printer passes their shapes to `_p_zip`)."""
    return _strided(shapes, out_shape)


def _p_zip(out_shape: tuple[int, ...], strided: tuple[tuple[int, ...], ...]) -> tuple[tuple[int, ...], int]:
    """The zip kernel's params (element count, result extents, each strided operand's strides over
    the result's axes, 0 where it broadcasts) and its workgroups."""
    rank = len(out_shape)
    total = 1
    for e in out_shape:
        total *= e
    params = [total, *out_shape]
    for shape in strided:
        strides = [0] * rank
        step = 1
        for k in range(len(shape) - 1, -1, -1):
            if shape[k] != 1:
                strides[rank - len(shape) + k] = step
            step *= shape[k]
        params += strides
    return tuple(params), (total + 63) // 64


PIECES: dict[str, Callable[..., object]] = {"_p_zip": _p_zip}
