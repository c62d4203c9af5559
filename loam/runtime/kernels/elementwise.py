"""The elementwise family's numpy meaning: how each `Expr` step is spelled, and the pieces it calls.

`UNARY_SOURCE` and `BINARY_SOURCE` map each step operator to the numpy ufunc or the piece that
computes it; the numpy printer spells a step with them, and `evaluate` (stage 0's folding) calls
the very same functions, so a step's numeric meaning is written once.  The pieces here are the
steps numpy has no ufunc for (`_relu`, `_sigmoid`, `_erf`, `_softplus`, `_softsign`) and those
whose meaning depends on the element type, as ONNX defines it:

- `_div`: integers truncate toward zero (numpy's `//` floors), floats divide;
- `_pow`: the result has the base's type, whatever the exponent's (ONNX Pow's T and T1);
- `_mod`: the divisor's sign (ONNX Mod with fmod=0);
- `_shl`, `_shr`: ONNX BitShift, defined for shifts outside the type's width.

`rnn_activation` applies the activation a recurrent operator names (`Sigmoid`, `Softsign`,
`HardSigmoid`, ...) with these same pieces, for the recurrent kernels.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def _relu(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """max(x, 0) in x's dtype (into `out` when given), the bits `np.maximum(x, 0)` gives.

    Against zeros of x's extents, not a scalar zero: numpy 2.4's maximum of two float32 arrays runs
    three to four times faster than of an array and a scalar (ResNet's [1, 256, 56, 56]: 0.10 ms
    against 0.38).  The zeros are one read-only buffer per dtype, kept on this function and grown to
    the largest operand up to 4M elements (past that, the scalar form: the buffer would cost more
    memory than the pass saves time).
    """
    x = np.asarray(x)
    count = x.size
    if count > 1 << 22:
        return np.maximum(x, np.zeros((), dtype=x.dtype), out=out)
    buffers = _relu.__dict__.setdefault("zeros", {})  # dtype -> zeros, never written: threads share it
    zeros = buffers.get(x.dtype)
    if zeros is None or zeros.size < count:
        zeros = np.zeros(max(count, 4096), dtype=x.dtype)
        zeros.flags.writeable = False
        buffers[x.dtype] = zeros
    return np.maximum(x, zeros[:count].reshape(x.shape), out=out)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)) in x's dtype: four passes in place, no branch and no select (a select on a
    data-dependent mask costs numpy ten times the arithmetic).  Where exp(-x) overflows (x below
    about -88.7 in float32) the result is 0 for a true value under the dtype's smallest normal;
    elsewhere the relative error is under 3 ulp against float64 over the whole range
    (tests/runtime/test_transcendentals.py).  NaN stays NaN, -inf gives 0, +inf gives 1.
    """
    x = np.asarray(x)
    y = np.empty(x.shape, x.dtype)  # an array even at rank 0, so every step can write into it
    with np.errstate(over="ignore"):
        np.negative(x, out=y)
        np.exp(y, out=y)
        np.add(y, np.ones((), dtype=x.dtype), out=y)
        np.divide(np.ones((), dtype=x.dtype), y, out=y)
    return y


