"""Write the operators suite: one small model per operator x edge case into tests/conformance/operators/.

    python -m tests.conformance.make_operator_cases          # rewrite operators/ (deletes stale cases)

Each case is `<Op>.<variant>.onnx`; where input values matter (indices, divisors, NaN/inf, overflow, a
variance) they are stored next to it as `<Op>.<variant>.npz`, otherwise the harness draws seeded random
inputs from the input types.  Inputs that fix extents or axes are integer initializers (or Constants, for
float scales), as exports carry them.  Every model is checked with onnx's checker and shape inference and
run by onnxruntime before it is written; a case onnxruntime cannot run (a type it has no kernel for) is
reported and skipped, since onnxruntime is the suite's oracle.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import onnx
import onnx.helper as oh
from onnx import TensorProto, numpy_helper

OUT = Path(__file__).resolve().parent / "operators"
DEFAULT_OPSET = 21

NP: dict[str, Any] = {
    "f32": np.float32,
    "f64": np.float64,
    "f16": np.float16,
    "bf16": ml_dtypes.bfloat16,
    "i8": np.int8,
    "i16": np.int16,
    "i32": np.int32,
    "i64": np.int64,
    "ui8": np.uint8,
    "ui16": np.uint16,
    "bool": np.bool_,
}
ELEM: dict[str, int] = {
    "f32": TensorProto.FLOAT,
    "f64": TensorProto.DOUBLE,
    "f16": TensorProto.FLOAT16,
    "bf16": TensorProto.BFLOAT16,
    "i8": TensorProto.INT8,
    "i16": TensorProto.INT16,
    "i32": TensorProto.INT32,
    "i64": TensorProto.INT64,
    "ui8": TensorProto.UINT8,
    "ui16": TensorProto.UINT16,
    "bool": TensorProto.BOOL,
}
FLOATS = ("f32", "f64", "f16", "bf16")
INTS = ("i8", "i16", "i32", "i64", "ui8")


@dataclass
class In:
    """A run-time input: its type and shape, and the values to store (None: random at test time)."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "f32"
    values: np.ndarray | None = None


@dataclass
class Known:
    """An input known at build time: an integer initializer, or a Constant node for floats."""

    name: str
    value: np.ndarray


@dataclass
class Spec:
    op: str
    variant: str
    inputs: Sequence[In | Known | None]  # None: an omitted optional input
    attrs: dict[str, Any] = field(default_factory=dict)
    outputs: int = 1
    opset: int = DEFAULT_OPSET
    # The outputs' extents where onnx's shape inference leaves them untyped, or types them wrongly
    # (pooling with ceil_mode keeps a window that starts in the end padding: there None leaves the
    # extent unknown, which the checker accepts); a typed output keeps inference's element type.
    out_shape: tuple[int | None, ...] | None = None
    # Outputs the node leaves unnamed (an empty name: ONNX's omitted optional output), by position.
    unnamed: tuple[int, ...] = ()


def arr(values: Any, dtype: str) -> np.ndarray:
    return np.asarray(values, dtype=np.float64 if dtype in FLOATS else None).astype(NP[dtype])


