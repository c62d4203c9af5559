"""The `stablehlo` input dialect: the StableHLO ops Loam reads, in the syntax JAX prints.

StableHLO is the second front end's input (`loam.frontends.stablehlo` lowers it into the `graph`
dialect).  xDSL 0.75 ships no StableHLO dialect, so this one defines the ops the reader translates,
each with the custom ("pretty") syntax `jax.jit(f).lower(...).as_text()` prints and, through xDSL's
generic parser, the generic form `"stablehlo.add"(%a, %b) : (...) -> ...`.  Tensors, element types,
`dense<...>` and `array<i64: ...>` are xDSL's builtin ones.  Verification checks what the reader
relies on (operand and result types agree), so a malformed file stops at the op that is wrong
rather than somewhere in the graph.

    %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0]
           : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
    %1 = stablehlo.broadcast_in_dim %b, dims = [1] : (tensor<16xf32>) -> tensor<4x16xf32>
    %2 = stablehlo.add %0, %1 : tensor<4x16xf32>
    %3 = stablehlo.compare  GT, %2, %z,  FLOAT : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xi1>
    %4 = stablehlo.reduce(%2 init: %c) applies stablehlo.add across dimensions = [1]
           : (tensor<4x16xf32>, tensor<f32>) -> tensor<4xf32>

Each op's custom syntax is an xDSL `assembly_format` (`StableHLOOp`) over a few custom directives,
the pieces MLIR's StableHLO spells its own way (`custom<IntList>` for `dims = [1, 0]`,
`custom<SameOperandsAndResultType>` for `: T`, ...); only `constant`, `reduce` and `custom_call`,
whose syntax no format expresses, parse and print by hand.

The package, by concern:

- `base`: the tensor-type checks the verifiers share, integer lists, `EnumAttr`;
- `attributes`: the enums and dimension numbers (`#stablehlo<comparison_direction GT>`, ...);
- `syntax`: the shared assembly-format directives and `StableHLOOp`;
- `elementwise`: `add` ... `convert`, `select`, `compare`;
- `movement`: `constant`, broadcasts, reshapes, `transpose`, `concatenate`, `slice`, iotas,
  `get_dimension_size`, `pad`, `reverse`;
- `contraction`: `dot_general`;
- `indexing`: `dynamic_slice`, `dynamic_update_slice`, `gather`, `scatter`, `sort`;
- `reduce`: `reduce` and its terminator `return`;
- `control`: `while` and `case`, whose regions end in `return` too;
- `custom_call`: `custom_call`;
- `window`: `convolution`, `reduce_window` and `select_and_scatter`;
- `chlo`: the `chlo` dialect's elementwise ops JAX prints (`chlo.erf`, ...), a dialect of its own (`CHLO`).

This module defines the dialect and re-exports the public names, so `from loam.dialects.stablehlo
import AddOp` reads every op and attribute wherever it lives.

Only the ops listed in `StableHLO` exist here; any other `stablehlo.*` op is unknown to the parser,
which is how the reader refuses it (naming the op and its place in the file).
"""

from __future__ import annotations

from xdsl.ir import Dialect

from loam.dialects.stablehlo.attributes import (
    ComparisonDirectionAttr,
    ComparisonTypeAttr,
    DotDimensionNumbersAttr,
    GatherDimensionNumbersAttr,
    PrecisionAttr,
    ScatterDimensionNumbersAttr,
)
from loam.dialects.stablehlo.base import ranked, shape_of
from loam.dialects.stablehlo.chlo import CHLO, AcosOp, AsinOp, AtanOp, CoshOp, ErfOp, SinhOp, SquareOp
from loam.dialects.stablehlo.contraction import DotGeneralOp
from loam.dialects.stablehlo.control import CaseOp, WhileOp
from loam.dialects.stablehlo.custom_call import CustomCallOp
from loam.dialects.stablehlo.elementwise import (
    AbsOp,
    AddOp,
    AndOp,
    Atan2Op,
    BinaryOp,
    CbrtOp,
    CeilOp,
    ClampOp,
    CompareOp,
    ConvertOp,
    CosineOp,
    DivideOp,
    ElementwiseOp,
    ExponentialMinusOneOp,
    ExponentialOp,
    FloorOp,
    IsFiniteOp,
    LogisticOp,
    LogOp,
    LogPlusOneOp,
    MaximumOp,
    MinimumOp,
    MultiplyOp,
    NegateOp,
    NotOp,
    OrOp,
    PowerOp,
    RemainderOp,
    RoundNearestEvenOp,
    RsqrtOp,
    SelectOp,
    SignOp,
    SineOp,
    SqrtOp,
    SubtractOp,
    TanhOp,
    TanOp,
    UnaryOp,
    XorOp,
)
from loam.dialects.stablehlo.indexing import DynamicSliceOp, DynamicUpdateSliceOp, GatherOp, ScatterOp, SortOp
from loam.dialects.stablehlo.movement import (
    BroadcastInDimOp,
    ConcatenateOp,
    ConstantOp,
    DynamicBroadcastInDimOp,
    DynamicIotaOp,
    DynamicReshapeOp,
    GetDimensionSizeOp,
    IotaOp,
    PadOp,
    ReshapeOp,
    ReverseOp,
    SliceOp,
    TransposeOp,
)
from loam.dialects.stablehlo.reduce import ReduceOp, ReturnOp
from loam.dialects.stablehlo.syntax import StableHLOOp
from loam.dialects.stablehlo.window import ConvDimensionNumbersAttr, ConvolutionOp, ReduceWindowOp, SelectAndScatterOp