def _erf(x: np.ndarray) -> np.ndarray:
    """The error function in x's dtype.

    float32 (and the narrower floats, through float32) in one float32 pass: x P(x^2) / Q(x^2), the
    rational fit of erf on [-4, 4] that Eigen and XLA use, with x clamped there (past 4, erf is ±1 in
    float32).  Absolute and relative error under 5e-7 for every normal float32, against float64's
    erf (tests/runtime/test_transcendentals.py); NaN stays NaN, ±inf gives ±1, -0 gives -0.

    float64: near 0 its Maclaurin series (where 1 - erfc would cancel); beyond, 1 - erfc with the
    Chebyshev fit of erfc from Numerical Recipes (relative error under 2e-7).
    """
    x = np.asarray(x)
    if x.dtype != np.float64:
        # Horner's first step as one product (c0 * z2, not a buffer filled with c0 and then scaled: the
        # same bits, a pass less), and a float32 x clamped without a copy first: every pass here is one
        # over the whole operand (MiniLM's GELU runs this over 9.4M elements a forward).
        z = np.clip(x.astype(np.float32, copy=False), np.float32(-4), np.float32(4))
        z2 = np.multiply(z, z)
        p = np.multiply(z2, np.float32(-2.72614225801306e-10))
        for c in (2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05, -7.34990630326855e-04,
                  -2.95459980854025e-03):  # fmt: skip
            p += np.float32(c)
            p *= z2
        p += np.float32(-1.60960333262415e-02)
        q = np.multiply(z2, np.float32(-1.45660718464996e-05))
        for c in (-2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03):
            q += np.float32(c)
            q *= z2
        q += np.float32(-1.42647390514189e-02)
        p /= q
        p *= z  # last: z P would pass through subnormals for z near the smallest normal float32
        return p.astype(x.dtype, copy=False)
    z = np.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    coeffs = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398,
              1.48851587, -0.82215223, 0.17087277)  # fmt: skip
    poly = np.zeros_like(t)
    for c in coeffs[:0:-1]:
        poly = t * (c + poly)
    with np.errstate(all="ignore"):
        far = 1.0 - t * np.exp(-z * z + coeffs[0] + poly)
        # erf(z) = 2/sqrt(pi) * sum_n (-1)^n z^(2n+1) / (n! (2n+1)); 12 terms reach 1e-16 below 0.5
        term = z.copy()
        near = z.copy()
        for n in range(1, 12):
            term = term * (-z * z) / n
            near = near + term / (2 * n + 1)
        near = near * 1.1283791670955126
    y = np.where(z < 0.5, near, far)
    return np.where(np.isnan(z), z, np.copysign(y, x))


def _softplus(x: np.ndarray) -> np.ndarray:
    """log(1 + exp(x)), computed without overflow."""
    return np.logaddexp(np.zeros((), dtype=np.result_type(x)), x)


def _softsign(x: np.ndarray) -> np.ndarray:
    """x / (1 + |x|)."""
    return x / (np.ones((), dtype=np.result_type(x)) + np.abs(x))