def i64(*values: int) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def make_model(spec: Spec) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The one-node model of `spec` (outputs typed by shape inference) and the input values to store."""
    graph_inputs, initializers, nodes, stored, names = [], [], [], {}, []
    for item in spec.inputs:
        if item is None:
            names.append("")
        elif isinstance(item, In):
            graph_inputs.append(oh.make_tensor_value_info(item.name, ELEM[item.dtype], item.shape))
            if item.values is not None:
                stored[item.name] = item.values
            names.append(item.name)
        else:
            tensor = numpy_helper.from_array(item.value, item.name)
            if item.value.dtype.kind in "iub":
                initializers.append(tensor)
            else:
                nodes.append(oh.make_node("Constant", [], [item.name], name=f"{item.name}_const", value=tensor))
            names.append(item.name)
    outs = ["" if i in spec.unnamed else f"y{i}" for i in range(spec.outputs)]
    nodes.append(oh.make_node(spec.op, names, outs, name=f"{spec.op.lower()}_node", **spec.attrs))
    graph = oh.make_graph(
        nodes, f"{spec.op}_{spec.variant}", graph_inputs, [onnx.ValueInfoProto(name=o) for o in outs if o], initializers
    )
    opsets = [oh.make_opsetid("", spec.opset)]
    try:
        model = oh.make_model_gen_version(graph, opset_imports=opsets)
    except ValueError:  # an opset onnx's version table does not list: the oldest IR version
        model = oh.make_model(graph, opset_imports=opsets, ir_version=3)
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    first = next((i for i in spec.inputs if isinstance(i, In)), In("none", ()))
    for out in model.graph.output:
        if not out.type.HasField("tensor_type"):  # untyped by inference: the first input's type, or out_shape
            shape = spec.out_shape if spec.out_shape is not None else first.shape
            out.CopyFrom(oh.make_tensor_value_info(out.name, ELEM[first.dtype], shape))
        elif spec.out_shape is not None:  # typed wrongly by inference: out_shape's extents, inference's type
            out.CopyFrom(oh.make_tensor_value_info(out.name, out.type.tensor_type.elem_type, spec.out_shape))
    onnx.checker.check_model(model, full_check=True)
    return model, stored


# ----------------------------------------------------------------------------------------------------------
# The cases, by family

BINARY_ARITH = ("Add", "Sub", "Mul", "Div")
SHAPES_BINARY: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "same": ((3, 4), (3, 4)),
    "scalar": ((2, 3), ()),
    "rank1": ((2, 3, 4), (4,)),
    "ones": ((3, 1), (1, 4)),
    "left_scalar": ((), (2, 3)),
}


def nonzero(shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> np.ndarray:
    low, high = (1, 6) if dtype == "ui8" else (-5, 6)
    v = rng.integers(low, high, size=shape)
    v[v == 0] = 3
    return v.astype(NP[dtype])


def elementwise(rng: np.random.Generator) -> list[Spec]:
    specs: list[Spec] = []
    for op in BINARY_ARITH:
        for shape_name, (sa, sb) in SHAPES_BINARY.items():
            specs.append(Spec(op, f"f32_{shape_name}", [In("a", sa), In("b", sb)]))
        for dt in ("f64", "f16", "bf16", *INTS):
            b = In("b", (3, 4), dt, nonzero((3, 4), dt, rng)) if op == "Div" and dt in INTS else In("b", (3, 4), dt)
            specs.append(Spec(op, dt, [In("a", (3, 4), dt), b]))
    # integer overflow wraps
    big = arr([[120, 127, -128, 100]], "i8")
    specs.append(
        Spec("Add", "i8_overflow", [In("a", (1, 4), "i8", big), In("b", (1, 4), "i8", arr([[10, 1, -1, 100]], "i8"))])
    )
    specs.append(
        Spec(
            "Mul",
            "i32_overflow",
            [
                In("a", (3,), "i32", arr([2**30, -(2**30), 65536], "i32")),
                In("b", (3,), "i32", arr([4, 4, 65536], "i32")),
            ],
        )
    )
    specs.append(
        Spec(
            "Sub",
            "ui8_wrap",
            [In("a", (4,), "ui8", arr([0, 1, 5, 255], "ui8")), In("b", (4,), "ui8", arr([1, 2, 10, 0], "ui8"))],
        )
    )
    # integer Div truncates toward zero
    specs.append(
        Spec(
            "Div",
            "i32_negative",
            [
                In("a", (6,), "i32", arr([7, -7, 7, -7, 0, 1], "i32")),
                In("b", (6,), "i32", arr([2, 2, -2, -2, 3, -3], "i32")),
            ],
        )
    )
    nan = np.array([np.nan, np.inf, -np.inf, 1.0, 0.0, -0.0], np.float32)
    specs.append(
        Spec(
            "Div",
            "f32_by_zero",
            [In("a", (6,), "f32", nan), In("b", (6,), "f32", np.array([0, 0, 0, 0, 0, 1], np.float32))],
        )
    )
    for op in ("Max", "Min", "Mean", "Sum"):
        specs.append(Spec(op, "three_bcast", [In("a", (2, 3)), In("b", (3,)), In("c", (1, 1))]))
        specs.append(Spec(op, "one", [In("a", (2, 3))]))
        specs.append(Spec(op, "nan", [In("a", (6,), "f32", nan), In("b", (6,), "f32", np.ones(6, np.float32))]))
    for op in ("Max", "Min"):
        for dt in ("f64", "f16", "i8", "i32", "i64", "ui8"):
            specs.append(Spec(op, dt, [In("a", (3, 4), dt), In("b", (4,), dt)]))
    # Pow
    specs.append(
        Spec(
            "Pow",
            "f32",
            [In("a", (3, 4), "f32", np.abs(rng.standard_normal((3, 4))).astype(np.float32)), In("b", (3, 4))],
        )
    )
    specs.append(Spec("Pow", "f32_scalar_exp", [In("a", (3, 4)), Known("b", np.array(2.0, np.float32))]))
    specs.append(
        Spec(
            "Pow",
            "f32_negative_base",
            [In("a", (4,), "f32", arr([-2, -1.5, 0, 3], "f32")), In("b", (4,), "f32", arr([2, 0.5, 0, -1], "f32"))],
        )
    )
    specs.append(
        Spec(
            "Pow",
            "i32",
            [In("a", (4,), "i32", arr([2, -3, 0, 5], "i32")), In("b", (4,), "i32", arr([3, 2, 4, 1], "i32"))],
        )
    )
    specs.append(
        Spec(
            "Pow",
            "i64_f32",
            [In("a", (4,), "i64", arr([2, -3, 1, 5], "i64")), In("b", (4,), "f32", arr([3, 2, 4, 1], "f32"))],
        )
    )
    specs.append(Spec("Pow", "f32_i64", [In("a", (4,)), In("b", (4,), "i64", arr([3, 2, 0, 1], "i64"))]))
    specs.append(
        Spec(
            "Pow",
            "f16",
            [In("a", (3,), "f16", arr([1.5, 2, 0.5], "f16")), In("b", (3,), "f16", arr([2, -1, 3], "f16"))],
        )
    )
    # Mod
    for dt in ("i8", "i32", "i64", "ui8"):
        a = nonzero((8,), dt, rng) * (3 if dt != "ui8" else 1)
        specs.append(
            Spec("Mod", f"{dt}", [In("a", (8,), dt, a.astype(NP[dt])), In("b", (8,), dt, nonzero((8,), dt, rng))])
        )
        if dt != "ui8":
            specs.append(
                Spec(
                    "Mod",
                    f"{dt}_fmod",
                    [In("a", (8,), dt, a.astype(NP[dt])), In("b", (8,), dt, nonzero((8,), dt, rng))],
                    {"fmod": 1},
                )
            )
    for dt in ("f32", "f64", "f16"):
        specs.append(
            Spec(
                "Mod",
                f"{dt}_fmod",
                [In("a", (3, 4), dt), In("b", (3, 4), dt, nonzero((3, 4), "i32", rng).astype(NP[dt]))],
                {"fmod": 1},
            )
        )
    specs.append(
        Spec(
            "Mod",
            "i32_bcast",
            [In("a", (2, 4), "i32", nonzero((2, 4), "i32", rng)), Known("b", np.array([3], np.int32))],
        )
    )
    # comparisons and logic
    for op in ("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"):
        for dt in ("f32", "i32", "i64", "f16"):
            specs.append(Spec(op, dt, [In("a", (3, 4), dt), In("b", (4,), dt)]))
        specs.append(Spec(op, "nan", [In("a", (6,), "f32", nan), In("b", (6,), "f32", nan[::-1].copy())]))
    specs.append(Spec("Equal", "bool", [In("a", (3, 4), "bool"), In("b", (3, 4), "bool")]))
    for op in ("And", "Or", "Xor"):
        specs.append(Spec(op, "same", [In("a", (3, 4), "bool"), In("b", (3, 4), "bool")]))
        specs.append(Spec(op, "bcast", [In("a", (2, 3, 4), "bool"), In("b", (4,), "bool")]))
    signed = arr([-128, -1, 0, 1, 127, 85], "i8")
    unsigned = arr([0, 1, 127, 128, 255, 170], "ui8")
    for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
        for dt in ("i32", "i64"):
            specs.append(Spec(op, dt, [In("a", (3, 4), dt), In("b", (4,), dt)], opset=18))
        specs.append(Spec(op, "i8", [In("a", (6,), "i8", signed), In("b", (6,), "i8", signed[::-1].copy())], opset=18))
        specs.append(
            Spec(op, "ui8", [In("a", (6,), "ui8", unsigned), In("b", (6,), "ui8", unsigned[::-1].copy())], opset=18)
        )
    for dt, values in (("i8", signed), ("ui8", unsigned)):
        specs.append(Spec("BitwiseNot", dt, [In("x", (6,), dt, values)], opset=18))
    specs.append(Spec("BitwiseNot", "i64", [In("x", (2, 3), "i64")], opset=18))
    for direction in ("LEFT", "RIGHT"):
        specs.append(
            Spec(
                "BitShift",
                f"ui8_{direction.lower()}",
                [
                    In("a", (5,), "ui8", arr([1, 2, 255, 128, 7], "ui8")),
                    In("b", (5,), "ui8", arr([1, 3, 1, 7, 0], "ui8")),
                ],
                {"direction": direction},
            )
        )
    # Where
    specs.append(Spec("Where", "f32", [In("c", (3, 4), "bool"), In("a", (3, 4)), In("b", (3, 4))]))
    specs.append(Spec("Where", "bcast", [In("c", (4,), "bool"), In("a", (2, 1, 4)), In("b", ())]))
    specs.append(Spec("Where", "i64", [In("c", (3, 1), "bool"), In("a", (3, 4), "i64"), In("b", (4,), "i64")]))
    # PRelu
    specs.append(Spec("PRelu", "channel", [In("x", (2, 3, 4)), In("s", (3, 1))]))
    specs.append(Spec("PRelu", "scalar", [In("x", (2, 3)), In("s", (1,))]))
    specs.append(Spec("PRelu", "f16", [In("x", (2, 3), "f16"), In("s", (3,), "f16")]))
    return specs


UNARY = (
    "Relu Sigmoid Tanh Exp Log Sqrt Reciprocal Neg Abs Sign Floor Ceil Round Erf Sin Cos Tan Asin Acos Atan "
    "Sinh Cosh Softplus Softsign HardSwish Elu Selu Celu Gelu LeakyRelu HardSigmoid"
).split()
UNIT_DOMAIN = ("Asin", "Acos")
SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 1e30, -1e30], np.float32)


def unary(rng: np.random.Generator) -> list[Spec]:
    specs: list[Spec] = []
    for op in UNARY:
        values = rng.uniform(-0.99, 0.99, (3, 4)).astype(np.float32) if op in UNIT_DOMAIN else None
        specs.append(Spec(op, "f32", [In("x", (3, 4), "f32", values)]))
        specs.append(Spec(op, "special", [In("x", SPECIAL.shape, "f32", SPECIAL)]))
        for dt in ("f64", "f16"):
            v = values.astype(NP[dt]) if values is not None else None
            specs.append(Spec(op, dt, [In("x", (3, 4), dt, v)]))
        specs.append(Spec(op, "rank0", [In("x", ())]))
    for op in ("Relu", "Abs", "Neg", "Sign"):
        for dt in ("i8", "i32", "i64"):
            specs.append(Spec(op, dt, [In("x", (3, 4), dt)]))
    specs.append(Spec("Abs", "i8_min", [In("x", (3,), "i8", arr([-128, -1, 127], "i8"))]))
    specs.append(Spec("Neg", "i8_min", [In("x", (3,), "i8", arr([-128, -1, 127], "i8"))]))
    specs.append(Spec("Relu", "bf16", [In("x", (3, 4), "bf16")]))
    specs.append(Spec("Sigmoid", "bf16", [In("x", (3, 4), "bf16")]))
    specs.append(Spec("LeakyRelu", "alpha", [In("x", (3, 4))], {"alpha": 0.3}))
    specs.append(Spec("ThresholdedRelu", "default", [In("x", (3, 4))]))
    specs.append(Spec("ThresholdedRelu", "alpha", [In("x", (3, 4))], {"alpha": -0.5}))
    specs.append(Spec("ThresholdedRelu", "f16", [In("x", (3, 4), "f16")], {"alpha": 0.25}))
    specs.append(Spec("Elu", "alpha", [In("x", (3, 4))], {"alpha": 2.0}))
    specs.append(Spec("Celu", "alpha", [In("x", (3, 4))], {"alpha": 0.5}))
    specs.append(Spec("Selu", "params", [In("x", (3, 4))], {"alpha": 2.0, "gamma": 3.0}))
    specs.append(Spec("HardSigmoid", "params", [In("x", (3, 4))], {"alpha": 0.5, "beta": 0.6}))
    specs.append(Spec("Gelu", "tanh", [In("x", (3, 4))], {"approximate": "tanh"}))
    specs.append(Spec("Elu", "opset6", [In("x", (3, 4))], opset=6))
    specs.append(Spec("LeakyRelu", "opset6", [In("x", (3, 4))], {"alpha": 0.2}, opset=6))
    specs.append(Spec("Not", "bool", [In("x", (3, 4), "bool")]))
    specs.append(Spec("IsNaN", "f32", [In("x", SPECIAL.shape, "f32", SPECIAL)]))
    specs.append(Spec("IsNaN", "f16", [In("x", SPECIAL.shape, "f16", SPECIAL.astype(np.float16))]))
    for pos, neg in ((1, 1), (1, 0), (0, 1)):
        specs.append(
            Spec(
                "IsInf",
                f"p{pos}_n{neg}",
                [In("x", SPECIAL.shape, "f32", SPECIAL)],
                {"detect_positive": pos, "detect_negative": neg},
            )
        )
    # Clip: attributes before 11, inputs from 11 (known, run-time, omitted)
    specs.append(Spec("Clip", "opset6", [In("x", (3, 4))], {"min": -0.5, "max": 0.5}, opset=6))
    specs.append(Spec("Clip", "opset6_default", [In("x", (3, 4))], opset=6))
    specs.append(
        Spec(
            "Clip",
            "known",
            [In("x", (3, 4)), Known("lo", np.array(-0.5, np.float32)), Known("hi", np.array(0.5, np.float32))],
        )
    )
    specs.append(
        Spec("Clip", "runtime", [In("x", (3, 4)), In("lo", ()), In("hi", (), "f32", np.array(1.0, np.float32))])
    )
    specs.append(Spec("Clip", "min_only", [In("x", (3, 4)), Known("lo", np.array(0.0, np.float32))]))
    specs.append(Spec("Clip", "max_only", [In("x", (3, 4)), None, Known("hi", np.array(0.0, np.float32))]))
    specs.append(Spec("Clip", "none", [In("x", (3, 4))]))
    specs.append(
        Spec(
            "Clip",
            "i32",
            [In("x", (3, 4), "i32"), Known("lo", np.array(-3, np.int32)), Known("hi", np.array(4, np.int32))],
        )
    )
    specs.append(
        Spec(
            "Clip",
            "nan",
            [
                In("x", SPECIAL.shape, "f32", SPECIAL),
                Known("lo", np.array(-1, np.float32)),
                Known("hi", np.array(1, np.float32)),
            ],
        )
    )
    shrink = arr([-3.0, -1.5, -1.2, -0.5, 0.0, 0.5, 1.2, 1.5, 3.0], "f32")
    specs.append(Spec("Shrink", "soft", [In("x", (9,), "f32", shrink)], {"lambd": 1.2, "bias": 0.7}))
    specs.append(Spec("Shrink", "default", [In("x", (9,), "f32", shrink)]))
    return specs


def casts(rng: np.random.Generator) -> list[Spec]:
    specs: list[Spec] = []
    pairs = [
        ("f32", "i32"), ("f32", "f16"), ("f32", "bf16"), ("f32", "f64"), ("f32", "bool"), ("f32", "i8"), ("f32", "ui8"),
        ("f64", "f32"), ("f16", "f32"), ("bf16", "f32"), ("i64", "f32"), ("i32", "i64"), ("i64", "i32"), ("i32", "i8"),
        ("bool", "f32"), ("bool", "i64"), ("i32", "bool"), ("ui8", "f32"), ("i8", "i32"), ("f16", "i32"),
    ]  # fmt: skip
    for src, dst in pairs:
        values = None
        if src in FLOATS and dst in INTS:
            values = rng.uniform(-100 if dst != "ui8" else 0, 100, (3, 4)).astype(NP[src])
        specs.append(Spec("Cast", f"{src}_to_{dst}", [In("x", (3, 4), src, values)], {"to": ELEM[dst]}))
        specs.append(Spec("CastLike", f"{src}_to_{dst}", [In("x", (3, 4), src, values), In("t", (1,), dst)]))
    specs.append(
        Spec(
            "Cast",
            "i32_to_i8_wrap",
            [In("x", (4,), "i32", arr([127, 128, 300, -129], "i32"))],
            {"to": TensorProto.INT8},
        )
    )
    specs.append(
        Spec("Cast", "f32_special_to_f16", [In("x", SPECIAL.shape, "f32", SPECIAL)], {"to": TensorProto.FLOAT16})
    )
    specs.append(
        Spec(
            "Cast",
            "f32_to_f16_overflow",
            [In("x", (3,), "f32", arr([70000, -70000, 65504], "f32"))],
            {"to": TensorProto.FLOAT16},
        )
    )
    specs.append(Spec("Cast", "opset6", [In("x", (3, 4))], {"to": TensorProto.DOUBLE}, opset=6))
    specs.append(Spec("Identity", "f32", [In("x", (3, 4))]))
    specs.append(Spec("Identity", "i64", [In("x", (3,), "i64")]))
    specs.append(Spec("Identity", "bool_rank0", [In("x", (), "bool")]))
    specs.append(Spec("Dropout", "inference", [In("x", (3, 4))]))
    specs.append(Spec("Dropout", "ratio_mask", [In("x", (3, 4)), Known("r", np.array(0.5, np.float32))], outputs=2))
    specs.append(Spec("Dropout", "opset7", [In("x", (3, 4))], {"ratio": 0.3}, opset=7))
    specs.append(Spec("Dropout", "opset10_mask", [In("x", (3, 4))], {"ratio": 0.3}, outputs=2, opset=10))
    return specs


def movement(rng: np.random.Generator) -> list[Spec]:
    specs: list[Spec] = []
    specs.append(Spec("Transpose", "default", [In("x", (2, 3, 4))]))
    specs.append(Spec("Transpose", "perm", [In("x", (2, 3, 4))], {"perm": [1, 2, 0]}))
    specs.append(Spec("Transpose", "rank4", [In("x", (2, 1, 3, 4))], {"perm": [0, 3, 1, 2]}))
    specs.append(Spec("Transpose", "i64", [In("x", (2, 3), "i64")]))
    specs.append(Spec("Transpose", "rank1", [In("x", (5,))]))
    for variant, shape, target in (
        ("basic", (2, 3, 4), (6, 4)),
        ("minus1", (2, 3, 4), (-1, 2)),
        ("zero_copies", (2, 3, 4), (0, 12)),
        ("to_rank0", (1, 1), ()),
        ("from_rank0", (), (1, 1)),
        ("extents_1", (4,), (1, 4, 1)),
    ):
        specs.append(Spec("Reshape", variant, [In("x", shape), Known("s", i64(*target))]))
    specs.append(Spec("Reshape", "allowzero", [In("x", (0, 3)), Known("s", i64(3, 0))], {"allowzero": 1}))
    specs.append(Spec("Reshape", "opset1", [In("x", (2, 3, 4))], {"shape": [4, 6]}, opset=1, out_shape=(4, 6)))
    specs.append(Spec("Reshape", "bool", [In("x", (2, 3), "bool"), Known("s", i64(3, 2))]))
    for axis in (0, 1, 2, 3, -1, -3):
        specs.append(Spec("Flatten", f"axis{axis}".replace("-", "m"), [In("x", (2, 3, 4))], {"axis": axis}))
    specs.append(Spec("Flatten", "opset1", [In("x", (2, 3, 4))], {"axis": 2}, opset=1))
    specs.append(Spec("Unsqueeze", "axes", [In("x", (3, 4)), Known("a", i64(0, 3))]))
    specs.append(Spec("Unsqueeze", "negative", [In("x", (3, 4)), Known("a", i64(-1))]))
    specs.append(Spec("Unsqueeze", "unsorted", [In("x", (3, 4)), Known("a", i64(3, 1))]))
    specs.append(Spec("Unsqueeze", "rank0", [In("x", ()), Known("a", i64(0))]))
    specs.append(Spec("Unsqueeze", "opset11", [In("x", (3, 4))], {"axes": [1, -1]}, opset=11))
    specs.append(Spec("Unsqueeze", "opset1", [In("x", (3, 4))], {"axes": [0]}, opset=1))
    specs.append(Spec("Squeeze", "axes", [In("x", (1, 3, 1, 4)), Known("a", i64(0, 2))]))
    specs.append(Spec("Squeeze", "negative", [In("x", (1, 3, 1, 4)), Known("a", i64(-2))]))
    specs.append(Spec("Squeeze", "all", [In("x", (1, 3, 1, 4))]))
    specs.append(Spec("Squeeze", "to_rank0", [In("x", (1, 1))]))
    specs.append(Spec("Squeeze", "opset11", [In("x", (1, 3, 1))], {"axes": [-1]}, opset=11))
    specs.append(Spec("Expand", "bcast", [In("x", (3, 1)), Known("s", i64(2, 3, 4))]))
    specs.append(Spec("Expand", "smaller_shape", [In("x", (2, 3)), Known("s", i64(3))]))
    specs.append(Spec("Expand", "ones", [In("x", (1, 4)), Known("s", i64(3, 1))]))
    specs.append(Spec("Expand", "rank0", [In("x", ()), Known("s", i64(2, 2))]))
    specs.append(Spec("Expand", "i64", [In("x", (3,), "i64"), Known("s", i64(2, 3))]))
    specs.append(Spec("Tile", "basic", [In("x", (2, 3)), Known("r", i64(2, 3))]))
    specs.append(Spec("Tile", "ones", [In("x", (2, 1, 3)), Known("r", i64(1, 4, 1))]))
    specs.append(Spec("Tile", "bool", [In("x", (2,), "bool"), Known("r", i64(3))]))
    for mode in ("constant", "reflect", "edge"):
        specs.append(Spec("Pad", mode, [In("x", (3, 4)), Known("p", i64(1, 2, 2, 1))], {"mode": mode}))
        specs.append(
            Spec(
                "Pad", f"{mode}_rank4", [In("x", (1, 2, 3, 4)), Known("p", i64(0, 0, 1, 2, 0, 0, 2, 1))], {"mode": mode}
            )
        )
        specs.append(
            Spec(
                "Pad",
                f"{mode}_axes",
                [In("x", (2, 3, 4)), Known("p", i64(1, 2, 2, 1)), None, Known("a", i64(-1, 1))],
                {"mode": mode},
            )
        )
        specs.append(Spec("Pad", f"{mode}_opset2", [In("x", (3, 4))], {"mode": mode, "pads": [0, 1, 0, 2]}, opset=2))
    specs.append(
        Spec(
            "Pad",
            "constant_value",
            [In("x", (3, 4)), Known("p", i64(1, 0, 0, 1)), Known("v", np.array(2.5, np.float32))],
        )
    )
    specs.append(Spec("Pad", "negative", [In("x", (3, 4)), Known("p", i64(-1, 1, 0, -2))]))
    specs.append(
        Spec("Pad", "i32", [In("x", (3, 4), "i32"), Known("p", i64(1, 1, 1, 1)), Known("v", np.array(7, np.int32))])
    )
    specs.append(Spec("Pad", "opset2_value", [In("x", (3, 4))], {"pads": [1, 1, 1, 1], "value": 1.5}, opset=2))
    specs.append(Spec("Split", "equal", [In("x", (6, 4))], {"num_outputs": 3}, outputs=3))
    specs.append(Spec("Split", "sizes", [In("x", (2, 7)), Known("s", i64(2, 5))], {"axis": 1}, outputs=2))
    specs.append(Spec("Split", "negative_axis", [In("x", (2, 6)), Known("s", i64(1, 2, 3))], {"axis": -1}, outputs=3))
    specs.append(Spec("Split", "num_outputs_uneven", [In("x", (7, 2))], {"num_outputs": 3}, outputs=3))
    specs.append(Spec("Split", "opset11_attr", [In("x", (5, 2))], {"split": [2, 3]}, outputs=2, opset=11))
    specs.append(Spec("Split", "opset2_attr", [In("x", (4, 2))], {"split": [1, 3]}, outputs=2, opset=2))
    specs.append(Spec("Split", "opset13_equal", [In("x", (4, 6))], {"axis": 1}, outputs=2, opset=13))
    specs.append(Spec("Concat", "axis0", [In("a", (2, 3)), In("b", (1, 3))], {"axis": 0}))
    specs.append(Spec("Concat", "negative", [In("a", (2, 3)), In("b", (2, 1)), In("c", (2, 2))], {"axis": -1}))
    specs.append(Spec("Concat", "one", [In("a", (2, 3))], {"axis": 1}))
    specs.append(Spec("Concat", "i64", [In("a", (2,), "i64"), In("b", (3,), "i64")], {"axis": 0}))
    specs.append(Spec("Concat", "opset1_default_axis", [In("a", (2, 3)), In("b", (2, 3))], opset=1, out_shape=(2, 6)))
    specs.append(Spec("Concat", "opset4", [In("a", (2, 3)), In("b", (2, 3))], {"axis": 1}, opset=4))
    # Slice: inputs from 10, attributes before
    for variant, shape, starts, ends, axes, steps in (
        ("basic", (4, 5), (1, 0), (3, 5), None, None),
        ("axes", (4, 5), (1,), (4,), (1,), None),
        ("negative", (4, 5), (-3,), (-1,), (-1,), None),
        ("steps", (6, 5), (0, 4), (6, 0), (0, 1), (2, -1)),
        ("reverse_all", (5,), (-1,), (-(2**63),), (0,), (-1,)),
        ("out_of_bounds", (4, 5), (-100, 2), (100, 1000), (0, 1), None),
        ("empty", (4, 5), (3,), (1,), (0,), None),
    ):
        ins: list[In | Known | None] = [In("x", shape), Known("s", i64(*starts)), Known("e", i64(*ends))]
        if axes is not None:
            ins.append(Known("a", i64(*axes)))
        if steps is not None:
            ins.append(Known("t", i64(*steps)))
        specs.append(Spec("Slice", variant, ins))
    specs.append(Spec("Slice", "opset1", [In("x", (4, 5))], {"starts": [1], "ends": [-1], "axes": [1]}, opset=1))
    specs.append(Spec("Slice", "opset1_no_axes", [In("x", (4, 5))], {"starts": [1, 1], "ends": [3, 100]}, opset=1))
    specs.append(Spec("DepthToSpace", "dcr", [In("x", (1, 8, 2, 3))], {"blocksize": 2}))
    specs.append(Spec("DepthToSpace", "crd", [In("x", (2, 8, 2, 3))], {"blocksize": 2, "mode": "CRD"}))
    specs.append(Spec("DepthToSpace", "opset1", [In("x", (1, 4, 2, 2))], {"blocksize": 2}, opset=1))
    specs.append(Spec("SpaceToDepth", "basic", [In("x", (2, 2, 4, 6))], {"blocksize": 2}))
    specs.append(Spec("SpaceToDepth", "block3", [In("x", (1, 1, 3, 6))], {"blocksize": 3}))
    lens = arr([3, 0, 4], "i64")
    specs.append(Spec("ReverseSequence", "time0", [In("x", (4, 3, 2)), In("lens", (3,), "i64", lens)]))
    rev = {"batch_axis": 0, "time_axis": 1}
    specs.append(Spec("ReverseSequence", "batch0", [In("x", (3, 4)), In("lens", (3,), "i64", lens)], rev))
    specs.append(Spec("ReverseSequence", "i64", [In("x", (4, 3), "i64"), In("lens", (3,), "i64", lens)]))
    return specs


def indexing(rng: np.random.Generator) -> list[Spec]:
    specs: list[Spec] = []
    idx = arr([[0, 2], [-1, 1]], "i64")
    specs.append(Spec("Gather", "axis0", [In("x", (3, 4)), In("i", (2, 2), "i64", idx)]))
    specs.append(Spec("Gather", "axis1", [In("x", (3, 4)), In("i", (3,), "i64", arr([3, -4, 0], "i64"))], {"axis": 1}))
    specs.append(
        Spec("Gather", "negative_axis", [In("x", (2, 3, 4)), In("i", (2,), "i32", arr([1, 2], "i32"))], {"axis": -2})
    )
    specs.append(Spec("Gather", "scalar_index", [In("x", (3, 4)), In("i", (), "i64", np.array(2, np.int64))]))
    specs.append(Spec("Gather", "known_index", [In("x", (5, 2)), Known("i", i64(4, 0, 0))]))
    specs.append(Spec("Gather", "i64_data", [In("x", (4,), "i64"), In("i", (2,), "i64", arr([3, 1], "i64"))]))
    ge = arr([[0, 1, 2], [2, -1, 0]], "i64")
    specs.append(Spec("GatherElements", "axis0", [In("x", (3, 3)), In("i", (2, 3), "i64", ge)]))
    specs.append(Spec("GatherElements", "axis1", [In("x", (2, 4)), In("i", (2, 3), "i64", ge)], {"axis": 1}))
    nd = {
        "k1": ((3, 4), arr([[2], [-1], [0]], "i64"), 0),
        "k2": ((2, 3, 4), arr([[0, 2], [1, -3]], "i64"), 0),
        "k3_scalars": ((2, 3, 4), arr([[[1, 2, 3]], [[0, -1, 0]]], "i64"), 0),
        "batch1": ((2, 3, 4), arr([[[1], [2]], [[0], [-1]]], "i64"), 1),
    }
    for variant, (shape, idx, batch) in nd.items():
        ins = [In("x", shape), In("i", idx.shape, "i64", idx)]
        specs.append(Spec("GatherND", variant, ins, {"batch_dims": batch}, opset=13))
    specs.append(Spec("GatherND", "i64_data", [In("x", (4, 2), "i64"), In("i", (2, 1), "i64", arr([[3], [0]], "i64"))]))
    specs.append(
        Spec(
            "GatherElements",
            "negative",
            [In("x", (2, 3, 4)), In("i", (2, 3, 1), "i32", arr([[[0], [3], [-1]], [[1], [2], [0]]], "i32"))],
            {"axis": -1},
        )
    )
    for reduction in ("none", "add", "mul", "max", "min"):
        specs.append(
            Spec(
                "ScatterElements",
                reduction,
                [In("x", (3, 3)), In("i", (2, 3), "i64", arr([[1, 0, 2], [0, 2, 1]], "i64")), In("u", (2, 3))],
                {"reduction": reduction} if reduction != "none" else {},
            )
        )
    specs.append(
        Spec(
            "ScatterElements",
            "axis1_negative",
            [In("x", (2, 5)), In("i", (2, 2), "i64", arr([[1, -1], [0, 2]], "i64")), In("u", (2, 2))],
            {"axis": 1},
        )
    )
    specs.append(
        Spec(
            "ScatterElements",
            "duplicates_add",
            [In("x", (4,)), In("i", (3,), "i64", arr([1, 1, 1], "i64")), In("u", (3,))],
            {"reduction": "add"},
        )
    )
    specs.append(
        Spec(
            "ScatterElements",
            "opset11",
            [In("x", (3, 3)), In("i", (1, 2), "i64", arr([[1, 0]], "i64")), In("u", (1, 2))],
            opset=11,
        )
    )
    specs.append(
        Spec(
            "Range",
            "f32",
            [
                Known("s", np.array(1.0, np.float32)),
                Known("l", np.array(5.5, np.float32)),
                Known("d", np.array(0.5, np.float32)),
            ],
        )
    )
    specs.append(
        Spec(
            "Range",
            "i64_negative",
            [
                Known("s", np.array(10, np.int64)),
                Known("l", np.array(-3, np.int64)),
                Known("d", np.array(-4, np.int64)),
            ],
        )
    )
    specs.append(
        Spec(
            "Range",
            "i32_empty",
            [Known("s", np.array(3, np.int32)), Known("l", np.array(3, np.int32)), Known("d", np.array(1, np.int32))],
        )
    )
    specs.append(Spec("ConstantOfShape", "default", [Known("s", i64(2, 3))]))
    specs.append(
        Spec(
            "ConstantOfShape",
            "i32_value",
            [Known("s", i64(4))],
            {"value": numpy_helper.from_array(np.array([7], np.int32))},
        )
    )
    specs.append(
        Spec(
            "ConstantOfShape",
            "rank0",
            [Known("s", np.zeros(0, np.int64))],
            {"value": numpy_helper.from_array(np.array([1.5], np.float32))},
        )
    )
    specs.append(
        Spec("Constant", "f32", [], {"value": numpy_helper.from_array(rng.standard_normal((2, 3)).astype(np.float32))})
    )
    specs.append(Spec("Constant", "value_ints", [], {"value_ints": [1, 2, 3]}))
    specs.append(Spec("Constant", "value_float", [], {"value_float": 2.5}))
    specs.append(Spec("Shape", "basic", [In("x", (2, 3, 4))]))
    specs.append(Spec("Shape", "start_end", [In("x", (2, 3, 4))], {"start": 1, "end": -1}))
    specs.append(Spec("Shape", "start_negative", [In("x", (2, 3, 4))], {"start": -1}))
    specs.append(Spec("Shape", "rank0", [In("x", ())]))
    specs.append(Spec("Size", "basic", [In("x", (2, 3, 4))]))
    specs.append(Spec("Size", "rank0", [In("x", ())]))
    for upper in (0, 1):
        specs.append(Spec("Trilu", f"upper{upper}", [In("x", (3, 4))], {"upper": upper}))
        specs.append(
            Spec("Trilu", f"upper{upper}_k", [In("x", (2, 4, 3)), Known("k", np.array(-1, np.int64))], {"upper": upper})
        )
        specs.append(
            Spec(
                "Trilu", f"upper{upper}_k_large", [In("x", (3, 3)), Known("k", np.array(5, np.int64))], {"upper": upper}
            )
        )
    specs.append(Spec("Trilu", "i64", [In("x", (3, 3), "i64"), Known("k", np.array(1, np.int64))]))
    for exclusive in (0, 1):
        for reverse in (0, 1):
            specs.append(
                Spec(
                    "CumSum",
                    f"e{exclusive}_r{reverse}",
                    [In("x", (3, 4)), Known("a", np.array(1, np.int64))],
                    {"exclusive": exclusive, "reverse": reverse},
                )
            )
    specs.append(Spec("CumSum", "negative_axis", [In("x", (2, 3, 4)), Known("a", np.array(-3, np.int32))]))
    specs.append(Spec("CumSum", "i32", [In("x", (5,), "i32"), Known("a", np.array(0, np.int64))]))
    specs.append(Spec("CumSum", "i64", [In("x", (2, 3), "i64"), Known("a", np.array(1, np.int64))]))
    for exclusive in (0, 1):
        for reverse in (0, 1):
            variant = f"e{exclusive}_r{reverse}"
            attrs = {"exclusive": exclusive, "reverse": reverse}
            axis = Known("a", np.array(1, np.int64))
            specs.append(Spec("CumProd", variant, [In("x", (3, 4)), axis], attrs, opset=26))
    specs.append(Spec("CumProd", "f16", [In("x", (2, 5), "f16"), Known("a", np.array(-1, np.int32))], opset=26))
    specs.append(Spec("CumProd", "i32", [In("x", (5,), "i32"), Known("a", np.array(0, np.int64))], opset=26))
    specs.append(Spec("EyeLike", "k1", [In("x", (3, 5), "i32")], {"k": 1, "dtype": TensorProto.FLOAT}))
    specs.append(Spec("EyeLike", "k_minus2", [In("x", (4, 3))], {"k": -2}))
    specs.append(Spec("EyeLike", "k_past_end", [In("x", (2, 3), "i64")], {"k": 5}))
    mask = arr([[0, 1, 0, 2], [0, 0, 0, 0], [3, 0, 4, 0]], "f32")
    specs.append(Spec("NonZero", "f32", [In("x", (3, 4), "f32", mask)], opset=13))
    specs.append(Spec("NonZero", "bool_3d", [In("x", (2, 2, 3), "bool", mask.reshape(2, 2, 3) != 0)], opset=13))
    keep = arr([1, 0, 1], "bool")
    specs.append(Spec("Compress", "axis0", [In("x", (3, 4)), In("c", (3,), "bool", keep)], {"axis": 0}, opset=11))
    specs.append(
        Spec("Compress", "axis_m1_short", [In("x", (2, 4)), In("c", (3,), "bool", keep)], {"axis": -1}, opset=11)
    )
    specs.append(Spec("Compress", "flat", [In("x", (2, 2)), In("c", (3,), "bool", keep)], opset=11))
    repeats = arr([2, 1, 1, 3, 2, 7, 1], "f32")
    specs.append(Spec("Unique", "sorted", [In("x", (7,), "f32", repeats)], outputs=4, opset=11))
    specs.append(Spec("Unique", "unsorted", [In("x", (7,), "f32", repeats)], {"sorted": 0}, outputs=4, opset=11))
    rows = arr([[1, 2], [3, 4], [1, 2], [0, 9]], "i64")
    specs.append(Spec("Unique", "axis0", [In("x", (4, 2), "i64", rows)], {"axis": 0}, outputs=4, opset=11))
    # TensorScatter (opset 24): a KV cache written from each batch row's index along the sequence axis.
    cache = [In("past", (3, 2, 6, 4)), In("update", (3, 2, 2, 4))]
    specs.append(Spec("TensorScatter", "linear", [*cache, In("w", (3,), "i64", i64(0, 4, 2))], opset=24))
    circular = {"mode": "circular"}
    specs.append(Spec("TensorScatter", "circular", [*cache, In("w", (3,), "i64", i64(5, 0, 9))], circular, opset=24))
    specs.append(Spec("TensorScatter", "no_indices", cache, opset=24))
    ins = [In("past", (2, 5, 3), "i64"), In("update", (2, 3, 3), "i64"), In("w", (2,), "i64", i64(2, 1))]
    specs.append(Spec("TensorScatter", "axis1_i64", ins, {"axis": 1}, opset=24))
    ins = [In("past", (2, 4, 3), "f16"), In("update", (2, 4, 3), "f16"), In("w", (2,), "i64", i64(3, 1))]
    specs.append(Spec("TensorScatter", "f16_full_circular", ins, {"axis": -2, "mode": "circular"}, opset=24))
    run_bounds = [
        In("s", (), "f32", arr(1.5, "f32")),
        In("l", (), "f32", arr(-2.0, "f32")),
        In("d", (), "f32", arr(-0.75, "f32")),
    ]
    specs.append(Spec("Range", "run_time_f32", run_bounds, opset=11))
    ints = [In("s", (), "i64", arr(-3, "i64")), In("l", (), "i64", arr(10, "i64")), In("d", (), "i64", arr(4, "i64"))]
    specs.append(Spec("Range", "run_time_i64", ints, opset=11))
    grow = [In("x", (3, 1), "f32", arr([[1.0], [2.0], [3.0]], "f32")), In("shape", (3,), "i64", i64(2, 1, 4))]
    specs.append(Spec("Expand", "run_time_shape", grow, opset=13))
    return specs


REDUCE = (
    "ReduceSum",
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSumExp",
    "ReduceSumSquare",
)
REDUCE_AXES_INPUT_SINCE = {op: 18 for op in REDUCE} | {"ReduceSum": 13}


def reductions(rng: np.random.Generator) -> list[Spec]:
    specs: list[Spec] = []
    for op in (*REDUCE, "ReduceLogSum"):
        values = np.abs(rng.standard_normal((2, 3, 4))).astype(np.float32) + 0.1 if op == "ReduceLogSum" else None
        x = In("x", (2, 3, 4), "f32", values)
        since = REDUCE_AXES_INPUT_SINCE.get(op, 18)
        for keepdims in (0, 1):
            specs.append(Spec(op, f"axes_k{keepdims}", [x, Known("a", i64(0, -1))], {"keepdims": keepdims}))
            specs.append(Spec(op, f"all_k{keepdims}", [x], {"keepdims": keepdims}))
            specs.append(
                Spec(
                    op,
                    f"attr_k{keepdims}",
                    [x],
                    {"axes": [1], "keepdims": keepdims},
                    opset=since - 1 if since > 13 else 11,
                )
            )
        specs.append(Spec(op, "empty_axes_noop", [x, Known("a", np.zeros(0, np.int64))], {"noop_with_empty_axes": 1}))
        specs.append(Spec(op, "empty_axes_all", [x, Known("a", np.zeros(0, np.int64))]))
        specs.append(Spec(op, "noop_no_axes", [x], {"noop_with_empty_axes": 1}))
        specs.append(Spec(op, "attr_negative", [x], {"axes": [-2]}, opset=11))
        specs.append(
            Spec(
                op,
                "extent1",
                [In("x", (1, 3, 1), "f32", None if values is None else values[:1, :, :1])],
                {"keepdims": 0},
            )
        )
        specs.append(
            Spec(
                op,
                "f16",
                [In("x", (3, 4), "f16", None if values is None else values[0].astype(np.float16)), Known("a", i64(1))],
            )
        )
    for op in ("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd"):
        specs.append(Spec(op, "i64", [In("x", (3, 4), "i64"), Known("a", i64(1))]))
        specs.append(Spec(op, "i32", [In("x", (3, 4), "i32"), Known("a", i64(0))]))
    for op in ("ReduceMax", "ReduceMin"):
        specs.append(
            Spec(op, "nan", [In("x", (2, 6), "f32", np.stack([SPECIAL[:6], SPECIAL[6:]])), Known("a", i64(1))])
        )
        specs.append(Spec(op, "ui8", [In("x", (3, 4), "ui8"), Known("a", i64(1))]))
    specs.append(
        Spec("ReduceSum", "i32_overflow", [In("x", (3,), "i32", arr([2**31 - 1, 1, 5], "i32"))], {"keepdims": 0})
    )
    specs.append(
        Spec(
            "ReduceLogSumExp",
            "large",
            [In("x", (2, 3), "f32", arr([[1000, 1000, 999], [-1000, -1000, 0]], "f32")), Known("a", i64(1))],
        )
    )
    # ArgMax / ArgMin / TopK
    ties = arr([[1, 3, 3, 2], [5, 5, 1, 5], [0, 0, 0, 0]], "f32")
    for op in ("ArgMax", "ArgMin"):
        for keepdims in (0, 1):
            specs.append(Spec(op, f"axis1_k{keepdims}", [In("x", (3, 4))], {"axis": 1, "keepdims": keepdims}))
        specs.append(Spec(op, "default", [In("x", (3, 4))]))
        specs.append(Spec(op, "negative_axis", [In("x", (2, 3, 4))], {"axis": -2}))
        specs.append(Spec(op, "ties_first", [In("x", (3, 4), "f32", ties)], {"axis": 1}))
        specs.append(Spec(op, "ties_last", [In("x", (3, 4), "f32", ties)], {"axis": 1, "select_last_index": 1}))
        specs.append(Spec(op, "i32", [In("x", (3, 4), "i32")], {"axis": 0}))
        specs.append(Spec(op, "opset11", [In("x", (3, 4))], {"axis": 1}, opset=11))
    for largest in (0, 1):
        specs.append(
            Spec("TopK", f"largest{largest}", [In("x", (3, 5)), Known("k", i64(2))], {"largest": largest}, outputs=2)
        )
    specs.append(Spec("TopK", "axis0", [In("x", (4, 3)), Known("k", i64(3))], {"axis": 0}, outputs=2))
    specs.append(Spec("TopK", "negative_axis", [In("x", (2, 4, 3)), Known("k", i64(1))], {"axis": -2}, outputs=2))
    specs.append(Spec("TopK", "ties", [In("x", (3, 4), "f32", ties), Known("k", i64(2))], outputs=2))
    specs.append(Spec("TopK", "i64", [In("x", (6,), "i64"), Known("k", i64(6))], outputs=2))
    specs.append(Spec("TopK", "opset1", [In("x", (3, 5))], {"k": 2}, outputs=2, opset=1))
    # Softmax family
    for op in ("Softmax", "LogSoftmax", "Hardmax"):
        for axis in (0, 1, -1):
            specs.append(Spec(op, f"axis{axis}".replace("-", "m"), [In("x", (2, 3, 4))], {"axis": axis}))
        specs.append(Spec(op, "default", [In("x", (2, 3, 4))]))
        specs.append(Spec(op, "opset11_flatten", [In("x", (2, 3, 4))], {"axis": 1}, opset=11))
        specs.append(Spec(op, "opset11_default", [In("x", (2, 3, 4))], opset=11))
        specs.append(Spec(op, "opset1_axis2", [In("x", (2, 3, 4))], {"axis": 2}, opset=1))
        specs.append(Spec(op, "f16", [In("x", (3, 4), "f16")]))
        specs.append(Spec(op, "f64", [In("x", (3, 4), "f64")]))
    specs.append(Spec("Softmax", "large", [In("x", (2, 3), "f32", arr([[1000, 1000, 999], [-1e30, 0, 1]], "f32"))]))
    specs.append(Spec("Hardmax", "ties", [In("x", (3, 4), "f32", ties)]))
    return specs


def linear(rng: np.random.Generator) -> list[Spec]:
    specs: list[Spec] = []
    for variant, sa, sb in (
        ("2d", (3, 4), (4, 5)),
        ("1d_1d", (4,), (4,)),
        ("1d_2d", (4,), (4, 5)),
        ("2d_1d", (3, 4), (4,)),
        ("3d", (2, 3, 4), (2, 4, 5)),
        ("batch_bcast", (2, 1, 3, 4), (3, 4, 5)),
        ("4d", (2, 2, 3, 4), (2, 2, 4, 2)),
        ("3d_2d", (2, 3, 4), (4, 5)),
        ("1d_3d", (4,), (2, 4, 3)),
    ):
        specs.append(Spec("MatMul", variant, [In("a", sa), In("b", sb)]))
    for dt in ("f64", "f16", "bf16", "i32", "i64"):
        specs.append(Spec("MatMul", dt, [In("a", (3, 4), dt), In("b", (4, 2), dt)]))
    specs.append(
        Spec("MatMul", "weight", [In("a", (3, 4)), Known("w", rng.standard_normal((4, 2)).astype(np.float32))])
    )
    for ta in (0, 1):
        for tb in (0, 1):
            sa, sb = ((4, 3) if ta else (3, 4)), ((5, 4) if tb else (4, 5))
            specs.append(
                Spec(
                    "Gemm", f"ta{ta}_tb{tb}", [In("a", sa), In("b", sb), In("c", (3, 5))], {"transA": ta, "transB": tb}
                )
            )
    specs.append(
        Spec("Gemm", "alpha_beta", [In("a", (3, 4)), In("b", (4, 5)), In("c", (5,))], {"alpha": 0.5, "beta": 2.0})
    )
    specs.append(Spec("Gemm", "c_scalar", [In("a", (3, 4)), In("b", (4, 5)), In("c", ())]))
    specs.append(Spec("Gemm", "c_column", [In("a", (3, 4)), In("b", (4, 5)), In("c", (3, 1))]))
    specs.append(Spec("Gemm", "no_c", [In("a", (3, 4)), In("b", (4, 5))]))
    specs.append(Spec("Gemm", "f64", [In("a", (3, 4), "f64"), In("b", (4, 5), "f64"), In("c", (5,), "f64")]))
    specs.append(
        Spec("Gemm", "opset6_broadcast", [In("a", (3, 4)), In("b", (4, 5)), In("c", (5,))], {"broadcast": 1}, opset=6)
    )
    specs.append(Spec("Gemm", "opset9", [In("a", (3, 4)), In("b", (5, 4)), In("c", (1, 5))], {"transB": 1}, opset=9))
    specs.append(
        Spec(
            "Gemm",
            "weights",
            [
                In("a", (2, 4)),
                Known("w", rng.standard_normal((3, 4)).astype(np.float32)),
                Known("c", rng.standard_normal(3).astype(np.float32)),
            ],
            {"transB": 1},
        )
    )
    for eq, shapes in (
        ("ij,jk->ik", ((3, 4), (4, 5))),
        ("bij,bjk->bik", ((2, 3, 4), (2, 4, 5))),
        ("ij->ji", ((3, 4),)),
        ("ii->i", ((3, 3),)),
        ("ij->", ((3, 4),)),
        ("i,i->", ((4,), (4,))),
        ("i,j->ij", ((3,), (4,))),
        ("...ij,...jk->...ik", ((2, 3, 4), (2, 4, 5))),
        ("bhqd,bhkd->bhqk", ((1, 2, 3, 4), (1, 2, 5, 4))),
        ("ij,ij->i", ((3, 4), (3, 4))),
        ("ij", ((3, 4),)),
    ):
        variant = eq.replace("->", "_to_").replace(",", "_").replace("...", "ell") or "x"
        specs.append(Spec("Einsum", variant, [In(f"x{i}", s) for i, s in enumerate(shapes)], {"equation": eq}))
    specs.append(Spec("Einsum", "f64", [In("x0", (3, 4), "f64"), In("x1", (4, 2), "f64")], {"equation": "ij,jk->ik"}))
    specs.append(Spec("Einsum", "i64", [In("x0", (3, 4), "i64"), In("x1", (4, 2), "i64")], {"equation": "ij,jk->ik"}))
    specs.append(Spec("Det", "batch", [In("x", (2, 3, 4, 4))]))
    specs.append(Spec("Det", "singular", [In("x", (3, 3), "f32", arr([[1, 2, 3], [2, 4, 6], [0, 1, 5]], "f32"))]))
    specs.append(Spec("Det", "f64", [In("x", (5, 5), "f64")]))
    return specs


def conv(rng: np.random.Generator) -> list[Spec]:
    specs: list[Spec] = []
    base = [
        ("1d", (1, 2, 7), (3, 2, 3), {}),
        ("2d", (1, 2, 5, 5), (3, 2, 3, 3), {}),
        ("3d", (1, 2, 4, 4, 4), (2, 2, 2, 2, 2), {}),
        ("strides", (1, 1, 7, 6), (2, 1, 3, 3), {"strides": [2, 2]}),
        ("pads", (1, 1, 5, 5), (2, 1, 3, 3), {"pads": [1, 1, 1, 1]}),
        ("asymmetric_pads", (1, 1, 5, 6), (2, 1, 3, 2), {"pads": [0, 1, 2, 0]}),
        ("dilations", (1, 1, 7, 7), (1, 1, 3, 3), {"dilations": [2, 1]}),
        ("groups", (1, 4, 5, 5), (6, 2, 3, 3), {"group": 2}),
        ("depthwise", (2, 3, 5, 5), (3, 1, 3, 3), {"group": 3}),
        ("same_upper", (1, 1, 5, 6), (1, 1, 2, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
        ("same_lower", (1, 1, 5, 6), (1, 1, 2, 3), {"auto_pad": "SAME_LOWER"}),
        ("valid", (1, 1, 5, 6), (1, 1, 2, 3), {"auto_pad": "VALID"}),
        ("kernel_shape", (1, 1, 4, 4), (1, 1, 3, 3), {"kernel_shape": [3, 3]}),
        ("1x1", (2, 3, 4, 4), (5, 3, 1, 1), {}),
        ("all", (1, 4, 9, 8), (4, 2, 3, 2), {"group": 2, "strides": [2, 3], "dilations": [2, 1], "pads": [1, 0, 2, 1]}),
    ]
    for variant, sx, sw, attrs in base:
        specs.append(Spec("Conv", variant, [In("x", sx), In("w", sw)], attrs))
    specs.append(Spec("Conv", "bias", [In("x", (1, 2, 5, 5)), In("w", (3, 2, 3, 3)), In("b", (3,))]))
    specs.append(
        Spec(
            "Conv",
            "weights",
            [
                In("x", (1, 2, 5, 5)),
                Known("w", rng.standard_normal((3, 2, 3, 3)).astype(np.float32)),
                Known("b", rng.standard_normal(3).astype(np.float32)),
            ],
        )
    )
    specs.append(Spec("Conv", "f64", [In("x", (1, 2, 5, 5), "f64"), In("w", (3, 2, 3, 3), "f64")]))
    specs.append(Spec("Conv", "f16", [In("x", (1, 2, 5, 5), "f16"), In("w", (3, 2, 3, 3), "f16")]))
    specs.append(
        Spec("Conv", "opset1", [In("x", (1, 2, 5, 5)), In("w", (3, 2, 3, 3))], {"pads": [1, 1, 1, 1]}, opset=1)
    )
    tbase = [
        ("1d", (1, 2, 5), (2, 3, 3), {}),
        ("2d", (1, 2, 3, 3), (2, 3, 3, 3), {}),
        ("strides", (1, 1, 3, 3), (1, 2, 3, 3), {"strides": [2, 2]}),
        ("pads", (1, 1, 4, 4), (1, 2, 3, 3), {"pads": [1, 0, 1, 2], "strides": [2, 1]}),
        ("output_padding", (1, 1, 3, 3), (1, 1, 3, 3), {"strides": [3, 2], "output_padding": [1, 1]}),
        ("dilations", (1, 1, 3, 3), (1, 1, 2, 2), {"dilations": [2, 2]}),
        ("groups", (1, 4, 3, 3), (4, 1, 3, 3), {"group": 2}),
        ("same_upper", (1, 1, 3, 4), (1, 2, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
        ("same_lower", (1, 1, 3, 4), (1, 2, 3, 3), {"auto_pad": "SAME_LOWER", "strides": [2, 2]}),
        ("output_shape", (1, 1, 3, 3), (1, 2, 3, 3), {"strides": [3, 2], "output_shape": [10, 8]}),
        ("3d", (1, 1, 2, 3, 3), (1, 2, 2, 2, 2), {}),
    ]
    for variant, sx, sw, attrs in tbase:
        specs.append(Spec("ConvTranspose", variant, [In("x", sx), In("w", sw)], attrs))
    specs.append(Spec("ConvTranspose", "bias", [In("x", (1, 2, 3, 3)), In("w", (2, 3, 3, 3)), In("b", (3,))]))
    # pooling
    pools = [
        ("1d", (1, 2, 7), {"kernel_shape": [3]}),
        ("2d", (1, 2, 5, 5), {"kernel_shape": [2, 2]}),
        ("3d", (1, 1, 4, 4, 4), {"kernel_shape": [2, 2, 2]}),
        ("strides", (1, 1, 7, 6), {"kernel_shape": [3, 3], "strides": [2, 2]}),
        ("pads", (1, 1, 5, 5), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
        ("asymmetric_pads", (1, 1, 5, 6), {"kernel_shape": [3, 2], "pads": [0, 1, 2, 0]}),
        ("ceil", (1, 1, 6, 6), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
        ("ceil_pads", (1, 1, 5, 5), {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1}),
        ("same_upper", (1, 1, 5, 6), {"kernel_shape": [2, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
        ("same_lower", (1, 1, 5, 6), {"kernel_shape": [2, 3], "auto_pad": "SAME_LOWER"}),
        ("valid", (1, 1, 5, 6), {"kernel_shape": [2, 3], "auto_pad": "VALID"}),
    ]
    # onnx's shape inference (1.23) keeps ceil_pads' last window, which starts in the end padding
    # (4 x 4); ONNX's text, onnxruntime and the reference evaluator drop it (3 x 3).  The checker
    # re-runs inference, so those extents are declared unknown; the harness still compares shapes.
    declared: dict[str, tuple[int | None, ...]] = {"ceil_pads": (1, 1, None, None)}
    for variant, sx, attrs in pools:
        out = declared.get(variant)
        specs.append(Spec("MaxPool", variant, [In("x", sx)], attrs, out_shape=out))
        specs.append(Spec("AveragePool", variant, [In("x", sx)], attrs, out_shape=out))
        specs.append(Spec("LpPool", variant, [In("x", sx)], {k: v for k, v in attrs.items()}, out_shape=out))
    # ceil_mode: the one window of the short axis overruns the (unpadded) input, and still counts.
    overrun = {"kernel_shape": [2, 2], "strides": [3, 1], "ceil_mode": 1}
    for op in ("MaxPool", "AveragePool", "LpPool"):
        specs.append(Spec(op, "ceil_overrun", [In("x", (1, 1, 1, 5))], overrun))
    # SAME with a kernel shorter than its stride: a negative pad, so the windows skip the first element
    # (onnxruntime's MaxPool refuses negative pads; its AveragePool and LpPool read them so).
    for op in ("AveragePool", "LpPool"):
        specs.append(
            Spec(
                op,
                "same_short_kernel",
                [In("x", (1, 1, 6, 7))],
                {"kernel_shape": [1, 2], "strides": [3, 4], "auto_pad": "SAME_UPPER"},
            )
        )
    # NaN through onnxruntime's MaxPool scan (Indices, dilations): the first tap stays unless a later
    # one is strictly greater, so a NaN first tap wins, a later NaN never does; an all-NaN window is NaN.
    nans = np.array([[np.nan, np.nan, np.nan, 1, 2, np.nan], [-np.inf, -np.inf, 0.5, np.nan, 3, 1]], np.float32)
    specs.append(
        Spec(
            "MaxPool",
            "nan_indices",
            [In("x", (1, 1, 2, 6), "f32", nans.reshape(1, 1, 2, 6))],
            {"kernel_shape": [1, 2], "strides": [1, 2]},
            outputs=2,
        )
    )
    specs.append(
        Spec(
            "MaxPool",
            "nan_dilations",
            [In("x", (1, 1, 12), "f32", nans.reshape(1, 1, 12))],
            {"kernel_shape": [2], "dilations": [2], "strides": [2]},
        )
    )
    specs.append(Spec("MaxPool", "dilations", [In("x", (1, 1, 7, 7))], {"kernel_shape": [2, 2], "dilations": [2, 2]}))
    specs.append(
        Spec("MaxPool", "indices", [In("x", (1, 2, 4, 4))], {"kernel_shape": [2, 2], "strides": [2, 2]}, outputs=2)
    )
    specs.append(
        Spec("MaxPool", "nan", [In("x", (1, 1, 2, 6), "f32", SPECIAL.reshape(1, 1, 2, 6))], {"kernel_shape": [2, 2]})
    )
    specs.append(Spec("MaxPool", "f16", [In("x", (1, 2, 4, 4), "f16")], {"kernel_shape": [2, 2]}))
    specs.append(Spec("MaxPool", "i8", [In("x", (1, 2, 4, 4), "i8")], {"kernel_shape": [2, 2]}))
    specs.append(Spec("MaxPool", "ui8", [In("x", (1, 2, 4, 4), "ui8")], {"kernel_shape": [2, 2]}))
    specs.append(Spec("MaxPool", "opset1", [In("x", (1, 1, 4, 4))], {"kernel_shape": [2, 2]}, opset=1))
    specs.append(Spec("MaxPool", "opset8_storage", [In("x", (1, 1, 4, 4))], {"kernel_shape": [2, 2]}, opset=8))
    specs.append(
        Spec(
            "AveragePool",
            "count_include_pad",
            [In("x", (1, 1, 5, 5))],
            {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
        )
    )
    specs.append(
        Spec(
            "AveragePool",
            "ceil_count_include_pad",
            [In("x", (1, 1, 5, 5))],
            {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1, "count_include_pad": 1},
        )
    )
    specs.append(
        Spec("AveragePool", "dilations", [In("x", (1, 1, 7, 7))], {"kernel_shape": [2, 2], "dilations": [2, 2]})
    )
    specs.append(Spec("AveragePool", "f16", [In("x", (1, 2, 4, 4), "f16")], {"kernel_shape": [2, 2]}))
    specs.append(
        Spec("AveragePool", "opset7", [In("x", (1, 1, 4, 4))], {"kernel_shape": [2, 2], "pads": [1, 1, 1, 1]}, opset=7)
    )
    specs.append(Spec("LpPool", "p1", [In("x", (1, 2, 5, 5))], {"kernel_shape": [2, 2], "p": 1}))
    specs.append(Spec("LpPool", "p3", [In("x", (1, 2, 5, 5))], {"kernel_shape": [3, 3], "p": 3, "strides": [2, 2]}))
    for op in ("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"):
        specs.append(Spec(op, "2d", [In("x", (2, 3, 4, 5))]))
        specs.append(Spec(op, "1d", [In("x", (1, 3, 4))]))
        specs.append(Spec(op, "3d", [In("x", (1, 2, 2, 3, 2))]))
        specs.append(Spec(op, "extent1", [In("x", (1, 1, 1, 1))]))
    specs.append(Spec("GlobalMaxPool", "f16", [In("x", (1, 2, 3, 3), "f16")]))
    specs.extend(quantized_conv(np.random.default_rng(10)))
    # Col2Im: (N, C * prod(block), L) onto (N, C, *image); image and block shapes are initializers.
    col2im = [
        ("basic", (1, 6, 9), (4, 5), (2, 3), {}),
        ("strides_pads", (2, 8, 9), (5, 6), (2, 2), {"strides": [2, 2], "pads": [1, 0, 0, 1]}),
        ("dilations", (1, 4, 6), (4, 6), (2, 2), {"dilations": [2, 3]}),
        ("overlap_channels", (1, 18, 9), (5, 5), (3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ]
    for variant, sx, image, block, attrs in col2im:
        ins = [In("x", sx), Known("image", i64(*image)), Known("block", i64(*block))]
        specs.append(Spec("Col2Im", variant, ins, attrs))
    ins = [In("x", (1, 2, 45)), Known("image", i64(3, 4, 5)), Known("block", i64(1, 2, 1))]
    specs.append(Spec("Col2Im", "3d", ins))
    # MaxUnpool: indices are flat positions in the whole output (N, C, *spatial), as MaxPool's count.
    idx = i64(5, 7, 13, 15, 16, 19, 28, 31).reshape(1, 2, 2, 2)
    unpool = {"kernel_shape": [2, 2], "strides": [2, 2]}
    specs.append(Spec("MaxUnpool", "basic", [In("x", (1, 2, 2, 2)), In("i", (1, 2, 2, 2), "i64", idx)], unpool))
    ins = [In("x", (1, 2, 2, 2)), In("i", (1, 2, 2, 2), "i64", i64(0, 3, 12, 18, 25, 29, 42, 49).reshape(1, 2, 2, 2))]
    out = (1, 2, 5, 5)
    specs.append(Spec("MaxUnpool", "output_shape", [*ins, Known("shape", i64(*out))], unpool, out_shape=out))
    ins = [In("x", (2, 1, 3)), In("i", (2, 1, 3), "i64", i64(0, 2, 5, 7, 9, 11).reshape(2, 1, 3))]
    specs.append(Spec("MaxUnpool", "1d_pads", ins, {"kernel_shape": [3], "strides": [2], "pads": [1, 0]}))
    ins = [In("x", (1, 1, 2, 2)), In("i", (1, 1, 2, 2), "i64", i64(5, 5, 0, 5).reshape(1, 1, 2, 2))]
    specs.append(Spec("MaxUnpool", "duplicates", ins, unpool))
    ins = [In("x", (1, 1, 1, 2, 2)), In("i", (1, 1, 1, 2, 2), "i64", i64(0, 3, 9, 15).reshape(1, 1, 1, 2, 2))]
    specs.append(Spec("MaxUnpool", "3d", ins, {"kernel_shape": [2, 2, 2], "strides": [2, 2, 2]}))
    # RoiAlign: regions (x1, y1, x2, y2) in input pixels (times spatial_scale), of varied sizes, some
    # reaching past the map, one malformed (x2 < x1).
    boxes = [[0, 0, 9, 7], [1.5, 2.25, 6.5, 5.0], [4, 3, 4.5, 3.2], [-3, -2, 12, 10], [6, 1, 2, 6.5]]
    rois = In("rois", (5, 4), "f32", arr(boxes, "f32"))
    which = In("b", (5,), "i64", i64(0, 1, 1, 0, 1))
    region = [In("x", (2, 3, 8, 10)), rois, which]
    roi = [
        ("avg", {"output_height": 3, "output_width": 4, "sampling_ratio": 2}),
        ("avg_adaptive", {"output_height": 2, "output_width": 3, "spatial_scale": 0.75}),
        ("max", {"mode": "max", "output_height": 3, "output_width": 3, "sampling_ratio": 2}),
        ("max_adaptive", {"mode": "max", "output_height": 2, "output_width": 2}),
        ("output_half_pixel", {"coordinate_transformation_mode": "output_half_pixel", "output_height": 4}),
    ]
    # onnxruntime refuses a malformed region with an adaptive grid under half_pixel (a negative count).
    formed = [
        In("x", (2, 3, 8, 10)),
        In("rois", (4, 4), "f32", arr(boxes[:4], "f32")),
        In("b", (4,), "i64", i64(0, 1, 1, 0)),
    ]
    for variant, attrs in roi:
        specs.append(Spec("RoiAlign", variant, formed if variant.endswith("adaptive") else region, attrs))
    specs.append(Spec("RoiAlign", "opset10", region, {"output_height": 2, "output_width": 2}, opset=10))
    ins = [In("x", (2, 3, 8, 10), "f64"), In("rois", (5, 4), "f64", arr(boxes, "f64")), which]
    specs.append(Spec("RoiAlign", "f64", ins, {"output_height": 3, "output_width": 2, "sampling_ratio": 3}))
    # DeformConv: seeded normal offsets move the taps to fractional places, some past the map's edge.
    ins = [In("x", (1, 2, 5, 5)), In("w", (3, 2, 3, 3)), In("offset", (1, 18, 3, 3))]
    specs.append(Spec("DeformConv", "basic", ins))
    ins = [In("x", (1, 2, 6, 7)), In("w", (2, 2, 2, 3)), In("offset", (1, 12, 4, 4))]
    geometry = {"pads": [1, 0, 2, 1], "strides": [2, 1], "dilations": [1, 2]}
    specs.append(Spec("DeformConv", "pads_strides_dilations", ins, geometry))
    ins = [In("x", (2, 4, 5, 6)), In("w", (4, 2, 2, 2)), In("offset", (2, 16, 4, 5)), In("b", (4,)),
           In("mask", (2, 8, 4, 5))]  # fmt: skip
    specs.append(Spec("DeformConv", "groups_mask_bias", ins, {"group": 2, "offset_group": 2}))
    ins = [In("x", (1, 2, 4, 4)), In("w", (1, 2, 2, 2)), In("offset", (1, 8, 3, 3)), None, In("mask", (1, 4, 3, 3))]
    specs.append(Spec("DeformConv", "mask_only", ins))
    ins = [In("x", (1, 1, 4, 5), "f64"), In("w", (2, 1, 3, 3), "f64"), In("offset", (1, 18, 4, 5), "f64")]
    specs.append(Spec("DeformConv", "f64", ins, {"pads": [1, 1, 1, 1]}))
    far = (np.random.default_rng(11).standard_normal((1, 8, 4, 4)) * 4).astype(np.float32)
    ins = [In("x", (1, 1, 4, 4)), In("w", (1, 1, 2, 2)), In("offset", (1, 8, 4, 4), "f32", far)]
    specs.append(Spec("DeformConv", "far_offsets", ins, {"pads": [1, 1, 0, 0]}))
    return specs


def quantized_conv(rng: np.random.Generator) -> list[Spec]:
    """ConvInteger and QLinearConv over full-range i8/ui8 values (their own generator, so the draws of
    the families after conv stay as they were)."""

    def q(name: str, shape: tuple[int, ...], dtype: str) -> In:
        low, high = (0, 256) if dtype == "ui8" else (-128, 128)
        return In(name, shape, dtype, rng.integers(low, high, shape).astype(NP[dtype]))

    def one(name: str, value: float | int, dtype: str) -> In:
        return In(name, (), dtype, arr(value, dtype))

    specs: list[Spec] = []
    x, w = q("x", (1, 2, 5, 5), "ui8"), q("w", (3, 2, 3, 3), "ui8")
    zx, zw = one("zx", 120, "ui8"), one("zw", 7, "ui8")
    specs.append(Spec("ConvInteger", "pads", [x, w, zx, zw], {"pads": [1, 1, 1, 1]}))
    specs.append(Spec("ConvInteger", "no_zero_points", [x, w]))
    specs.append(Spec("ConvInteger", "x_zero_only", [x, w, zx], {"strides": [2, 1], "dilations": [1, 2]}))
    specs.append(Spec("ConvInteger", "same_upper", [x, w, zx, zw], {"auto_pad": "SAME_UPPER"}))
    xg, wg = q("x", (2, 4, 4, 6), "ui8"), q("w", (4, 2, 2, 3), "ui8")
    specs.append(Spec("ConvInteger", "groups", [xg, wg, zx], {"group": 2, "pads": [0, 1, 1, 0]}))
    xi, wi = q("x", (1, 2, 6), "i8"), q("w", (2, 2, 3), "i8")
    specs.append(Spec("ConvInteger", "i8_1d", [xi, wi, one("zx", -3, "i8"), one("zw", 2, "i8")]))
    scales = [one("sx", 0.02, "f32")]
    ins = [x, *scales, zx, w, one("sw", 0.01, "f32"), zw, one("sy", 0.3, "f32"), one("zy", 100, "ui8")]
    specs.append(Spec("QLinearConv", "ui8", ins, {"pads": [1, 1, 1, 1]}))
    bias = In("b", (3,), "i32", arr([-5000, 0, 12345], "i32"))
    specs.append(Spec("QLinearConv", "ui8_bias", [*ins, bias], {"strides": [2, 2]}))
    wsi = In("sw", (4,), "f32", arr([0.01, 0.02, 0.005, 0.04], "f32"))
    wzi = In("zw", (4,), "i8", arr([0, 0, 0, 0], "i8"))
    ins = [q("x", (1, 4, 5, 5), "i8"), one("sx", 0.05, "f32"), one("zx", 3, "i8"), q("w", (4, 2, 3, 3), "i8"), wsi,
           wzi, one("sy", 0.9, "f32"), one("zy", -10, "i8")]  # fmt: skip
    specs.append(Spec("QLinearConv", "i8_per_channel", ins, {"group": 2, "dilations": [2, 1]}))
    ins = [x, one("sx", 0.02, "f32"), zx, q("w", (3, 2, 3, 3), "i8"), one("sw", 0.01, "f32"), one("zw", 0, "i8"),
           one("sy", 0.05, "f32"), one("zy", 128, "ui8")]  # fmt: skip
    specs.append(Spec("QLinearConv", "ui8_i8_saturate", ins, {"auto_pad": "SAME_LOWER"}))
    return specs


def normalization(rng: np.random.Generator) -> list[Spec]:
    specs: list[Spec] = []

    def var(n: int, dt: str = "f32") -> np.ndarray:
        return (np.abs(rng.standard_normal(n)) + 0.5).astype(NP[dt])

    for variant, shape in (("2d", (2, 3, 4, 4)), ("1d", (2, 3, 5)), ("0d", (4, 3)), ("3d", (1, 3, 2, 2, 2))):
        c = shape[1]
        specs.append(
            Spec(
                "BatchNormalization",
                variant,
                [In("x", shape), In("s", (c,)), In("b", (c,)), In("m", (c,)), In("v", (c,), "f32", var(c))],
            )
        )
    specs.append(
        Spec(
            "BatchNormalization",
            "epsilon",
            [In("x", (2, 3, 2)), In("s", (3,)), In("b", (3,)), In("m", (3,)), In("v", (3,), "f32", var(3))],
            {"epsilon": 0.1},
        )
    )
    specs.append(
        Spec(
            "BatchNormalization",
            "weights",
            [
                In("x", (2, 3, 2, 2)),
                *(Known(n, rng.standard_normal(3).astype(np.float32)) for n in "sbm"),
                Known("v", var(3)),
            ],
        )
    )
    specs.append(
        Spec(
            "BatchNormalization",
            "f16",
            [
                In("x", (2, 3, 2), "f16"),
                In("s", (3,), "f16"),
                In("b", (3,), "f16"),
                In("m", (3,), "f16"),
                In("v", (3,), "f16", var(3, "f16")),
            ],
        )
    )
    specs.append(
        Spec(
            "BatchNormalization",
            "f16_f32_params",
            [In("x", (2, 3, 2), "f16"), In("s", (3,)), In("b", (3,)), In("m", (3,)), In("v", (3,), "f32", var(3))],
        )
    )
    for opset in (7, 9, 14):
        specs.append(
            Spec(
                "BatchNormalization",
                f"opset{opset}",
                [In("x", (2, 3, 2, 2)), In("s", (3,)), In("b", (3,)), In("m", (3,)), In("v", (3,), "f32", var(3))],
                opset=opset,
            )
        )
    for variant, shape in (("2d", (2, 3, 4, 5)), ("1d", (2, 3, 5)), ("3d", (1, 2, 2, 3, 2))):
        c = shape[1]
        specs.append(Spec("InstanceNormalization", variant, [In("x", shape), In("s", (c,)), In("b", (c,))]))
    specs.append(
        Spec("InstanceNormalization", "epsilon", [In("x", (2, 3, 4)), In("s", (3,)), In("b", (3,))], {"epsilon": 0.01})
    )
    specs.append(
        Spec("InstanceNormalization", "f16", [In("x", (2, 3, 4), "f16"), In("s", (3,), "f16"), In("b", (3,), "f16")])
    )
    for axis in (-1, 1, 0, -2):
        norm = (2, 3, 4)[axis:]
        variant = f"axis{axis}".replace("-", "m")
        specs.append(
            Spec("LayerNormalization", variant, [In("x", (2, 3, 4)), In("s", norm), In("b", norm)], {"axis": axis})
        )
    specs.append(Spec("LayerNormalization", "no_bias", [In("x", (2, 3, 4)), In("s", (4,))], {"epsilon": 0.01}))
    specs.append(
        Spec("LayerNormalization", "three_outputs", [In("x", (2, 3, 4)), In("s", (4,)), In("b", (4,))], outputs=3)
    )
    specs.append(
        Spec("LayerNormalization", "f16", [In("x", (2, 3, 4), "f16"), In("s", (4,), "f16"), In("b", (4,), "f16")])
    )
    specs.append(Spec("LayerNormalization", "extent1", [In("x", (2, 3, 1)), In("s", (1,)), In("b", (1,))]))
    for axis in (-1, 1, 0, -2):
        norm = (2, 3, 4)[axis:]
        variant = f"axis{axis}".replace("-", "m")
        specs.append(Spec("RMSNormalization", variant, [In("x", (2, 3, 4)), In("s", norm)], {"axis": axis}, opset=23))
    rms = [In("x", (2, 3, 4)), In("s", (4,))]
    specs.append(Spec("RMSNormalization", "scale_stretched", rms, {"axis": 1, "epsilon": 0.1}, opset=23))
    specs.append(Spec("RMSNormalization", "stash_f64", rms, {"stash_type": 11}, opset=23))
    for elem in ("f16", "f64"):
        typed = [In("x", (2, 3, 4), elem), In("s", (4,), elem)]
        specs.append(Spec("RMSNormalization", elem, typed, opset=23))
    specs.append(Spec("RMSNormalization", "extent1", [In("x", (2, 3, 1)), In("s", (1,))], opset=23))
    zero_row = arr([[0, 0, 0, 0], [3, -4, 0, 1], [1, 2, -2, 0]], "f32")
    for norm in (1, 2):
        for axis in (0, 1, -1):
            variant = f"p{norm}_axis{axis}".replace("-", "m")
            attrs = {"p": norm, "axis": axis}
            specs.append(Spec("LpNormalization", variant, [In("x", (3, 4), "f32", zero_row)], attrs))
    specs.append(Spec("LpNormalization", "default_3d", [In("x", (2, 3, 4))]))
    specs.append(Spec("LpNormalization", "f16", [In("x", (2, 5), "f16")], {"p": 1}))
    hot = arr([[0, 3, -1], [-4, 5, 2]], "i64")  # -4 and 5 fall outside a depth of 4: all off
    for axis in (-1, 0, 1):
        ins = [
            In("i", (2, 3), "i64", hot),
            Known("d", np.array(4, np.int64)),
            In("v", (2,), "f32", arr([-1, 7], "f32")),
        ]
        specs.append(Spec("OneHot", f"axis{axis}".replace("-", "m"), ins, {"axis": axis}, opset=11))
    ints = [In("i", (3,), "i64", arr([2, 0, 1], "i64")), Known("d", np.array([3], np.int64)), In("v", (2,), "i64")]
    specs.append(Spec("OneHot", "i64_values", ints, opset=11))
    for op in ("HannWindow", "HammingWindow", "BlackmanWindow"):
        length = Known("n", np.array(10, np.int64))
        specs.append(Spec(op, "periodic", [length], opset=17))
        specs.append(Spec(op, "symmetric", [length], {"periodic": 0}, opset=17))
        specs.append(Spec(op, "f64", [Known("n", np.array(7, np.int32))], {"output_datatype": 11}, opset=17))
    # Losses: targets chosen (one of them ignore_index 2 where a case sets it), weights random.
    targets = np.array([[0, 2, 1], [2, 3, 0]], np.int64)
    for op in ("NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"):
        for reduction in ("none", "sum", "mean"):
            for weighted in (False, True):
                for ignore in (None, 2):
                    ins = [In("x", (2, 4, 3)), In("t", (2, 3), "i64", targets)] + ([In("w", (4,))] if weighted else [])
                    attrs: dict[str, Any] = {"reduction": reduction}
                    if ignore is not None:
                        attrs["ignore_index"] = ignore
                    variant = f"{reduction}{'_weight' if weighted else ''}{'_ii' if ignore is not None else ''}"
                    specs.append(Spec(op, variant, ins, attrs, opset=13))
        specs.append(Spec(op, "NC", [In("x", (3, 5)), In("t", (3,), "i64", np.array([4, 0, 2], np.int64))], opset=13))
        for elem in ("f16", "f64"):
            ins = [In("x", (2, 4, 3), elem), In("t", (2, 3), "i64", targets), In("w", (4,), elem)]
            specs.append(Spec(op, elem, ins, {"ignore_index": 3}, opset=13))
        i32 = [In("x", (2, 4, 3)), In("t", (2, 3), "i32", targets.astype(np.int32))]
        specs.append(Spec(op, "i32_target", i32, opset=13))
    specs.append(
        Spec(
            "SoftmaxCrossEntropyLoss",
            "log_prob",
            [In("x", (2, 4, 3)), In("t", (2, 3), "i64", targets)],
            outputs=2,
            opset=13,
        )
    )
    for groups in (1, 2, 4):
        specs.append(
            Spec(
                "GroupNormalization",
                f"g{groups}",
                [In("x", (2, 4, 3, 3)), In("s", (4,)), In("b", (4,))],
                {"num_groups": groups},
            )
        )
    specs.append(
        Spec(
            "GroupNormalization",
            "epsilon_1d",
            [In("x", (2, 6, 5)), In("s", (6,)), In("b", (6,))],
            {"num_groups": 3, "epsilon": 0.1},
        )
    )
    specs.append(
        Spec(
            "GroupNormalization",
            "opset18",
            [In("x", (2, 4, 3)), In("s", (2,)), In("b", (2,))],
            {"num_groups": 2},
            opset=18,
        )
    )
    specs.append(Spec("LRN", "basic", [In("x", (2, 5, 3, 3))], {"size": 3}))
    specs.append(Spec("LRN", "params", [In("x", (1, 6, 2, 2))], {"size": 5, "alpha": 0.001, "beta": 0.5, "bias": 2.0}))
    specs.append(Spec("LRN", "size1", [In("x", (1, 3, 2, 1))], {"size": 1}))
    specs.append(Spec("LRN", "f16", [In("x", (1, 4, 2, 2), "f16")], {"size": 3}))
    # Training mode (no draws from rng here, so the cases above keep their values).
    positive = In("v", (3,), "f32", np.array([0.5, 1.0, 2.0], np.float32))
    for variant, shape, attrs in (
        ("training", (2, 3, 4), {"training_mode": 1}),
        ("training_momentum", (3, 3, 2, 2), {"training_mode": 1, "momentum": 0.6, "epsilon": 0.01}),
        ("training_2d", (5, 3), {"training_mode": 1}),
    ):
        specs.append(
            Spec(
                "BatchNormalization",
                variant,
                [In("x", shape), In("s", (3,)), In("b", (3,)), In("m", (3,)), positive],
                attrs,
                outputs=3,
            )
        )
    return specs


def resize(rng: np.random.Generator) -> list[Spec]:
    specs: list[Spec] = []

    def scales(*v: float) -> Known:
        return Known("scales", np.asarray(v, np.float32))

    def sizes(*v: int) -> Known:
        return Known("sizes", i64(*v))

    x = In("x", (1, 2, 4, 4))
    for nearest in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"):
        specs.append(
            Spec(
                "Resize",
                f"nearest_{nearest}_up",
                [x, None, scales(1, 1, 2, 1.5)],
                {"mode": "nearest", "nearest_mode": nearest},
            )
        )
        specs.append(
            Spec(
                "Resize",
                f"nearest_{nearest}_down",
                [x, None, scales(1, 1, 0.5, 0.75)],
                {"mode": "nearest", "nearest_mode": nearest},
            )
        )
    for ct in ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "half_pixel_symmetric"):
        specs.append(
            Spec(
                "Resize",
                f"linear_{ct}_up",
                [x, None, scales(1, 1, 2, 1.5)],
                {"mode": "linear", "coordinate_transformation_mode": ct},
            )
        )
        specs.append(
            Spec(
                "Resize",
                f"linear_{ct}_down",
                [x, None, None, sizes(1, 2, 3, 2)],
                {"mode": "linear", "coordinate_transformation_mode": ct},
            )
        )
        specs.append(
            Spec(
                "Resize",
                f"nearest_{ct}_sizes",
                [x, None, None, sizes(1, 2, 7, 5)],
                {"mode": "nearest", "coordinate_transformation_mode": ct},
            )
        )
    specs.append(Spec("Resize", "linear_1d", [In("x", (2, 5)), None, scales(1, 2.5)], {"mode": "linear"}))
    specs.append(
        Spec("Resize", "linear_3d", [In("x", (1, 1, 2, 3, 3)), None, scales(1, 1, 2, 2, 2)], {"mode": "linear"})
    )
    specs.append(Spec("Resize", "axes", [x, None, scales(2, 3)], {"mode": "nearest", "axes": [2, 3]}))
    specs.append(
        Spec(
            "Resize",
            "keep_aspect_not_larger",
            [x, None, None, sizes(6, 5)],
            {"axes": [2, 3], "keep_aspect_ratio_policy": "not_larger"},
        )
    )
    specs.append(
        Spec(
            "Resize",
            "keep_aspect_not_smaller",
            [x, None, None, sizes(6, 5)],
            {"axes": [2, 3], "keep_aspect_ratio_policy": "not_smaller"},
        )
    )
    specs.append(
        Spec(
            "Resize",
            "opset11_nearest",
            [x, Known("roi", np.zeros(0, np.float32)), scales(1, 1, 2, 2)],
            {"mode": "nearest"},
            opset=11,
        )
    )
    specs.append(Spec("Resize", "opset10", [x, scales(1, 1, 2, 3)], {"mode": "nearest"}, opset=10))
    specs.append(Spec("Resize", "opset10_linear", [x, scales(1, 1, 2, 3)], {"mode": "linear"}, opset=10))
    specs.append(
        Spec("Resize", "f16_nearest", [In("x", (1, 1, 2, 2), "f16"), None, scales(1, 1, 2, 2)], {"mode": "nearest"})
    )
    specs.append(
        Spec("Resize", "i64_nearest", [In("x", (1, 1, 2, 2), "i64"), None, scales(1, 1, 2, 2)], {"mode": "nearest"})
    )
    specs.append(Spec("Upsample", "nearest", [x, scales(1, 1, 2, 3)], {"mode": "nearest"}, opset=9))
    big = In("x", (1, 2, 9, 7))
    for mode in ("linear", "cubic"):
        specs.append(
            Spec(
                "Resize", f"{mode}_antialias_down", [big, None, scales(1, 1, 0.5, 0.6)], {"mode": mode, "antialias": 1}
            )
        )
        specs.append(
            Spec(
                "Resize", f"{mode}_antialias_mixed", [big, None, scales(1, 1, 0.3, 1.5)], {"mode": mode, "antialias": 1}
            )
        )
        specs.append(
            Spec(
                "Resize",
                f"{mode}_antialias_sizes",
                [big, None, None, sizes(1, 2, 4, 3)],
                {"mode": mode, "antialias": 1},
            )
        )
    specs.append(
        Spec(
            "Resize",
            "cubic_antialias_exclude_outside",
            [big, None, scales(1, 1, 0.5, 0.6)],
            {"mode": "cubic", "antialias": 1, "exclude_outside": 1, "cubic_coeff_a": -0.5},
        )
    )
    return specs


def quantization(rng: np.random.Generator) -> list[Spec]:
    """QuantizeLinear and DequantizeLinear per tensor, per axis and per block (a remainder block
    included), with ties of the rounding, saturation at both ends, and half scales."""
    specs: list[Spec] = []
    x = np.concatenate([[2.5, 3.5, -2.5, -0.5, 0.5, 1e6, -1e6, 0.0], rng.uniform(-300, 300, 16)]).astype(np.float32)
    scale = arr(2.0, "f32")
    for zdt, zero in (("ui8", 128), ("i8", -3), ("ui16", 40000), ("i16", 7)):
        ins = [In("x", (4, 6), "f32", x.reshape(4, 6)), In("s", (), "f32", scale), In("z", (), zdt, arr(zero, zdt))]
        specs.append(Spec("QuantizeLinear", f"per_tensor_{zdt}", ins, opset=21))
    specs.append(Spec("QuantizeLinear", "no_zero_point", [In("x", (24,), "f32", x), In("s", (), "f32", scale)]))
    specs.append(Spec("QuantizeLinear", "opset10", [In("x", (24,), "f32", x), In("s", (), "f32", scale)], opset=10))
    per_axis = arr([0.5, 1.0, 4.0], "f32")
    for axis in (1, -1):
        shape = (2, 3, 4) if axis == 1 else (2, 4, 3)
        ins = [
            In("x", shape, "f32", x.reshape(shape)),
            In("s", (3,), "f32", per_axis),
            In("z", (3,), "i8", arr([0, 5, -5], "i8")),
        ]
        specs.append(Spec("QuantizeLinear", f"per_axis{axis}".replace("-", "m"), ins, {"axis": axis}, opset=13))
    blocks = arr([[1.0, 2.0, 0.25], [8.0, 0.5, 3.0], [1.5, 1.0, 2.0], [0.75, 4.0, 1.0]], "f32")
    ins = [In("x", (4, 5), "f32", x[:20].reshape(4, 5)), In("s", (4, 3), "f32", blocks)]
    blocked = {"axis": 1, "block_size": 2, "output_dtype": TensorProto.INT16}
    specs.append(Spec("QuantizeLinear", "blocked_remainder", ins, blocked, opset=21))
    half = [
        In("x", (24,), "f16", x.astype(np.float16)),
        In("s", (), "f16", arr(3.0, "f16")),
        In("z", (), "ui8", arr(9, "ui8")),
    ]
    specs.append(Spec("QuantizeLinear", "f16", half, opset=19))
    q = rng.integers(0, 256, (4, 6)).astype(np.uint8)
    ins = [In("q", (4, 6), "ui8", q), In("s", (), "f32", scale), In("z", (), "ui8", arr(128, "ui8"))]
    specs.append(Spec("DequantizeLinear", "per_tensor_ui8", ins, opset=21))
    ins = [
        In("q", (2, 3, 4), "i8", q.reshape(2, 3, 4).astype(np.int8)),
        In("s", (3,), "f32", per_axis),
        In("z", (3,), "i8", arr([0, 5, -5], "i8")),
    ]
    specs.append(Spec("DequantizeLinear", "per_axis_i8", ins, {"axis": 1}, opset=13))
    ins = [
        In("q", (4, 5), "ui8", q.reshape(-1)[:20].reshape(4, 5)),
        In("s", (4, 3), "f32", blocks),
        In("z", (4, 3), "ui8", np.full((4, 3), 100, np.uint8)),
    ]
    specs.append(Spec("DequantizeLinear", "blocked_remainder", ins, {"axis": 1, "block_size": 2}, opset=21))
    ins = [
        In("q", (6,), "i32", arr([-70000, -1, 0, 1, 2**20, 2**31 - 1], "i32")),
        In("s", (), "f32", arr(0.125, "f32")),
    ]
    specs.append(Spec("DequantizeLinear", "i32", ins, opset=13))
    ins = [In("q", (4, 6), "ui8", q), In("s", (), "f16", arr(0.1, "f16")), In("z", (), "ui8", arr(3, "ui8"))]
    specs.append(Spec("DequantizeLinear", "f16_scale", ins, opset=19))
    qa, qb = rng.integers(0, 256, (2, 3, 4)).astype(np.uint8), rng.integers(0, 256, (4, 5)).astype(np.uint8)
    ins = [In("a", (2, 3, 4), "ui8", qa), In("b", (4, 5), "ui8", qb), In("za", (), "ui8", arr(128, "ui8")),
           In("zb", (5,), "ui8", arr([0, 3, 100, 200, 255], "ui8"))]  # fmt: skip
    specs.append(Spec("MatMulInteger", "per_column", ins))
    specs.append(Spec("MatMulInteger", "no_zero_points", ins[:2]))
    sa, sb = arr(0.05, "f32"), arr(0.02, "f32")
    signed = [In("a", (3, 4), "i8", qa[0].astype(np.int8)), In("sa", (), "f32", sa), In("za", (), "i8", arr(-3, "i8")),
              In("b", (4, 5), "i8", qb.astype(np.int8)), In("sb", (), "f32", sb), In("zb", (), "i8", arr(2, "i8")),
              In("sy", (), "f32", arr(0.3, "f32")), In("zy", (), "i8", arr(-5, "i8"))]  # fmt: skip
    specs.append(Spec("QLinearMatMul", "i8", signed))
    unsigned = [In("a", (2, 3, 4), "ui8", qa), In("sa", (), "f32", sa), In("za", (), "ui8", arr(128, "ui8")),
                In("b", (4, 5), "ui8", qb), In("sb", (), "f32", sb), In("zb", (), "ui8", arr(120, "ui8")),
                In("sy", (), "f32", arr(0.7, "f32")), In("zy", (), "ui8", arr(10, "ui8"))]  # fmt: skip
    specs.append(Spec("QLinearMatMul", "ui8_batched", unsigned))
    return specs


def signal(rng: np.random.Generator) -> list[Spec]:
    """DFT and STFT: real and complex input, inverse, one-sided (RFFT and IRFFT), dft_length shorter and
    longer than the axis (powers of two and not: onnxruntime takes another algorithm for each), a
    non-last and a negative axis, a rank-2 input (one signal), opset 17's axis attribute, an i32
    dft_length; STFT with and without a window and frame_length, a step that leaves samples over,
    complex and two-sided.

    The variants are f64: onnxruntime's f32 transforms err by about 1e-6 times the input's magnitude
    (twiddles in f32, Bluestein's chirps), past this suite's f32 atol for inputs of magnitude 1.  The
    f32 cases store inputs of magnitude 0.1, where that error stays below it.
    """
    specs: list[Spec] = []

    def dft(variant: str, x: In, length: int | None = None, axis: int | None = None, **attrs: int) -> Spec:
        ins: list[In | Known | None] = [x, None if length is None else Known("n", i64(length).reshape(()))]
        if axis is not None:
            ins.append(Known("axis", i64(axis).reshape(())))
        while ins[-1] is None:
            ins.pop()
        return Spec("DFT", variant, ins, attrs, opset=20)

    def small(shape: tuple[int, ...]) -> np.ndarray:
        return (0.1 * rng.standard_normal(shape)).astype(np.float32)

    specs += [
        dft("real", In("x", (3, 10, 1), "f64")),
        dft("complex", In("x", (3, 10, 2), "f64")),
        dft("inverse", In("x", (3, 10, 2), "f64"), inverse=1),
        dft("inverse_real", In("x", (2, 8, 1), "f64"), inverse=1),
        dft("rfft", In("x", (2, 9, 1), "f64"), onesided=1),
        dft("rfft_length", In("x", (2, 9, 1), "f64"), length=12, onesided=1),
        dft("irfft", In("x", (2, 5, 2), "f64"), inverse=1, onesided=1),
        dft("irfft_odd_length", In("x", (2, 5, 2), "f64"), length=9, inverse=1, onesided=1),
        dft("shorter_pow2", In("x", (2, 12, 2), "f64"), length=8),
        dft("shorter", In("x", (2, 12, 2), "f64"), length=7),
        dft("longer", In("x", (2, 6, 2), "f64"), length=11),
        dft("longer_pow2", In("x", (2, 6, 1), "f64"), length=16),
        dft("axis0", In("x", (6, 4, 5, 2), "f64"), axis=0),
        dft("axis_negative", In("x", (2, 6, 5, 1), "f64"), axis=-3, inverse=1),
        dft("rank2_complex", In("x", (6, 2), "f64")),
        dft("f32", In("x", (3, 10, 2), "f32", small((3, 10, 2)))),
        dft("f32_rfft", In("x", (2, 9, 1), "f32", small((2, 9, 1))), length=12, onesided=1),
        dft("f32_irfft", In("x", (2, 5, 2), "f32", small((2, 5, 2))), inverse=1, onesided=1),
        Spec("DFT", "opset17_axis2", [In("x", (2, 3, 7, 1), "f64")], {"axis": 2}, opset=17),
        Spec("DFT", "length_i32", [In("x", (2, 10, 1), "f64"), Known("n", np.array(6, np.int32))], opset=20),
    ]
    step, step8 = Known("step", i64(6).reshape(())), Known("step", i64(8).reshape(()))

    def length(n: int) -> Known:
        return Known("len", i64(n).reshape(()))

    def f64(shape: tuple[int, ...]) -> In:
        return In("s" if len(shape) == 3 else "w", shape, "f64")

    # onnx's shape inference reads an absent `onesided` as 0 (ONNX defines 1): out_shape leaves the bins unknown
    default = (2, 7, None, 2)
    one, two = {"onesided": 1}, {"onesided": 0}
    f32_signal = In("s", (2, 40, 2), "f32", small((2, 40, 2)))
    for variant, ins, attrs, out in (
        ("window", [f64((2, 64, 1)), step8, f64((16,))], {}, default),
        ("frame_length", [f64((2, 40, 1)), step, None, length(10)], one, None),
        ("window_and_length", [f64((1, 50, 1)), step, f64((12,)), length(12)], one, None),
        ("two_sided", [f64((2, 40, 1)), step, f64((12,))], two, None),
        ("complex", [f64((1, 40, 2)), step, None, length(10)], two, None),
        ("complex_onesided", [f64((1, 40, 2)), step, f64((10,))], one, None),
        ("f32", [In("s", (2, 64, 1), "f32", small((2, 64, 1))), step8, In("w", (16,), "f32")], {}, default),
        ("f32_frame_length", [f32_signal, step, None, length(10)], two, None),
    ):
        specs.append(Spec("STFT", variant, ins, attrs, opset=17, out_shape=out))
    return specs


def grid_sample(rng: np.random.Generator) -> list[Spec]:
    """GridSample: every mode x padding_mode x align_corners in 2-D, and in 3-D where onnxruntime
    computes it (not cubic); grids reaching past the borders (to +-3.5) and landing on the corners and
    on half-pixel ties; opset 16's spellings; f16 and f64."""
    specs: list[Spec] = []

    def grid(shape: tuple[int, ...], dtype: str = "f32") -> In:
        values = rng.uniform(-1.6, 1.6, shape)
        flat = values.reshape(-1)
        edges = [-1.0, 1.0, 0.0, -3.5, 3.5, 0.25, -0.75, 1.25, -1.1, 2.2]
        flat[: len(edges)] = edges  # corners, centre, far outside, ties of rounding
        return In("grid", shape, dtype, arr(values, dtype))

    x2, g2 = In("x", (2, 3, 4, 5)), grid((2, 3, 6, 2))
    x3, g3 = In("x", (1, 2, 3, 4, 5)), grid((1, 2, 3, 4, 3))
    for mode in ("linear", "nearest", "cubic"):
        for padding in ("zeros", "border", "reflection"):
            for align in (0, 1):
                attrs = {"mode": mode, "padding_mode": padding, "align_corners": align}
                specs.append(Spec("GridSample", f"{mode}_{padding}_align{align}", [x2, g2], attrs))
                if mode != "cubic":
                    specs.append(Spec("GridSample", f"3d_{mode}_{padding}_align{align}", [x3, g3], attrs))
    for mode in ("bilinear", "nearest", "bicubic"):
        attrs = {"mode": mode, "padding_mode": "border"}
        specs.append(Spec("GridSample", f"opset16_{mode}", [x2, g2], attrs, opset=16))
    specs.append(Spec("GridSample", "defaults_unit_extents", [In("x", (1, 2, 1, 3)), grid((1, 4, 2, 2))], {}, opset=22))
    half = {"mode": "cubic", "padding_mode": "reflection"}
    specs.append(Spec("GridSample", "f16", [In("x", (2, 3, 4, 5), "f16"), grid((2, 3, 6, 2), "f16")], half, opset=22))
    specs.append(
        Spec("GridSample", "f16_3d", [In("x", (1, 2, 3, 4, 5), "f16"), grid((1, 2, 3, 4, 3), "f16")], {}, opset=22)
    )
    specs.append(Spec("GridSample", "f64", [In("x", (2, 3, 4, 5), "f64"), grid((2, 3, 6, 2), "f64")], half))
    return specs


def recurrent(rng: np.random.Generator) -> list[Spec]:
    """RNN, GRU and LSTM: each direction, sequence_lens shorter than the sequence (one entry 0), initial
    states, activations with alpha/beta (and the defaults ONNX and onnxruntime share), clip,
    linear_before_reset, peepholes, input_forget, f16, layout 1 (which onnxruntime refuses, so it is
    skipped: the node cases' *_batchwise check it) and only some outputs named."""
    seq, batch, size, hidden = 4, 3, 3, 4
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}
    lens = {"short": arr([3, 1, 2], "i32"), "zero": arr([4, 2, 0], "i32")}

    def operands(op: str, dirs: int = 1, dtype: str = "f32", layout: int = 0, **given: Any) -> list[In | None]:
        """X, W, R and the optional operands `given` names (b, h0, c0, p: True; lens: a key of `lens`)."""
        rows, state = gates[op] * hidden, (batch, dirs, hidden) if layout else (dirs, batch, hidden)
        items: list[In | None] = [
            In("x", (batch, seq, size) if layout else (seq, batch, size), dtype),
            In("w", (dirs, rows, size), dtype),
            In("r", (dirs, rows, hidden), dtype),
            In("b", (dirs, 2 * rows), dtype) if given.get("b") else None,
            In("lens", (batch,), "i32", lens[given["lens"]]) if given.get("lens") else None,
            In("h0", state, dtype) if given.get("h0") else None,
        ]
        if op == "LSTM":
            items += [In("c0", state, dtype) if given.get("c0") else None]
            items += [In("p", (dirs, 3 * hidden), dtype) if given.get("p") else None]
        while items[-1] is None:
            items.pop()
        return items

    def spec(op: str, variant: str, items: list[In | None], unnamed: tuple[int, ...] = (), **attrs: Any) -> Spec:
        outputs = 3 if op == "LSTM" else 2
        return Spec(op, variant, items, {"hidden_size": hidden, **attrs}, outputs=outputs, unnamed=unnamed)

    bi = {"direction": "bidirectional"}
    rev = {"direction": "reverse"}
    specs = [
        spec("RNN", "forward", operands("RNN", b=True)),
        spec("RNN", "reverse_lens", operands("RNN", b=True, lens="short", h0=True), **rev),
        spec("RNN", "bidirectional", operands("RNN", 2, b=True, lens="zero", h0=True), **bi),
        spec("RNN", "no_bias", operands("RNN", h0=True)),
        spec("RNN", "relu_clip", operands("RNN", b=True), activations=["Relu"], clip=1.5),
        spec(
            "RNN",
            "leaky_affine",
            operands("RNN", 2, b=True),
            activations=["LeakyRelu", "Affine"],
            activation_alpha=[0.2, 0.7],
            activation_beta=[0.1],
            **bi,
        ),
        spec(
            "RNN",
            "scaled_tanh",
            operands("RNN", b=True),
            activations=["ScaledTanh"],
            activation_alpha=[1.5],
            activation_beta=[0.6],
            **rev,
        ),
        spec("RNN", "only_y_h", operands("RNN", b=True), unnamed=(0,)),
        spec("RNN", "f16", operands("RNN", dtype="f16", b=True, h0=True)),
        spec("RNN", "layout1", operands("RNN", layout=1, b=True, h0=True), layout=1),
        spec("GRU", "forward", operands("GRU", b=True)),
        spec("GRU", "reverse_lens", operands("GRU", b=True, lens="short", h0=True), **rev),
        spec(
            "GRU",
            "bidirectional_linear_before_reset",
            operands("GRU", 2, b=True, lens="zero", h0=True),
            linear_before_reset=1,
            **bi,
        ),
        spec("GRU", "linear_before_reset_no_bias", operands("GRU", h0=True), linear_before_reset=1),
        spec(
            "GRU",
            "hard_sigmoid_scaled_tanh",
            operands("GRU", b=True),
            activations=["HardSigmoid", "ScaledTanh"],
            activation_alpha=[0.3, 0.9],
            activation_beta=[0.4, 1.1],
            clip=2.0,
        ),
        spec(
            "GRU",
            "default_alphas",
            operands("GRU", 2, b=True),
            activations=["LeakyRelu", "Elu", "HardSigmoid", "Softsign"],
            **bi,
        ),
        spec(
            "GRU",
            "thresholded_softplus",
            operands("GRU", b=True),
            activations=["ThresholdedRelu", "Softplus"],
            activation_alpha=[0.2],
        ),
        spec("GRU", "only_y_h", operands("GRU", b=True, lens="zero"), unnamed=(0,)),
        spec("GRU", "f16", operands("GRU", dtype="f16", b=True)),
        spec("GRU", "layout1", operands("GRU", layout=1, b=True, h0=True), layout=1),
        spec("LSTM", "forward", operands("LSTM", b=True)),
        spec("LSTM", "peepholes", operands("LSTM", b=True, h0=True, c0=True, p=True)),
        spec("LSTM", "input_forget", operands("LSTM", b=True, p=True), input_forget=1),
        spec("LSTM", "bidirectional_lens", operands("LSTM", 2, b=True, lens="zero", h0=True, c0=True, p=True), **bi),
        spec("LSTM", "reverse_clip", operands("LSTM", b=True, lens="short", c0=True), clip=0.5, **rev),
        spec(
            "LSTM",
            "activations",
            operands("LSTM", b=True),
            activations=["HardSigmoid", "Softsign", "Elu"],
            activation_alpha=[0.25, 0.8],
            activation_beta=[0.45],
        ),
        spec(
            "LSTM",
            "bidirectional_activations",
            operands("LSTM", 2, b=True),
            activation_alpha=[0.1, 0.5],
            activations=["Sigmoid", "Relu", "Softplus", "Sigmoid", "ThresholdedRelu", "Affine"],
            activation_beta=[0.2],
            **bi,
        ),
        spec("LSTM", "only_y_h", operands("LSTM", b=True), unnamed=(0, 2)),
        spec("LSTM", "only_y_c", operands("LSTM", b=True, lens="short"), unnamed=(0, 1)),
        Spec("LSTM", "y_only", operands("LSTM", b=True), {"hidden_size": hidden}),
        spec("LSTM", "f16", operands("LSTM", dtype="f16", b=True, p=True)),
        spec("LSTM", "layout1", operands("LSTM", layout=1, b=True, h0=True, c0=True), layout=1),
    ]
    return specs


