"""Write the semantics suite: one small ONNX model per shape-arithmetic construct, with the symbol
values to run it at.

    python scripts/make_semantics_models.py            # writes tests/semantics/models/*.onnxtext + cases.json

Each model reads symbolic input axes (dim_params) and computes with them as exporters do: Shape, Gather,
Concat, Slice, Range, Div, Cast, Where... feeding Reshape, Slice, Expand, Split.  `cases.json` lists, per model,
its inputs (dtype and shape, in symbols or spelled dim_params), the symbol assignments to run it at (at least
two values of every symbol, clamps taking effect, edge values such as 0 and 1 where ONNX allows them), and the
violating assignments at which Loam's `forward` must raise `ShapeError` naming a node (or an input).

Everything written is checked here against onnxruntime, the oracle: every run must run there, and every
violating assignment must fail there too, so a violation is one ONNX itself refuses, not one Loam invents.
The tests (tests/semantics/test_semantics.py) then compare Loam with onnxruntime at each assignment.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.checker
import onnx.parser
import onnx.printer
import onnx.shape_inference
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # the tests' own input maker, so the oracle sees the inputs the tests feed

from tests.semantics.harness import make_feeds  # noqa: E402

OUT = ROOT / "tests" / "semantics"
MODELS = OUT / "models"
OPSET = 17

INT64_MAX = 2**63 - 1  # torch's "to the end"
INT64_MIN = -(2**63)
BIG = 2**62  # a large bound that is not the extreme

DTYPES = {
    "float32": TensorProto.FLOAT,
    "int64": TensorProto.INT64,
    "int32": TensorProto.INT32,
    "bool": TensorProto.BOOL,
}

# ----------------------------------------------------------------------------------------------------------
# Building blocks


@dataclass
class Input:
    """A graph input: element type, shape as ints, symbol names and spelled dim_params; ints drawn from
    [low, high) for integer inputs."""

    name: str
    dtype: str
    shape: list[int | str]
    low: int = 0
    high: int = 10

    def spec(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "dtype": self.dtype, "shape": self.shape}
        if self.dtype in ("int64", "int32"):
            out["low"], out["high"] = self.low, self.high
        return out


@dataclass
class Violation:
    """An assignment the model owes a condition against: `forward` raises ShapeError whose message contains
    `match` (the node relying on it, or the input that disagrees with its spelling; a list: any of them)."""

    at: dict[str, int]
    match: str | list[str]
    why: str


@dataclass
class Case:
    name: str
    doc: str
    inputs: list[Input]
    outputs: list[tuple[str, str] | tuple[str, str, int]]  # (name, dtype[, rank where inference cannot tell])
    nodes: list[onnx.NodeProto]
    runs: list[dict[str, int]]
    violations: list[Violation] = field(default_factory=list)
    initializers: list[onnx.TensorProto] = field(default_factory=list)
    opset: int = OPSET

    def model(self) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes,
            self.name,
            [helper.make_tensor_value_info(i.name, DTYPES[i.dtype], i.shape) for i in self.inputs],
            [helper.make_tensor_value_info(o[0], DTYPES[o[1]], None) for o in self.outputs],
            initializer=self.initializers,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)], producer_name="loam")
        model.ir_version = 8
        # Outputs declare their rank (from ONNX's shape inference) and no extents: a '?' names nothing, so the
        # declared shapes add nothing for Loam to merge beyond the rank.
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True).graph.output
        for declared, found, spec in zip(model.graph.output, inferred, self.outputs, strict=True):
            # Where inference cannot tell (an opset-11 Reshape target built from Shape), the case says.
            rank = spec[2] if len(spec) > 2 else len(found.type.tensor_type.shape.dim)
            declared.type.tensor_type.shape.SetInParent()
            for _ in range(rank):
                declared.type.tensor_type.shape.dim.add()
        return model


def node(op: str, inputs: Sequence[str], outputs: Sequence[str], name: str | None = None, **attrs: Any) -> Any:
    """A node named `name` (default: `/<Op>_<first output>`, as torch names them)."""
    return helper.make_node(op, list(inputs), list(outputs), name=name or f"/{op}_{outputs[0]}", **attrs)


def ints(name: str, values: Sequence[int] | int) -> onnx.NodeProto:
    """A Constant holding int64 values (a list: 1-D; an int: a scalar)."""
    array = np.array(values, dtype=np.int64)
    return node("Constant", [], [name], name=f"/Constant_{name}", value=numpy_helper.from_array(array, name))


def dim(x: str, axis: int, out: str, opset: int = OPSET) -> list[onnx.NodeProto]:
    """`out` = Shape(x)[axis] as a 1-element int64 tensor (Shape, Gather, Unsqueeze, as torch exports
    x.size(axis) feeding a Concat); before opset 13 Unsqueeze takes its axes as an attribute."""
    take = [node("Shape", [x], [f"{out}_shape"]), ints(f"{out}_ix", axis)]
    take.append(node("Gather", [f"{out}_shape", f"{out}_ix"], [f"{out}_scalar"], axis=0))
    if opset < 13:
        return [*take, node("Unsqueeze", [f"{out}_scalar"], [out], axes=[0])]
    return [*take, ints(f"{out}_ax", [0]), node("Unsqueeze", [f"{out}_scalar", f"{out}_ax"], [out])]


def sym_runs(name: str, values: Sequence[int]) -> list[dict[str, int]]:
    return [{name: v} for v in values]


# ----------------------------------------------------------------------------------------------------------
# The cases


def cases() -> list[Case]:
    out: list[Case] = []
    add = out.append

    # x.view(x.size(0), -1) as torch exports it.
    add(
        Case(
            "flatten_view",
            "Shape->Gather->Unsqueeze->Concat->Reshape: x.view(x.size(0), -1)",
            [Input("x", "float32", ["N", 3, 4])],
            [("y", "float32")],
            [
                *dim("x", 0, "n"),
                ints("minus1", [-1]),
                node("Concat", ["n", "minus1"], ["target"], axis=0),
                node("Reshape", ["x", "target"], ["y"], name="/Reshape"),
            ],
            sym_runs("N", [1, 2, 5]),
        )
    )

    # ---- Slice over a symbolic axis, constant bounds
    def slice_case(name: str, doc: str, starts: int, ends: int, steps: int | None, values: Sequence[int]) -> Case:
        consts = [ints("starts", [starts]), ints("ends", [ends]), ints("axes", [0])]
        operands = ["x", "starts", "ends", "axes"]
        if steps is not None:
            consts.append(ints("steps", [steps]))
            operands.append("steps")
        return Case(
            name,
            doc,
            [Input("x", "float32", ["N", 3])],
            [("y", "float32")],
            [*consts, node("Slice", operands, ["y"], name="/Slice")],
            sym_runs("N", values),
        )

    add(slice_case("slice_to_end_int64max", "x[1:] with end INT64_MAX", 1, INT64_MAX, None, [0, 1, 2, 6]))
    add(slice_case("slice_to_end_2p62", "x[2:] with end 2**62", 2, BIG, None, [0, 1, 3, 7]))
    add(slice_case("slice_const_end_clamp", "x[:4]: the end clamps to N below 4", 0, 4, None, [0, 2, 4, 7]))
    add(slice_case("slice_const_start_past", "x[5:]: the start clamps to N below 5", 5, INT64_MAX, None, [2, 5, 8]))
    add(slice_case("slice_negative_bounds", "x[-3:-1]: both from the end, clamped", -3, -1, None, [0, 1, 2, 3, 6]))
    add(slice_case("slice_negative_start_large", "x[-2**62:3]: start clamps to 0", -BIG, 3, None, [1, 3, 5]))
    add(slice_case("slice_step2", "x[1::2]: ceil((N-1)/2) rows, never below 0", 1, INT64_MAX, 2, [0, 1, 2, 5, 6]))
    add(slice_case("slice_step3_bounded", "x[1:7:3]: step 3, end clamps", 1, 7, 3, [1, 2, 4, 5, 9]))
    add(slice_case("slice_reverse", "x[::-1] with INT64_MAX start, INT64_MIN end", -1, INT64_MIN, -1, [0, 1, 4]))
    add(slice_case("slice_reverse_step2", "x[2**62:-2**62:-2]: start clamps to N-1", BIG, -BIG, -2, [1, 2, 5, 6]))
    add(slice_case("slice_negative_step_bounded", "x[-2:0:-1]", -2, 0, -1, [0, 1, 2, 3, 7]))

    # x[:, -4:, :] over the inner symbolic axis, axis given negative.
    add(
        Case(
            "slice_last_k_inner_axis",
            "x[:, -4:, :] on a symbolic inner axis (axes=[-2]); clamps when S < 4",
            [Input("x", "float32", ["B", "S", 5])],
            [("y", "float32")],
            [
                ints("starts", [-4]),
                ints("ends", [INT64_MAX]),
                ints("axes", [-2]),
                node("Slice", ["x", "starts", "ends", "axes"], ["y"], name="/Slice"),
            ],
            [{"B": 1, "S": 2}, {"B": 2, "S": 4}, {"B": 3, "S": 9}, {"B": 2, "S": 0}],
        )
    )

    # ---- Slice with bounds computed from Shape
    add(
        Case(
            "slice_bounds_from_shape",
            "x[1:N-1] with N = Shape(x)[0]: empty for N <= 2 (end clamps)",
            [Input("x", "float32", ["N", 3])],
            [("y", "float32")],
            [
                *dim("x", 0, "n"),
                ints("one", [1]),
                node("Sub", ["n", "one"], ["end"]),
                ints("axes", [0]),
                node("Slice", ["x", "one", "end", "axes"], ["y"], name="/Slice"),
            ],
            sym_runs("N", [0, 1, 2, 3, 6]),
        )
    )
    add(
        Case(
            "slice_end_from_other_input",
            "x[:M] with M = Shape(y)[0]: clamps where M > N",
            [Input("x", "float32", ["N", 3]), Input("y", "float32", ["M"])],
            [("z", "float32")],
            [
                *dim("y", 0, "m"),
                ints("zero", [0]),
                ints("axes", [0]),
                node("Slice", ["x", "zero", "m", "axes"], ["z"], name="/Slice"),
            ],
            [{"N": 5, "M": 3}, {"N": 3, "M": 5}, {"N": 4, "M": 0}, {"N": 0, "M": 2}, {"N": 4, "M": 4}],
        )
    )
    add(
        Case(
            "slice_negative_from_shape",
            "x[-M:] with M = Shape(y)[0]: the start -M clamps to 0 where M > N; M = 0 gives -0 = 0, all rows",
            [Input("x", "float32", ["N", 3]), Input("y", "float32", ["M"])],
            [("z", "float32")],
            [
                *dim("y", 0, "m"),
                node("Neg", ["m"], ["start"]),
                ints("end", [INT64_MAX]),
                ints("axes", [0]),
                node("Slice", ["x", "start", "end", "axes"], ["z"], name="/Slice"),
            ],
            [{"N": 5, "M": 2}, {"N": 2, "M": 5}, {"N": 3, "M": 0}, {"N": 4, "M": 4}],
        )
    )

    # ---- Range
    add(
        Case(
            "range_positions",
            "Range(0, Shape(x)[1], 1), cast to float, added to x as positions",
            [Input("x", "float32", ["B", "S"])],
            [("y", "float32")],
            [
                node("Shape", ["x"], ["shape"]),
                ints("one_ix", 1),
                node("Gather", ["shape", "one_ix"], ["s"], axis=0),
                ints("zero", 0),
                ints("step", 1),
                node("Range", ["zero", "s", "step"], ["pos"], name="/Range"),
                node("Cast", ["pos"], ["posf"], to=TensorProto.FLOAT),
                node("Add", ["x", "posf"], ["y"], name="/Add"),
            ],
            [{"B": 1, "S": 1}, {"B": 2, "S": 5}, {"B": 3, "S": 0}, {"B": 1, "S": 7}],
        )
    )
    add(
        Case(
            "range_start_step_from_shapes",
            "Range(Shape(x)[1], Shape(x)[0], Shape(y)[0]): ceil((N - S) / D) values, never below 0",
            [Input("x", "float32", ["N", "S"]), Input("y", "float32", ["D"])],
            [("r", "int64")],
            [
                node("Shape", ["x"], ["sx"]),
                node("Shape", ["y"], ["sy"]),
                ints("i0", 0),
                ints("i1", 1),
                node("Gather", ["sx", "i0"], ["n"], axis=0),
                node("Gather", ["sx", "i1"], ["s"], axis=0),
                node("Gather", ["sy", "i0"], ["d"], axis=0),
                node("Range", ["s", "n", "d"], ["r"], name="/Range"),
            ],
            [
                {"N": 10, "S": 2, "D": 3},
                {"N": 9, "S": 3, "D": 2},
                {"N": 2, "S": 5, "D": 1},
                {"N": 4, "S": 4, "D": 2},
                {"N": 7, "S": 0, "D": 7},
            ],
            [Violation({"N": 4, "S": 1, "D": 0}, "/Range", "a Range step of 0 (ONNX: delta must not be 0)")],
        )
    )
    add(
        Case(
            "range_reverse_gather",
            "Gather(x, Range(N-1, -1, -1)): x reversed by positions counted down from a symbol",
            [Input("x", "float32", ["N", 3])],
            [("y", "float32")],
            [
                node("Shape", ["x"], ["shape"]),
                ints("i0", 0),
                node("Gather", ["shape", "i0"], ["n"], axis=0),
                ints("one", 1),
                node("Sub", ["n", "one"], ["start"]),
                ints("stop", -1),
                ints("step", -1),
                node("Range", ["start", "stop", "step"], ["ix"], name="/Range"),
                node("Gather", ["x", "ix"], ["y"], name="/Gather_rows", axis=0),
            ],
            sym_runs("N", [0, 1, 4]),
        )
    )
    add(
        Case(
            "position_embedding",
            "GPT-2's embeddings: wte[ids] + wpe[Range(0, S)] with a 16-row wpe; S <= 16 is owed",
            [Input("ids", "int64", ["B", "S"], 0, 10)],
            [("h", "float32")],
            [
                node("Gather", ["wte", "ids"], ["tok"], name="/wte/Gather", axis=0),
                node("Shape", ["ids"], ["shape"]),
                ints("i1", 1),
                node("Gather", ["shape", "i1"], ["s"], axis=0),
                ints("zero", 0),
                ints("step", 1),
                node("Range", ["zero", "s", "step"], ["pos"], name="/Range"),
                node("Gather", ["wpe", "pos"], ["pe"], name="/wpe/Gather", axis=0),
                node("Add", ["tok", "pe"], ["h"], name="/Add"),
            ],
            [{"B": 1, "S": 1}, {"B": 2, "S": 7}, {"B": 1, "S": 16}],
            [Violation({"B": 1, "S": 17}, "/wpe/Gather", "position 16 is past wpe's 16 rows")],
            initializers=[
                numpy_helper.from_array(np.random.default_rng(1).standard_normal((10, 4)).astype(np.float32), "wte"),
                numpy_helper.from_array(np.random.default_rng(2).standard_normal((16, 4)).astype(np.float32), "wpe"),
            ],
        )
    )

    # ---- Reshape with 0 and -1
    add(
        Case(
            "reshape_zero_minus1",
            "Reshape(x, [0, 0, 4, -1]): split heads keeping B and S by 0",
            [Input("x", "float32", ["B", "S", 16])],
            [("y", "float32")],
            [ints("target", [0, 0, 4, -1]), node("Reshape", ["x", "target"], ["y"], name="/Reshape")],
            [{"B": 1, "S": 1}, {"B": 2, "S": 3}, {"B": 3, "S": 1}],
            [Violation({"B": 3, "S": 0}, "/Reshape", "-1 over zero elements has no value (0 * 4 * d = 0 for any d)")],
        )
    )
    add(
        Case(
            "reshape_minus1_merge",
            "Reshape(x, [-1, 16]) then Reshape(y, [0, -1]): merge B and S, then back to one row per merged row",
            [Input("x", "float32", ["B", "S", 16])],
            [("z", "float32")],
            [
                ints("t1", [-1, 16]),
                node("Reshape", ["x", "t1"], ["y"], name="/Reshape"),
                ints("t2", [0, -1]),
                node("Reshape", ["y", "t2"], ["z"], name="/Reshape_1"),
            ],
            [{"B": 1, "S": 1}, {"B": 2, "S": 3}, {"B": 4, "S": 2}],
        )
    )
    add(
        Case(
            "reshape_split_heads_from_shape",
            "Reshape(x, Concat(Shape(x)[0], Shape(x)[1], [4], [4])) as HF attention splits heads",
            [Input("x", "float32", ["B", "S", 16])],
            [("y", "float32")],
            [
                *dim("x", 0, "b"),
                *dim("x", 1, "s"),
                ints("heads", [4, 4]),
                node("Concat", ["b", "s", "heads"], ["target"], axis=0),
                node("Reshape", ["x", "target"], ["y"], name="/Reshape"),
            ],
            [{"B": 1, "S": 1}, {"B": 2, "S": 5}, {"B": 1, "S": 0}],
        )
    )
    add(
        Case(
            "reshape_not_dividing",
            "Reshape(x [N, 4], [-1, 3]): owes 3 | 4N",
            [Input("x", "float32", ["N", 4])],
            [("y", "float32")],
            [ints("target", [-1, 3]), node("Reshape", ["x", "target"], ["y"], name="/Reshape")],
            sym_runs("N", [0, 3, 6]),
            [Violation({"N": 2}, "/Reshape", "8 elements do not divide into rows of 3")],
        )
    )

    # ---- integer Div over a symbol
    add(
        Case(
            "div_half_reshape",
            "Reshape(x [N, 4], Concat([2], N / 2, [4])): owes N even",
            [Input("x", "float32", ["N", 4])],
            [("y", "float32")],
            [
                *dim("x", 0, "n"),
                ints("two", [2]),
                node("Div", ["n", "two"], ["half"], name="/Div"),
                ints("four", [4]),
                node("Concat", ["two", "half", "four"], ["target"], axis=0),
                node("Reshape", ["x", "target"], ["y"], name="/Reshape"),
            ],
            sym_runs("N", [2, 4, 6]),
            [
                Violation({"N": 3}, "/Reshape", "2 * floor(3 / 2) * 4 = 8 elements, not 12"),
                Violation({"N": 0}, "/Reshape", "N / 2 = 0 in a Reshape target copies x's axis 1: 32 elements, not 0"),
            ],
        )
    )
    add(
        Case(
            "div_half_slice",
            "x[:N/2] and x[N/2:] with N / 2 an integer Div of Shape(x)[0]",
            [Input("x", "float32", ["N", 3])],
            [("lo", "float32"), ("hi", "float32")],
            [
                *dim("x", 0, "n"),
                ints("two", [2]),
                node("Div", ["n", "two"], ["half"], name="/Div"),
                ints("zero", [0]),
                ints("end", [INT64_MAX]),
                ints("axes", [0]),
                node("Slice", ["x", "zero", "half", "axes"], ["lo"], name="/Slice"),
                node("Slice", ["x", "half", "end", "axes"], ["hi"], name="/Slice_1"),
            ],
            sym_runs("N", [0, 1, 2, 5, 6]),
        )
    )

    # ---- Cast of shape values
    add(
        Case(
            "cast_shape_int32",
            "Cast(Shape(x), int32) returned, and N * 2 computed in int32, cast back to int64 for a Reshape",
            [Input("x", "float32", ["N", 8])],
            [("s32", "int32"), ("y", "float32")],
            [
                node("Shape", ["x"], ["shape"]),
                node("Cast", ["shape"], ["s32"], name="/Cast", to=TensorProto.INT32),
                *dim("x", 0, "n"),
                node("Cast", ["n"], ["n32"], name="/Cast_1", to=TensorProto.INT32),
                node(
                    "Constant",
                    [],
                    ["two32"],
                    name="/Constant_two32",
                    value=numpy_helper.from_array(np.array([2], np.int32), "two32"),
                ),
                node("Mul", ["n32", "two32"], ["m32"], name="/Mul"),
                node("Cast", ["m32"], ["m"], name="/Cast_2", to=TensorProto.INT64),
                ints("minus1", [-1]),
                node("Concat", ["m", "minus1"], ["target"], axis=0),
                node("Reshape", ["x", "target"], ["y"], name="/Reshape"),
            ],
            sym_runs("N", [1, 2, 3]),
            [Violation({"N": 0}, "/Reshape", "2N = 0 in a Reshape target copies x's axis 0, then -1 over 0 elements")],
        )
    )

    # ---- Expand
    add(
        Case(
            "expand_to_shape",
            "Expand(bias [1, 1, 8], Shape(x)) with x [B, S, 8]",
            [Input("x", "float32", ["B", "S", 8])],
            [("y", "float32")],
            [node("Shape", ["x"], ["shape"]), node("Expand", ["bias", "shape"], ["y"], name="/Expand")],
            [{"B": 1, "S": 1}, {"B": 2, "S": 3}, {"B": 2, "S": 0}],
            initializers=[numpy_helper.from_array(np.arange(8, dtype=np.float32).reshape(1, 1, 8), "bias")],
        )
    )
    add(
        Case(
            "expand_position_ids",
            "position ids: Expand(Unsqueeze(Range(0, S), 0), Concat(B, S)) as int64",
            [Input("ids", "int64", ["B", "S"], 0, 10)],
            [("pos", "int64")],
            [
                node("Shape", ["ids"], ["shape"]),
                ints("i1", 1),
                node("Gather", ["shape", "i1"], ["s"], axis=0),
                ints("zero", 0),
                ints("step", 1),
                node("Range", ["zero", "s", "step"], ["r"], name="/Range"),
                ints("ax0", [0]),
                node("Unsqueeze", ["r", "ax0"], ["r2"]),
                node("Expand", ["r2", "shape"], ["pos"], name="/Expand"),
            ],
            [{"B": 1, "S": 1}, {"B": 3, "S": 4}, {"B": 2, "S": 0}],
        )
    )

    # ---- Where over shapes
    add(
        Case(
            "where_expand_minus1",
            "x.expand(B, -1, -1) as torch exports it: Where(Equal(sizes, -1), ones, sizes) feeding Expand",
            [Input("x", "float32", [1, "S", 8]), Input("y", "float32", ["B", 3])],
            [("z", "float32")],
            [
                *dim("y", 0, "b"),
                ints("rest", [-1, -1]),
                node("Concat", ["b", "rest"], ["sizes"], axis=0),
                ints("m1", [-1]),
                node("Equal", ["sizes", "m1"], ["is_m1"]),
                ints("ones", [1, 1, 1]),
                node("Where", ["is_m1", "ones", "sizes"], ["target"], name="/Where"),
                node("Expand", ["x", "target"], ["z"], name="/Expand"),
            ],
            [{"B": 1, "S": 2}, {"B": 3, "S": 1}, {"B": 4, "S": 5}, {"B": 2, "S": 0}],
        )
    )
    add(
        Case(
            "where_equal_one",
            "Where(Equal(Shape(x), 1), Shape(y), Shape(x)): the broadcast shape, then Expand(x, it)",
            [Input("x", "float32", ["N", 4]), Input("y", "float32", ["M", 4])],
            [("z", "float32")],
            [
                node("Shape", ["x"], ["sx"]),
                node("Shape", ["y"], ["sy"]),
                ints("one", [1]),
                node("Equal", ["sx", "one"], ["is1"]),
                node("Where", ["is1", "sy", "sx"], ["target"], name="/Where"),
                node("Expand", ["x", "target"], ["z"], name="/Expand"),
            ],
            [{"N": 1, "M": 3}, {"N": 3, "M": 3}, {"N": 1, "M": 1}, {"N": 2, "M": 5}, {"N": 1, "M": 0}],
        )
    )

    # ---- Split
    add(
        Case(
            "split_symbolic_parts",
            "Split(x, [N - 2, 2]) with the sizes from Shape: owes N >= 2",
            [Input("x", "float32", ["N", 3])],
            [("a", "float32"), ("b", "float32")],
            [
                *dim("x", 0, "n"),
                ints("two", [2]),
                node("Sub", ["n", "two"], ["head"]),
                node("Concat", ["head", "two"], ["sizes"], axis=0),
                node("Split", ["x", "sizes"], ["a", "b"], name="/Split", axis=0),
            ],
            sym_runs("N", [2, 3, 7]),
            [Violation({"N": 1}, "/Split", "a part of N - 2 = -1 rows")],
        )
    )
    add(
        Case(
            "split_div_parts",
            "Split(x, [N / 2, N - N / 2]) with an integer Div",
            [Input("x", "float32", ["N", 3])],
            [("a", "float32"), ("b", "float32")],
            [
                *dim("x", 0, "n"),
                ints("two", [2]),
                node("Div", ["n", "two"], ["half"], name="/Div"),
                node("Sub", ["n", "half"], ["rest"]),
                node("Concat", ["half", "rest"], ["sizes"], axis=0),
                node("Split", ["x", "sizes"], ["a", "b"], name="/Split", axis=0),
            ],
            sym_runs("N", [0, 1, 5, 6]),
        )
    )
    add(
        Case(
            "split_equal_symbolic",
            "Split(x [B, N], axis 1) into 2 equal parts (opset 17): owes N even",
            [Input("x", "float32", ["B", "N"])],
            [("a", "float32"), ("b", "float32")],
            [node("Split", ["x"], ["a", "b"], name="/Split", axis=1)],
            [{"B": 1, "N": 2}, {"B": 2, "N": 6}, {"B": 3, "N": 0}],
            [Violation({"B": 2, "N": 3}, "/Split", "3 columns do not split into 2 equal parts")],
        )
    )
    add(
        Case(
            "split_num_outputs_opset18",
            "Split(x [N, 2], num_outputs=3) (opset 18): parts of ceil(N / 3), the last one what remains",
            [Input("x", "float32", ["N", 2])],
            [("a", "float32"), ("b", "float32"), ("c", "float32")],
            [node("Split", ["x"], ["a", "b", "c"], name="/Split", axis=0, num_outputs=3)],
            sym_runs("N", [3, 7, 8, 9]),
            opset=18,
        )
    )

    # ---- Concat along a symbolic axis
    add(
        Case(
            "concat_symbolic_axis",
            "Concat([N, 4], [M, 4], axis 0) -> [N + M, 4], then flattened by Reshape(-1)",
            [Input("x", "float32", ["N", 4]), Input("y", "float32", ["M", 4])],
            [("z", "float32"), ("flat", "float32")],
            [
                node("Concat", ["x", "y"], ["z"], name="/Concat", axis=0),
                ints("m1", [-1]),
                node("Reshape", ["z", "m1"], ["flat"], name="/Reshape"),
            ],
            [{"N": 1, "M": 1}, {"N": 0, "M": 3}, {"N": 5, "M": 2}, {"N": 2, "M": 0}],
        )
    )
    add(
        Case(
            "concat_kv_past",
            "keys = Concat(past [1, P, 4], cur [1, S, 4], axis 1), scores = keys @ q^T: [1, P + S, S]",
            [Input("past", "float32", [1, "P", 4]), Input("cur", "float32", [1, "S", 4])],
            [("scores", "float32")],
            [
                node("Concat", ["past", "cur"], ["keys"], name="/Concat", axis=1),
                node("Transpose", ["cur"], ["curT"], perm=[0, 2, 1]),
                node("MatMul", ["keys", "curT"], ["scores"], name="/MatMul"),
            ],
            [{"P": 0, "S": 3}, {"P": 4, "S": 1}, {"P": 2, "S": 5}],
        )
    )
    add(
        Case(
            "concat_unequal_other_axis",
            "Concat([N, 4], [M, 3], axis 1): owes N == M",
            [Input("x", "float32", ["N", 4]), Input("y", "float32", ["M", 3])],
            [("z", "float32")],
            [node("Concat", ["x", "y"], ["z"], name="/Concat", axis=1)],
            [{"N": 2, "M": 2}, {"N": 5, "M": 5}, {"N": 0, "M": 0}],
            [Violation({"N": 3, "M": 4}, "/Concat", "rows 3 and 4 differ")],
        )
    )
    add(
        Case(
            "add_unequal_axes",
            "x [N, 4] + y [M, 4]: owes N == M (both symbolic, neither 1 known)",
            [Input("x", "float32", ["N", 4]), Input("y", "float32", ["M", 4])],
            [("z", "float32")],
            [node("Add", ["x", "y"], ["z"], name="/Add")],
            [{"N": 3, "M": 3}, {"N": 1, "M": 1}, {"N": 6, "M": 6}],
            [Violation({"N": 3, "M": 4}, "/Add", "3 and 4 do not broadcast")],
        )
    )

    # ---- ConstantOfShape
    add(
        Case(
            "constant_of_shape",
            "ConstantOfShape(Concat(Shape(x)[0], [3]), 2.5) concatenated to x; ConstantOfShape(Shape(x)) of int64 1",
            [Input("x", "float32", ["N", 2])],
            [("y", "float32"), ("ones", "int64")],
            [
                *dim("x", 0, "n"),
                ints("three", [3]),
                node("Concat", ["n", "three"], ["target"], axis=0),
                node(
                    "ConstantOfShape",
                    ["target"],
                    ["fill"],
                    name="/ConstantOfShape",
                    value=numpy_helper.from_array(np.array([2.5], np.float32), "value"),
                ),
                node("Concat", ["x", "fill"], ["y"], name="/Concat", axis=1),
                node("Shape", ["x"], ["shape"]),
                node(
                    "ConstantOfShape",
                    ["shape"],
                    ["ones"],
                    name="/ConstantOfShape_1",
                    value=numpy_helper.from_array(np.array([1], np.int64), "value"),
                ),
            ],
            sym_runs("N", [0, 1, 4]),
        )
    )

    # ---- spelled dim_params
    add(
        Case(
            "dim_param_past_plus_one",
            "mask [1, past + 1] added to the scores of keys Concat(past_key [1, past, 4], x [1, 1, 4])",
            [
                Input("past_key", "float32", [1, "past", 4]),
                Input("x", "float32", [1, 1, 4]),
                Input("mask", "float32", [1, "past + 1"]),
            ],
            [("y", "float32")],
            [
                node("Concat", ["past_key", "x"], ["keys"], name="/Concat", axis=1),
                ints("axes", [2]),
                node("ReduceSum", ["keys", "axes"], ["scores"], name="/ReduceSum", keepdims=0),
                node("Add", ["scores", "mask"], ["y"], name="/Add"),
            ],
            sym_runs("past", [0, 1, 5]),
            [Violation({"past": 3, "mask": 5}, "mask", "mask's axis 1 is 5, not past + 1 = 4")],
        )
    )
    add(
        Case(
            "dim_param_2n",
            "Concat(x, x) [2N, 4] + y [2 * N, 4]",
            [Input("x", "float32", ["N", 4]), Input("y", "float32", ["2 * N", 4])],
            [("z", "float32")],
            [node("Concat", ["x", "x"], ["xx"], name="/Concat", axis=0), node("Add", ["xx", "y"], ["z"], name="/Add")],
            sym_runs("N", [0, 1, 3]),
            [Violation({"N": 2, "y": 5}, "y", "y's axis 0 is 5, not 2 * N = 4")],
        )
    )
    add(
        Case(
            "dim_param_product",
            "Reshape(x [batch, seq, 4], [-1, 4]) + y [batch * seq, 4]",
            [Input("x", "float32", ["batch", "seq", 4]), Input("y", "float32", ["batch * seq", 4])],
            [("z", "float32")],
            [
                ints("target", [-1, 4]),
                node("Reshape", ["x", "target"], ["flat"], name="/Reshape"),
                node("Add", ["flat", "y"], ["z"], name="/Add"),
            ],
            [{"batch": 1, "seq": 1}, {"batch": 2, "seq": 3}, {"batch": 3, "seq": 0}],
            [Violation({"batch": 2, "seq": 3, "y": 5}, "y", "y's axis 0 is 5, not batch * seq = 6")],
        )
    )

    # ---- GPT-2's causal mask
    bias = np.tril(np.ones((16, 16), dtype=bool)).reshape(1, 1, 16, 16)
    add(
        Case(
            "causal_mask_slice",
            "GPT-2: bias[:, :, k-q:k, :k] of a [1,1,16,16] bool buffer, k and q from Shapes, Where on scores",
            [Input("query", "float32", ["B", 2, "Q", 8]), Input("key", "float32", ["B", 2, "K", 8])],
            [("probs", "float32")],
            [
                node("Transpose", ["key"], ["keyT"], perm=[0, 1, 3, 2]),
                node("MatMul", ["query", "keyT"], ["scores"], name="/attn/MatMul"),
                *dim("query", 2, "q"),
                *dim("key", 2, "k"),
                node("Sub", ["k", "q"], ["start"], name="/attn/Sub"),
                ints("zero", [0]),
                node("Concat", ["start", "zero"], ["starts"], axis=0),
                node("Concat", ["k", "k"], ["ends"], axis=0),
                ints("axes", [2, 3]),
                node("Slice", ["bias", "starts", "ends", "axes"], ["mask"], name="/attn/Slice_3"),
                node(
                    "Constant",
                    [],
                    ["neg"],
                    name="/attn/Constant_neg",
                    value=numpy_helper.from_array(np.array(-10000.0, np.float32), "neg"),
                ),
                node("Where", ["mask", "scores", "neg"], ["masked"], name="/attn/Where"),
                node("Softmax", ["masked"], ["probs"], name="/attn/Softmax", axis=-1),
            ],
            [
                {"B": 1, "Q": 1, "K": 1},
                {"B": 2, "Q": 5, "K": 5},
                {"B": 1, "Q": 1, "K": 6},
                {"B": 1, "Q": 3, "K": 7},
                {"B": 1, "Q": 16, "K": 16},
            ],
            [
                Violation({"B": 1, "Q": 17, "K": 17}, "/attn/Where", "the mask buffer holds 16 positions"),
                Violation({"B": 1, "Q": 1, "K": 20}, "/attn/Where", "k = 20 is past the 16 the buffer holds"),
                Violation({"B": 1, "Q": 3, "K": 2}, "/attn/Where", "k - q = -1 reads from the end"),
            ],
            initializers=[numpy_helper.from_array(bias, "bias")],
        )
    )

    # ---- arithmetic on shape values
    add(
        Case(
            "shape_mul_add_values",
            "Concat(B + S, B * S, S - B) returned as an int64 tensor; Reshape(x, [B * S * 2, 4])",
            [Input("x", "float32", ["B", "S", 8])],
            [("vals", "int64"), ("y", "float32")],
            [
                *dim("x", 0, "b"),
                *dim("x", 1, "s"),
                node("Add", ["b", "s"], ["sum"], name="/Add"),
                node("Mul", ["b", "s"], ["prod"], name="/Mul"),
                node("Sub", ["s", "b"], ["diff"], name="/Sub"),
                node("Concat", ["sum", "prod", "diff"], ["vals"], axis=0),
                ints("two", [2]),
                node("Mul", ["prod", "two"], ["rows"], name="/Mul_1"),
                ints("four", [4]),
                node("Concat", ["rows", "four"], ["target"], axis=0),
                node("Reshape", ["x", "target"], ["y"], name="/Reshape"),
            ],
            [{"B": 1, "S": 1}, {"B": 2, "S": 5}, {"B": 4, "S": 2}, {"B": 1, "S": 3}],
            [Violation({"B": 3, "S": 0}, "/Reshape", "2BS = 0 in a Reshape target copies x's axis 0 (3): 12 elements")],
        )
    )
    add(
        Case(
            "gather_negative_index",
            "Reshape(x, [-1, Shape(x)[-2] * Shape(x)[-1]]) with negative Gather indices (scalar and 1-D)",
            [Input("x", "float32", ["B", "S", 8])],
            [("y", "float32")],
            [
                node("Shape", ["x"], ["shape"]),
                ints("m1", -1),
                ints("m2", [-2]),
                node("Gather", ["shape", "m1"], ["last"], name="/Gather", axis=0),
                node("Gather", ["shape", "m2"], ["second"], name="/Gather_1", axis=0),
                node("Mul", ["second", "last"], ["inner"], name="/Mul"),
                ints("minus1", [-1]),
                node("Concat", ["minus1", "inner"], ["target"], axis=0),
                node("Reshape", ["x", "target"], ["y"], name="/Reshape"),
            ],
            [{"B": 1, "S": 1}, {"B": 2, "S": 3}, {"B": 1, "S": 6}],
        )
    )
    add(
        Case(
            "squeeze_unsqueeze_shape",
            "Squeeze(Slice(Shape(x), 1, 2)) then Unsqueeze: the same extent through scalar and 1-D spellings",
            [Input("x", "float32", ["B", "S", 4])],
            [("y", "float32")],
            [
                node("Shape", ["x"], ["shape"]),
                ints("one", [1]),
                ints("two", [2]),
                node("Slice", ["shape", "one", "two"], ["s1"], name="/Slice"),
                ints("ax0", [0]),
                node("Squeeze", ["s1", "ax0"], ["s"], name="/Squeeze"),
                node("Unsqueeze", ["s", "ax0"], ["s_again"], name="/Unsqueeze"),
                ints("m1", [-1]),
                ints("four", [4]),
                node("Concat", ["m1", "s_again", "four"], ["target"], axis=0),
                node("Reshape", ["x", "target"], ["y"], name="/Reshape"),
            ],
            [{"B": 1, "S": 1}, {"B": 3, "S": 2}, {"B": 2, "S": 5}],
        )
    )
    add(
        Case(
            "reduce_prod_numel",
            "Reshape(x, ReduceProd(Shape(x), keepdims=1)): flatten by the element count",
            [Input("x", "float32", ["B", "S", 3])],
            [("y", "float32")],
            [
                node("Shape", ["x"], ["shape"]),
                node("ReduceProd", ["shape"], ["numel"], name="/ReduceProd", keepdims=1),
                node("Reshape", ["x", "numel"], ["y"], name="/Reshape"),
            ],
            [{"B": 1, "S": 1}, {"B": 2, "S": 4}, {"B": 3, "S": 2}],
            [Violation({"B": 3, "S": 0}, "/Reshape", "a count of 0 in a Reshape target copies x's axis 0 (3)")],
        )
    )
    add(
        Case(
            "mul_chain_numel",
            "Reshape(x, [Shape(x)[0] * Shape(x)[1] * Shape(x)[2]]) by a chain of Muls",
            [Input("x", "float32", ["B", "S", 3])],
            [("y", "float32")],
            [
                *dim("x", 0, "d0"),
                *dim("x", 1, "d1"),
                *dim("x", 2, "d2"),
                node("Mul", ["d0", "d1"], ["p01"], name="/Mul"),
                node("Mul", ["p01", "d2"], ["numel"], name="/Mul_1"),
                node("Reshape", ["x", "numel"], ["y"], name="/Reshape"),
            ],
            [{"B": 1, "S": 1}, {"B": 2, "S": 4}, {"B": 3, "S": 2}],
            [Violation({"B": 3, "S": 0}, "/Reshape", "a count of 0 in a Reshape target copies x's axis 0 (3)")],
        )
    )
    add(
        Case(
            "size_op",
            "Reshape(x, Unsqueeze(Size(x))) and Size returned",
            [Input("x", "float32", ["B", 2, "S"])],
            [("n", "int64"), ("y", "float32")],
            [
                node("Size", ["x"], ["n"], name="/Size"),
                ints("ax0", [0]),
                node("Unsqueeze", ["n", "ax0"], ["n1"]),
                node("Reshape", ["x", "n1"], ["y"], name="/Reshape"),
            ],
            [{"B": 1, "S": 1}, {"B": 2, "S": 3}, {"B": 0, "S": 4}],
        )
    )
    add(
        Case(
            "shape_start_end",
            "Shape(x, start=1) (opset 15+): [S, 8] feeding a Reshape target Concat([-1], Shape(x, start=1))",
            [Input("x", "float32", ["B", "S", 8])],
            [("y", "float32")],
            [
                node("Shape", ["x"], ["tail"], name="/Shape", start=1),
                ints("m1", [-1]),
                node("Concat", ["m1", "tail"], ["target"], axis=0),
                node("Reshape", ["x", "target"], ["y"], name="/Reshape"),
            ],
            [{"B": 1, "S": 1}, {"B": 3, "S": 2}, {"B": 2, "S": 4}],
            [Violation({"B": 2, "S": 0}, "/Reshape", "S = 0 in a Reshape target copies x's axis 1, then -1 over 0")],
        )
    )

    # ---- more spellings exporters use
    add(
        Case(
            "flatten_view_opset11",
            "x.view(x.size(0), -1) at opset 11: Unsqueeze takes axes as an attribute",
            [Input("x", "float32", ["N", 3, 4])],
            [("y", "float32", 2)],
            [
                *dim("x", 0, "n", opset=11),
                ints("minus1", [-1]),
                node("Concat", ["n", "minus1"], ["target"], axis=0),
                node("Reshape", ["x", "target"], ["y"], name="/Reshape"),
            ],
            sym_runs("N", [1, 2, 5]),
            opset=11,
        )
    )
    add(
        Case(
            "range_int32",
            "Range(0, int32(Shape(x)[1]), 1) in int32, returned, and cast to float and added to x",
            [Input("x", "float32", ["B", "S"])],
            [("pos", "int32"), ("y", "float32")],
            [
                node("Shape", ["x"], ["shape"]),
                ints("i1", 1),
                node("Gather", ["shape", "i1"], ["s"], axis=0),
                node("Cast", ["s"], ["s32"], name="/Cast", to=TensorProto.INT32),
                node("Constant", [], ["zero32"], value=numpy_helper.from_array(np.array(0, np.int32), "zero32")),
                node("Constant", [], ["one32"], value=numpy_helper.from_array(np.array(1, np.int32), "one32")),
                node("Range", ["zero32", "s32", "one32"], ["pos"], name="/Range"),
                node("Cast", ["pos"], ["posf"], name="/Cast_1", to=TensorProto.FLOAT),
                node("Add", ["x", "posf"], ["y"], name="/Add"),
            ],
            [{"B": 1, "S": 1}, {"B": 2, "S": 6}, {"B": 3, "S": 0}],
        )
    )
    add(
        Case(
            "min_max_of_shape_slice",
            "x[:Min(N, 4)] and x[Max(N - 4, 0):]: a clamp spelled as Min and Max nodes",
            [Input("x", "float32", ["N", 3])],
            [("head", "float32"), ("tail", "float32")],
            [
                *dim("x", 0, "n"),
                ints("four", [4]),
                ints("zero", [0]),
                ints("end", [INT64_MAX]),
                ints("axes", [0]),
                node("Min", ["n", "four"], ["hi"], name="/Min"),
                node("Slice", ["x", "zero", "hi", "axes"], ["head"], name="/Slice"),
                node("Sub", ["n", "four"], ["nm4"], name="/Sub"),
                node("Max", ["nm4", "zero"], ["lo"], name="/Max"),
                node("Slice", ["x", "lo", "end", "axes"], ["tail"], name="/Slice_1"),
            ],
            sym_runs("N", [0, 2, 4, 9]),
        )
    )
    add(
        Case(
            "concat_then_slice_tail",
            "keys = Concat(past [P, 4], cur [S, 4]); keys[-S:] is cur again (start P + S - S = P, never clamped)",
            [Input("past", "float32", ["P", 4]), Input("cur", "float32", ["S", 4])],
            [("tail", "float32"), ("same", "float32")],
            [
                node("Concat", ["past", "cur"], ["keys"], name="/Concat", axis=0),
                *dim("cur", 0, "s"),
                node("Neg", ["s"], ["start"], name="/Neg"),
                ints("end", [INT64_MAX]),
                ints("axes", [0]),
                node("Slice", ["keys", "start", "end", "axes"], ["tail"], name="/Slice"),
                node("Sub", ["tail", "cur"], ["same"], name="/Sub_same"),
            ],
            [{"P": 0, "S": 3}, {"P": 5, "S": 1}, {"P": 2, "S": 2}, {"P": 0, "S": 1}],
            [Violation({"P": 3, "S": 0}, ["/Slice", "/Sub_same"], "-S = -0 = 0 is no index from the end: all P rows")],
        )
    )
    return out


# ----------------------------------------------------------------------------------------------------------
# Checking against onnxruntime and writing


def run_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 4
    session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return list(session.run(None, feeds))


def symbols_of(inputs: Sequence[Input]) -> set[str]:
    out = set()
    for i in inputs:
        for d in i.shape:
            if isinstance(d, str):
                out.update(w for w in d.split(" ") if w.isidentifier())
    return out


def check(case: Case, model: onnx.ModelProto) -> list[str]:
    """What is wrong with a case: a run onnxruntime refuses, a violation it accepts, too few values."""
    problems = []
    specs = [i.spec() for i in case.inputs]
    for sym in sorted(symbols_of(case.inputs)):
        values = {run[sym] for run in case.runs}
        if len(values) < 2:
            problems.append(f"symbol {sym} runs at {sorted(values)} only")
    for run in case.runs:
        if set(run) != symbols_of(case.inputs):
            problems.append(f"run {run} does not assign exactly {sorted(symbols_of(case.inputs))}")
            continue
        try:
            run_ort(model, make_feeds(specs, run))
        except Exception as err:
            problems.append(f"run {run}: onnxruntime fails: {str(err).splitlines()[0][:200]}")
    for v in case.violations:
        try:
            run_ort(model, make_feeds(specs, v.at))
        except Exception:  # failing is what a violation must do
            continue
        problems.append(f"violation {v.at}: onnxruntime runs it")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check-only", action="store_true", help="check against onnxruntime, write nothing")
    args = parser.parse_args(argv)
    all_cases = cases()
    names = [c.name for c in all_cases]
    assert len(set(names)) == len(names), "case names repeat"
    manifest: dict[str, Any] = {}
    failed = False
    texts = {}
    for case in all_cases:
        model = case.model()
        onnx.checker.check_model(model)
        text = onnx.printer.to_text(model)
        reread = onnx.parser.parse_model(text)
        onnx.checker.check_model(reread)
        problems = check(case, reread)
        for p in problems:
            print(f"{case.name}: {p}", file=sys.stderr)
        failed |= bool(problems)
        texts[case.name] = text
        manifest[case.name] = {
            "doc": case.doc,
            "inputs": [i.spec() for i in case.inputs],
            "runs": case.runs,
            "violations": [{"at": v.at, "match": v.match, "why": v.why} for v in case.violations],
        }
    if failed:
        print("not written: fix the cases above", file=sys.stderr)
        return 1
    if args.check_only:
        print(f"{len(all_cases)} cases check against onnxruntime")
        return 0
    MODELS.mkdir(parents=True, exist_ok=True)
    for old in MODELS.glob("*.onnxtext"):
        if old.stem not in texts:
            old.unlink()
    for name, text in texts.items():
        (MODELS / f"{name}.onnxtext").write_text(text + "\n", encoding="utf-8")
    body = {
        "about": "written by scripts/make_semantics_models.py; every run and violation checked against onnxruntime",
        "cases": manifest,
    }
    lines = ["{", f' "about": {json.dumps(body["about"])},', ' "cases": {']
    for k, name in enumerate(manifest):
        comma = "," if k < len(manifest) - 1 else ""
        lines.append(f"  {json.dumps(name)}: {json.dumps(manifest[name])}{comma}")
    (OUT / "cases.json").write_text("\n".join([*lines, " }", "}"]) + "\n", encoding="utf-8")
    runs = sum(len(c.runs) for c in all_cases)
    bad = sum(len(c.violations) for c in all_cases)
    print(f"wrote {len(all_cases)} models, {runs} runs, {bad} violations to {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
