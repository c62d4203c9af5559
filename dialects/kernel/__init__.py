"""The `kernel` dialect: what the generated module computes, one kernel call per op.

A `kernel.program` is the body of `forward`: its block arguments are forward's inputs, its ops
run in order, and `kernel.return` hands back the outputs.  Every value is typed
`!tensor_axes.tensor<...>` (the op definitions accept any type, so this module does not import
`tensor_axes`; verifiers read `.axes` where the type has them, and the backends require it).
Every compute op carries `node`, the ONNX node it computes, for comments and the fusion report.

Example:

```mlir
kernel.program "forward" (%x : !tensor_axes.tensor<f32, [Batch: 4, In: 8]>) names ["x"] {
  %w = kernel.weight "fc1.weight" : !tensor_axes.tensor<f32, [In: 8, Hidden: 16]>
  %b = kernel.weight "fc1.bias" : !tensor_axes.tensor<f32, [Hidden: 16]>
  %0 = kernel.matmul %x, %w {node = "fc1"} : (...) -> !tensor_axes.tensor<f32, [Batch: 4, Hidden: 16]>
  %1 = kernel.zip(%0, %b) #kernel.expr<[operand 0, operand 1, add 0 1, relu 2]> {node = "fc1"}
       : (...) -> !tensor_axes.tensor<f32, [Batch: 4, Hidden: 16]>
  kernel.return %1 names ["y"] : !tensor_axes.tensor<f32, [Batch: 4, Hidden: 16]>
}
```

An elementwise computation is an `Expr`: data, never a closure, so fusion can compose it and a
backend can print it as numpy or WGSL.  `#kernel.expr<[step, ...]>` lists its steps; each step is
`operand I`, `const V : ELEM`, `UNARY J`, `BINARY J K`, `select C A B` or `cast J : ELEM`, reading
earlier steps by index; the last step is the result.

The package splits the dialect by kernel family: `program` (the program, its return, weights and
constants), `elementwise` (zip, cast), `products` (matmul), `layout` (permute, regroup), `control`
(if, yield), the library kernels (`library`, their base, then one module per family: `movement`,
`indexing`, `packed`, `reductions`, `normalization`, `losses`, `narrow`, `linalg`, `convolution`,
`signal` (Fourier transforms), `recurrent`, `stochastic` (random draws), each listing its ops in a
tuple the dialect collects) and `tile` (tile programs); `attributes` and `base` hold what the ops
share.  Every public name is imported from here, `loam.dialects.kernel`, which also defines the
`Kernel` dialect object.
"""

from __future__ import annotations

from xdsl.ir import Dialect

from loam.dialects.kernel.attention import ATTENTION_OPS, AttentionOp
from loam.dialects.kernel.attributes import ExprAttr, TileProgramAttr
from loam.dialects.kernel.control import CONTROL_OPS, IfOp, LoopOp, YieldOp
from loam.dialects.kernel.convolution import (
    CONV_OPS,
    AffineGridOp,
    Col2ImOp,
    ConvIntegerOp,
    ConvOp,
    ConvTransposeOp,
    DeformConvOp,
    GridSampleOp,
    MaxUnpoolOp,
    PoolOp,
    QLinearConvOp,
    ResizeOp,
    ResizeToOp,
    RoiAlignOp,
)
from loam.dialects.kernel.elementwise import CastOp, ZipOp
from loam.dialects.kernel.indexing import (
    INDEXING_OPS,
    CompressOp,
    EyeLikeOp,
    GatherElementsOp,
    GatherNDOp,
    GatherOp,
    NonMaxSuppressionOp,
    NonZeroOp,
    OneHotOp,
    RangeOfOp,
    RangeOp,
    ScatterElementsOp,
    ScatterNDOp,
    TensorScatterOp,
    UniqueOp,
)
from loam.dialects.kernel.layout import PermuteOp, RegroupOp
from loam.dialects.kernel.library import LibraryOp, Param, param_attr, param_value
from loam.dialects.kernel.linalg import LINALG_OPS, DetOp, MatmulIntegerOp, QLinearMatmulOp
from loam.dialects.kernel.losses import LOSS_OPS, NllLossOp
from loam.dialects.kernel.movement import (
    MOVEMENT_OPS,
    AppendStateOp,
    BitCastOp,
    ConcatOp,
    DropoutOp,
    ExpandToOp,
    PadByOp,
    PadOp,
    ReshapeToOp,
    ReverseSequenceOp,
    SliceByOp,
    SliceOp,
    SplitByOp,
    SplitOp,
    TileByOp,
    TileOp,
    TriluOp,
)
from loam.dialects.kernel.narrow import NARROW_OPS, CastNarrowOp, DequantizeLinearOp, QuantizeLinearOp
from loam.dialects.kernel.normalization import (
    NORMALIZATION_OPS,
    BatchNormTrainOp,
    EinsumOp,
    GroupNormOp,
    LrnOp,
    NormalizeOp,
)
from loam.dialects.kernel.packed import (
    PACKED_OPS,
    GatherBlockQuantizedOp,
    GatherPackedOp,
    MatmulNbitsOp,
    MatmulPackedOp,
)
from loam.dialects.kernel.products import MatmulOp
from loam.dialects.kernel.program import ConstantOp, ProgramOp, ReturnOp, WeightOp
from loam.dialects.kernel.recurrent import RECURRENT_OPS, GruOp, LstmOp, RnnOp
from loam.dialects.kernel.reductions import (
    REDUCE_KINDS,
    REDUCE_OPS,
    ArgReduceOp,
    CumProdOp,
    CumSumOp,
    ReduceOp,
    SoftmaxOp,
    TopKOp,
)
from loam.dialects.kernel.signal import SIGNAL_OPS, DftOp, MelWeightMatrixOp, StftOp, WindowOp
from loam.dialects.kernel.stochastic import DISTRIBUTIONS, STOCHASTIC_OPS, RandomOp
from loam.dialects.kernel.tile import TileProgramOp

