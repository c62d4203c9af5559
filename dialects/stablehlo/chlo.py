"""The `chlo` ops JAX 0.10 prints among StableHLO ops ("client HLO": ops XLA expands later).

`jax.scipy.special.erf`, `jnp.sinh`, `jnp.arctan`, ... print as `chlo.erf %x : tensor<4xf32> ->
tensor<4xf32>`; the ones here are elementwise on one operand and each has an ONNX op of the same
meaning.  Any other `chlo.*` op (`chlo.erf_inv`, `chlo.erfc`, `chlo.lgamma`, ...) is unknown to the
parser, so the reader refuses it by name and place.
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.ir import Dialect
from xdsl.irdl import irdl_op_definition

from loam.dialects.stablehlo.elementwise import ElementwiseOp


class ChloUnaryOp(ElementwiseOp):
    """A `chlo` op on one operand, elementwise.  Syntax: `chlo.OP %x : tensor<4xf32> -> tensor<4xf32>`"""

    ARITY: ClassVar[int] = 1
    assembly_format = "custom<OperandList>($args) attr-dict `:` custom<OperandTypes>(type($args)) `->` type($result)"


@irdl_op_definition
class ErfOp(ChloUnaryOp):
    """Elementwise error function.  Syntax: `chlo.erf %x : tensor<4xf32> -> tensor<4xf32>`"""

    name = "chlo.erf"


@irdl_op_definition
class SinhOp(ChloUnaryOp):
    """Elementwise hyperbolic sine.  Syntax: `chlo.sinh %x : tensor<4xf32> -> tensor<4xf32>`"""

    name = "chlo.sinh"


@irdl_op_definition
class CoshOp(ChloUnaryOp):
    """Elementwise hyperbolic cosine.  Syntax: `chlo.cosh %x : tensor<4xf32> -> tensor<4xf32>`"""

    name = "chlo.cosh"


@irdl_op_definition
class AsinOp(ChloUnaryOp):
    """Elementwise arcsine.  Syntax: `chlo.asin %x : tensor<4xf32> -> tensor<4xf32>`"""

    name = "chlo.asin"


@irdl_op_definition
class AcosOp(ChloUnaryOp):
    """Elementwise arccosine.  Syntax: `chlo.acos %x : tensor<4xf32> -> tensor<4xf32>`"""

    name = "chlo.acos"


@irdl_op_definition
class AtanOp(ChloUnaryOp):
    """Elementwise arctangent.  Syntax: `chlo.atan %x : tensor<4xf32> -> tensor<4xf32>`"""

    name = "chlo.atan"


@irdl_op_definition
class SquareOp(ChloUnaryOp):
    """Elementwise x * x.  Syntax: `chlo.square %x : tensor<4xf32> -> tensor<4xf32>`"""

    name = "chlo.square"


CHLO = Dialect("chlo", [ErfOp, SinhOp, CoshOp, AsinOp, AcosOp, AtanOp, SquareOp], [])
"""The `chlo` ops Loam reads."""