__all__ = [
    "CHLO",
    "AbsOp",
    "AcosOp",
    "AddOp",
    "AndOp",
    "AsinOp",
    "Atan2Op",
    "AtanOp",
    "BinaryOp",
    "BroadcastInDimOp",
    "CaseOp",
    "CbrtOp",
    "CeilOp",
    "ClampOp",
    "CompareOp",
    "ComparisonDirectionAttr",
    "ComparisonTypeAttr",
    "ConcatenateOp",
    "ConstantOp",
    "ConvDimensionNumbersAttr",
    "ConvertOp",
    "ConvolutionOp",
    "CoshOp",
    "CosineOp",
    "CustomCallOp",
    "DivideOp",
    "DotDimensionNumbersAttr",
    "DotGeneralOp",
    "DynamicBroadcastInDimOp",
    "DynamicIotaOp",
    "DynamicReshapeOp",
    "DynamicSliceOp",
    "DynamicUpdateSliceOp",
    "ElementwiseOp",
    "ErfOp",
    "ExponentialMinusOneOp",
    "ExponentialOp",
    "FloorOp",
    "GatherDimensionNumbersAttr",
    "GatherOp",
    "GetDimensionSizeOp",
    "IotaOp",
    "IsFiniteOp",
    "LogOp",
    "LogPlusOneOp",
    "LogisticOp",
    "MaximumOp",
    "MinimumOp",
    "MultiplyOp",
    "NegateOp",
    "NotOp",
    "OrOp",
    "PadOp",
    "PowerOp",
    "PrecisionAttr",
    "ReduceOp",
    "ReduceWindowOp",
    "RemainderOp",
    "ReshapeOp",
    "ReturnOp",
    "ReverseOp",
    "RoundNearestEvenOp",
    "RsqrtOp",
    "ScatterDimensionNumbersAttr",
    "ScatterOp",
    "SelectAndScatterOp",
    "SelectOp",
    "SignOp",
    "SineOp",
    "SinhOp",
    "SliceOp",
    "SortOp",
    "SqrtOp",
    "SquareOp",
    "StableHLO",
    "StableHLOOp",
    "SubtractOp",
    "TanOp",
    "TanhOp",
    "TransposeOp",
    "UnaryOp",
    "WhileOp",
    "XorOp",
    "ranked",
    "shape_of",
]

StableHLO = Dialect(
    "stablehlo",
    [
        AddOp,
        SubtractOp,
        MultiplyOp,
        DivideOp,
        MaximumOp,
        MinimumOp,
        PowerOp,
        AndOp,
        OrOp,
        NegateOp,
        AbsOp,
        ExponentialOp,
        LogOp,
        TanhOp,
        LogisticOp,
        SqrtOp,
        RsqrtOp,
        SineOp,
        CosineOp,
        TanOp,
        CbrtOp,
        SignOp,
        FloorOp,
        CeilOp,
        RoundNearestEvenOp,
        Atan2Op,
        RemainderOp,
        NotOp,
        ConvertOp,
        WhileOp,
        CaseOp,
        XorOp,
        LogPlusOneOp,
        IsFiniteOp,
        ExponentialMinusOneOp,
        ClampOp,
        SelectOp,
        CompareOp,
        ConstantOp,
        BroadcastInDimOp,
        DynamicBroadcastInDimOp,
        ReshapeOp,
        DynamicReshapeOp,
        TransposeOp,
        ConcatenateOp,
        SliceOp,
        ReverseOp,
        PadOp,
        IotaOp,
        DynamicIotaOp,
        GetDimensionSizeOp,
        DotGeneralOp,
        ReduceOp,
        ReturnOp,
        GatherOp,
        ScatterOp,
        SortOp,
        DynamicSliceOp,
        DynamicUpdateSliceOp,
        CustomCallOp,
        ConvolutionOp,
        ReduceWindowOp,
        SelectAndScatterOp,
    ],
    [
        ComparisonDirectionAttr,
        ComparisonTypeAttr,
        PrecisionAttr,
        DotDimensionNumbersAttr,
        GatherDimensionNumbersAttr,
        ScatterDimensionNumbersAttr,
        ConvDimensionNumbersAttr,
    ],
)
"""The ops Loam reads; `loam.frontends.stablehlo` says what each one becomes in the graph dialect."""