def _div(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """ONNX Div: integer operands truncate toward zero; float operands divide.  Like a ufunc, it
    writes into `out` when given (the in-place plan treats it as one)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        with np.errstate(all="ignore"):
            q = np.floor_divide(a, b)
            inexact = np.remainder(a, b) != 0
        # floor and truncation differ where the quotient is negative and inexact
        return np.add(q, (inexact & ((a < 0) != (b < 0))).astype(q.dtype), out=out)
    return np.divide(a, b, out=out)


def _pow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ONNX Pow: `a ** b` in the base's type; a mixed pair is computed in f64, as C's pow does."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype == b.dtype and a.dtype.kind == "f":
        if a.dtype == np.float32 and b.size == 1 and b.reshape(-1)[0] == 3:
            # GELU's cube as (a * a) * a in float32: onnxruntime's Pow takes an exponent of 3 so too
            # (its bits, every one of a million normal samples), where numpy's power calls libm per
            # element, and at a fifth of the time of a float64 cube narrowed (GPT-2's [64, 256]: 7 us
            # against 36).  `out` keeps a 0-d base's cube an array (a product of 0-d arrays is a scalar).
            cube = np.multiply(a, a, out=np.empty(a.shape, np.float32))
            cube = np.multiply(cube, a, out=cube)
            if b.ndim > a.ndim:  # the exponent's extra (unit) axes lead the result's shape
                cube = cube.reshape((1,) * (b.ndim - a.ndim) + cube.shape)
            return cube
        return np.power(a, b)
    with np.errstate(all="ignore"):
        return np.power(a.astype(np.float64), b.astype(np.float64)).astype(a.dtype)


def _mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ONNX Mod, fmod=0: `a - floor(a / b) * b`, with the divisor's sign (Python's `%`)."""
    with np.errstate(all="ignore"):
        return np.remainder(a, b)


def _shl(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ONNX BitShift LEFT: bits past the top are dropped; a shift < 0 or >= the width gives 0."""
    a, b = np.asarray(a), np.asarray(b)
    outside = (b < 0) | (b >= 8 * a.dtype.itemsize)
    shifted = np.left_shift(a, np.where(outside, 0, b).astype(a.dtype))
    return np.where(outside, np.zeros((), a.dtype), shifted)


def _shr(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ONNX BitShift RIGHT: arithmetic for signed types; a shift < 0 or >= the width leaves the sign fill."""
    a, b = np.asarray(a), np.asarray(b)
    outside = (b < 0) | (b >= 8 * a.dtype.itemsize)
    shifted = np.right_shift(a, np.where(outside, 0, b).astype(a.dtype))
    fill = np.where(a < 0, np.asarray(-1).astype(a.dtype), np.zeros((), a.dtype))
    return np.where(outside, fill, shifted)


def _finished(value: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """A zip's result: `value` itself, or stored into the buffer `out` when the caller gave one."""
    if out is None:
        return np.asarray(value)
    out[...] = value
    return out


def _reach(value: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """`value` at `shape`: itself when it already has it (the usual case: the build could not prove
    that two spellings of an extent agree), else a broadcast view."""
    return value if value.shape == shape else np.broadcast_to(value, shape)


def rnn_activation(v: np.ndarray, name: str, alpha: float, beta: float) -> np.ndarray:
    """ONNX's recurrent activation `name` (alpha and beta where it reads them) of `v`, in v's dtype: the
    elementwise function an RNN, GRU or LSTM names for its gates (`loam.runtime.kernels.recurrent`)."""
    a, b = v.dtype.type(alpha), v.dtype.type(beta)
    zero = v.dtype.type(0)
    if name == "Tanh":
        return np.tanh(v)
    if name == "Sigmoid":
        return _sigmoid(v)
    if name == "Relu":
        return np.maximum(v, zero)
    if name == "Affine":
        return a * v + b
    if name == "LeakyRelu":
        return np.where(v >= zero, v, a * v)
    if name == "ThresholdedRelu":
        return np.where(v > a, v, zero)
    if name == "ScaledTanh":
        return a * np.tanh(b * v)
    if name == "HardSigmoid":
        return np.minimum(np.maximum(a * v + b, zero), v.dtype.type(1))
    if name == "Elu":
        return np.where(v >= zero, v, a * np.expm1(v))
    if name == "Softsign":
        return _softsign(v)
    if name == "Softplus":
        return _softplus(v)
    raise ValueError(f"unknown recurrent activation {name!r}")


# Step operator -> the numpy function or piece computing it ("" is the identity).
UNARY_SOURCE: dict[str, str] = {
    "neg": "np.negative", "abs": "np.abs", "relu": "_relu", "sigmoid": "_sigmoid", "tanh": "np.tanh",
    "exp": "np.exp", "log": "np.log", "sqrt": "np.sqrt", "reciprocal": "np.reciprocal",
    "floor": "np.floor", "ceil": "np.ceil", "round": "np.round", "sin": "np.sin", "cos": "np.cos",
    "tan": "np.tan", "asin": "np.arcsin", "acos": "np.arccos", "atan": "np.arctan", "sinh": "np.sinh",
    "cosh": "np.cosh", "asinh": "np.arcsinh", "acosh": "np.arccosh", "atanh": "np.arctanh",
    "erf": "_erf", "sign": "np.sign", "softplus": "_softplus", "softsign": "_softsign", "identity": "",
    "not": "np.logical_not", "isnan": "np.isnan", "isinf": "np.isinf", "bitnot": "np.invert",
}  # fmt: skip
BINARY_SOURCE: dict[str, str] = {
    "add": "np.add", "sub": "np.subtract", "mul": "np.multiply", "div": "_div", "pow": "_pow",
    "max": "np.maximum", "min": "np.minimum", "mod": "_mod", "fmod": "np.fmod", "equal": "np.equal",
    "less": "np.less", "less_equal": "np.less_equal", "greater": "np.greater",
    "greater_equal": "np.greater_equal", "and": "np.logical_and", "or": "np.logical_or",
    "xor": "np.logical_xor", "shl": "_shl", "shr": "_shr", "bitand": "np.bitwise_and",
    "bitor": "np.bitwise_or", "bitxor": "np.bitwise_xor",
}  # fmt: skip


PIECES: dict[str, Callable[..., object]] = {
    "_finished": _finished,
    "_reach": _reach,
    "_relu": _relu,
    "_sigmoid": _sigmoid,
    "_erf": _erf,
    "_softplus": _softplus,
    "_softsign": _softsign,
    "_div": _div,
    "_pow": _pow,
    "_mod": _mod,
    "_shl": _shl,
    "_shr": _shr,
    "rnn_activation": rnn_activation,
}