def detection(_: np.random.Generator) -> list[Spec]:
    """NonMaxSuppression, drawn from a generator of its own so no other family's draws move."""
    rng = np.random.default_rng(1010)

    def boxes(b: int, n: int, center: bool = False) -> np.ndarray:
        """`n` boxes per batch, overlapping often: corners in either order, or center and size."""
        start, size = rng.random((b, n, 2)), 0.05 + 0.4 * rng.random((b, n, 2))
        if center:
            return np.concatenate([start + size / 2, size], axis=-1).astype(np.float32)
        corners = np.concatenate([start, start + size], axis=-1)
        flip = rng.random((b, n, 1)) < 0.5  # the other diagonal's corners first
        return np.where(flip, corners[..., [2, 3, 0, 1]], corners).astype(np.float32)

    def scores(b: int, c: int, n: int, levels: int = 0) -> np.ndarray:
        """Scores in [0, 1); with `levels`, only that many distinct values, so ties abound."""
        s = rng.random((b, c, n))
        return (np.floor(s * levels) / levels if levels else s).astype(np.float32)

    def nms(variant: str, b: int, c: int, n: int, scalars: Sequence[In | Known | None], **kw: Any) -> Spec:
        center = kw.pop("center_point_box", 0)
        levels, opset = kw.pop("levels", 0), kw.pop("opset", DEFAULT_OPSET)
        ins = [
            In("boxes", (b, n, 4), "f32", boxes(b, n, bool(center))),
            In("scores", (b, c, n), "f32", scores(b, c, n, levels)),
        ]
        attrs = {"center_point_box": center} if center else {}
        # opset 10's shape inference leaves the result's extents unset: [count, 3], the count unknown
        return Spec("NonMaxSuppression", variant, [*ins, *scalars], attrs, opset=opset, out_shape=(None, 3))

    def scalar(name: str, value: float | int, dtype: str, shape: tuple[int, ...] = (1,)) -> In:
        return In(name, shape, dtype, arr(value, dtype).reshape(shape))

    def full(most: int, iou: float, score: float | None, shape: tuple[int, ...] = (1,)) -> list[In | Known | None]:
        out: list[In | Known | None] = [scalar("max", most, "i64", shape), scalar("iou", iou, "f32", shape)]
        return out if score is None else [*out, scalar("score", score, "f32", shape)]

    return [
        nms("corners", 2, 3, 20, full(3, 0.5, 0.3)),
        nms("corners_opset10", 1, 2, 12, full(4, 0.3, 0.1), opset=10),
        nms("center", 1, 2, 16, full(100, 0.4, 0.0, ()), center_point_box=1),
        nms("center_ties", 2, 2, 24, full(6, 0.2, None), center_point_box=1, levels=4),
        nms("ties", 2, 3, 30, full(100, 0.25, 0.2), levels=5),
        nms("no_score_threshold", 1, 2, 16, full(100, 0.3, None)),
        nms("iou_zero", 1, 1, 16, full(100, 0.0, 0.5)),
        nms("iou_one", 1, 1, 12, full(100, 1.0, 0.0)),
        nms("iou_absent", 1, 2, 16, [scalar("max", 100, "i64"), None, scalar("score", 0.2, "f32")]),
        nms("max_zero", 2, 2, 10, full(0, 0.5, 0.0)),
        nms("max_negative", 1, 2, 10, full(-3, 0.5, 0.0)),
        nms("max_absent", 1, 2, 10, []),
        nms("large", 2, 2, 200, full(1000, 0.5, 0.05), levels=20),
        nms(
            "known_scalars",
            2,
            2,
            16,
            [Known("max", i64(5)), Known("iou", arr([0.45], "f32")), Known("score", arr([0.1], "f32"))],
        ),
    ]