Kernel = Dialect(
    "kernel",
    [
        ProgramOp,
        ReturnOp,
        WeightOp,
        ConstantOp,
        MatmulOp,
        PermuteOp,
        ZipOp,
        CastOp,
        RegroupOp,
        *MOVEMENT_OPS,
        *ATTENTION_OPS,
        *INDEXING_OPS,
        *PACKED_OPS,
        *REDUCE_OPS,
        *NORMALIZATION_OPS,
        *LOSS_OPS,
        *LINALG_OPS,
        *NARROW_OPS,
        *CONV_OPS,
        *SIGNAL_OPS,
        *RECURRENT_OPS,
        *STOCHASTIC_OPS,
        *CONTROL_OPS,
        TileProgramOp,
    ],
    [ExprAttr, TileProgramAttr],
)
"""The `kernel` dialect."""

__all__ = [
    "ATTENTION_OPS",
    "CONTROL_OPS",
    "CONV_OPS",
    "DISTRIBUTIONS",
    "INDEXING_OPS",
    "LINALG_OPS",
    "LOSS_OPS",
    "MOVEMENT_OPS",
    "NARROW_OPS",
    "NORMALIZATION_OPS",
    "PACKED_OPS",
    "RECURRENT_OPS",
    "REDUCE_KINDS",
    "REDUCE_OPS",
    "SIGNAL_OPS",
    "STOCHASTIC_OPS",
    "AffineGridOp",
    "AppendStateOp",
    "ArgReduceOp",
    "AttentionOp",
    "BatchNormTrainOp",
    "BitCastOp",
    "CastNarrowOp",
    "CastOp",
    "Col2ImOp",
    "CompressOp",
    "ConcatOp",
    "ConstantOp",
    "ConvIntegerOp",
    "ConvOp",
    "ConvTransposeOp",
    "CumProdOp",
    "CumSumOp",
    "DeformConvOp",
    "DequantizeLinearOp",
    "DetOp",
    "DftOp",
    "DropoutOp",
    "EinsumOp",
    "ExpandToOp",
    "ExprAttr",
    "EyeLikeOp",
    "GatherBlockQuantizedOp",
    "GatherElementsOp",
    "GatherNDOp",
    "GatherOp",
    "GatherPackedOp",
    "GridSampleOp",
    "GroupNormOp",
    "GruOp",
    "IfOp",
    "Kernel",
    "LibraryOp",
    "LoopOp",
    "LrnOp",
    "LstmOp",
    "MatmulIntegerOp",
    "MatmulNbitsOp",
    "MatmulOp",
    "MatmulPackedOp",
    "MaxUnpoolOp",
    "MelWeightMatrixOp",
    "NllLossOp",
    "NonMaxSuppressionOp",
    "NonZeroOp",
    "NormalizeOp",
    "OneHotOp",
    "PadByOp",
    "PadOp",
    "Param",
    "PermuteOp",
    "PoolOp",
    "ProgramOp",
    "QLinearConvOp",
    "QLinearMatmulOp",
    "QuantizeLinearOp",
    "RandomOp",
    "RangeOfOp",
    "RangeOp",
    "ReduceOp",
    "RegroupOp",
    "ReshapeToOp",
    "ResizeOp",
    "ResizeToOp",
    "ReturnOp",
    "ReverseSequenceOp",
    "RnnOp",
    "RoiAlignOp",
    "ScatterElementsOp",
    "ScatterNDOp",
    "SliceByOp",
    "SliceOp",
    "SoftmaxOp",
    "SplitByOp",
    "SplitOp",
    "StftOp",
    "TensorScatterOp",
    "TileByOp",
    "TileOp",
    "TileProgramAttr",
    "TileProgramOp",
    "TopKOp",
    "TriluOp",
    "UniqueOp",
    "WeightOp",
    "WindowOp",
    "YieldOp",
    "ZipOp",
    "param_attr",
    "param_value",
]