def affine_grid(_: np.random.Generator) -> list[Spec]:
    """AffineGrid in 2-D and 3-D, both align_corners; theta drawn at test time (no draws here)."""
    specs: list[Spec] = []
    for variant, size in (("2d", (2, 3, 5, 6)), ("3d", (2, 1, 3, 4, 5)), ("2d_unit_batch", (1, 4, 2, 7))):
        r = len(size) - 2
        for align in (0, 1):
            specs.append(
                Spec(
                    "AffineGrid",
                    f"{variant}_align{align}",
                    [In("theta", (size[0], r, r + 1)), Known("size", i64(*size))],
                    {"align_corners": align},
                )
            )
    specs.append(
        Spec("AffineGrid", "f16", [In("theta", (2, 2, 3), "f16"), Known("size", i64(2, 1, 3, 4))], {"align_corners": 0})
    )
    return specs


def mel_weight_matrix(_: np.random.Generator) -> list[Spec]:
    """MelWeightMatrix: num_mel_bins and dft_length known, sample_rate and the band edges run-time scalars."""
    specs: list[Spec] = []
    for variant, (mel, dft, rate, lo, hi), attrs in (
        ("f32", (8, 16, 8192, 0.0, 4096.0), {}),
        ("speech", (10, 64, 16000, 20.0, 8000.0), {}),
        ("odd_dft", (5, 31, 8000, 100.0, 3000.0), {}),
        ("f64", (6, 32, 8000, 30.0, 3800.0), {"output_datatype": 11}),
    ):
        specs.append(
            Spec(
                "MelWeightMatrix",
                variant,
                [
                    Known("num_mel_bins", np.array(mel, np.int64)),
                    Known("dft_length", np.array(dft, np.int64)),
                    In("sample_rate", (), "i64", np.array(rate, np.int64)),
                    In("lower_edge_hertz", (), "f32", np.array(lo, np.float32)),
                    In("upper_edge_hertz", (), "f32", np.array(hi, np.float32)),
                ],
                attrs,
                opset=17,
            )
        )
    return specs


FAMILIES: tuple[Callable[[np.random.Generator], list[Spec]], ...] = (
    elementwise,
    unary,
    casts,
    movement,
    indexing,
    reductions,
    linear,
    conv,
    normalization,
    resize,
    quantization,
    signal,
    grid_sample,
    recurrent,
    detection,
    affine_grid,
    mel_weight_matrix,
)


def random_feeds(model: onnx.ModelProto, stored: dict[str, np.ndarray], stem: str) -> dict[str, np.ndarray]:
    """The feeds the harness will use: the stored values, else its seeded random draw."""
    import zlib

    from tests.conformance.harness import random_input

    rng = np.random.default_rng(zlib.crc32(stem.encode()))
    feeds = {}
    for vi in model.graph.input:
        feeds[vi.name] = stored[vi.name] if vi.name in stored else random_input(vi, rng)
    return feeds


def main(argv: Sequence[str] | None = None) -> int:
    from loam.testing import run_onnxruntime

    rng = np.random.default_rng(2024)
    specs = [s for family in FAMILIES for s in family(rng)]
    names = [f"{s.op}.{s.variant}" for s in specs]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise SystemExit(f"duplicate case names: {sorted(dupes)}")
    OUT.mkdir(parents=True, exist_ok=True)
    written: set[str] = set()
    skipped = []
    for spec, stem in zip(specs, names, strict=True):
        try:
            model, stored = make_model(spec)
            run_onnxruntime(model, random_feeds(model, stored, stem))
        except Exception as err:  # onnx or onnxruntime cannot take it: the oracle has no answer
            skipped.append(f"{stem}: {type(err).__name__}: {(str(err).strip().splitlines() or [''])[0][:160]}")
            continue
        onnx.save(model, OUT / f"{stem}.onnx")
        written.add(f"{stem}.onnx")
        npz = OUT / f"{stem}.npz"
        if stored:
            np.savez(npz, **stored)
            written.add(npz.name)
        elif npz.exists():
            npz.unlink()
    for stale in OUT.iterdir():
        if stale.name not in written:
            stale.unlink()
    print(f"wrote {len([w for w in written if w.endswith('.onnx')])} cases to {OUT}")
    if skipped:
        print(f"skipped {len(skipped)} (onnx/onnxruntime refused them):")
        print("\n".join(f"  {s}" for s in skipped))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
