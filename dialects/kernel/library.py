"""Library kernels: one op per computation a backend implements as one library function.

`LibraryOp` is their base.  Its parameters are plain attributes (`param_attr` writes a Python value
as one, `param_value` reads it back) checked against the op's `PARAMS`, so the numpy backend can call
`kernel_NAME(operands..., PARAM=VALUE, ...)`.  Each family is a module of its own (`movement`,
`indexing`, `packed`, `reductions`, `normalization`, `convolution`) listing its ops in a tuple the
dialect collects; the helpers here (`library_types`, `require`, `kernel_rank`, `check_axes`) are what
their verifiers share.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from xdsl.dialects.builtin import ArrayAttr, DenseArrayBase, FloatAttr, IntegerAttr, StringAttr, f64, i64
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import ParsePropInAttrDict, traits_def, var_operand_def, var_result_def
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from loam.core.poly import Poly
from loam.dialects.kernel.base import KernelOp, extents_of, node_prop
from loam.dialects.shape_poly import ExtentAttr

Param = int | float | str | Poly | tuple[int | Poly, ...] | tuple[float, ...]
"""A library kernel's parameter value: a number, a word, an extent only the run knows (a `Poly` over
the symbols forward binds, such as a Slice start `min(N, 8)`), or a list of numbers or extents."""


def param_attr(value: Param) -> Attribute:
    """`value` as the attribute that carries it (`1 : i64`, `5.0e-01 : f64`, `"max"`, `array<i64: 1, 2>`).

    A symbolic extent is `#shape_poly.extent<N - 1>`; a list holding one is an array of extents
    (`[#shape_poly.extent<0>, #shape_poly.extent<min(8, N)>]`), constants included, so one list
    keeps one kind.
    """
    if isinstance(value, bool):
        return IntegerAttr(int(value), i64)
    if isinstance(value, int):
        return IntegerAttr(value, i64)
    if isinstance(value, Poly):
        return IntegerAttr(value.const_value, i64) if value.is_const else ExtentAttr(value)
    if isinstance(value, float):
        return FloatAttr(value, f64)
    if isinstance(value, str):
        return StringAttr(value)
    items = list(value)
    if any(isinstance(v, Poly) and not v.is_const for v in items):
        return ArrayAttr([ExtentAttr(Poly.lift(v)) for v in items])  # type: ignore[arg-type]  # Param mixes no float with an extent
    numbers = [v.const_value if isinstance(v, Poly) else v for v in items]
    if all(isinstance(v, int) and not isinstance(v, bool) for v in numbers):
        return DenseArrayBase.from_list(i64, [int(v) for v in numbers])
    return DenseArrayBase.from_list(f64, [float(v) for v in numbers])


def _extent_value(p: Poly) -> int | Poly:
    return p.const_value if p.is_const else p


def param_value(attr: Attribute) -> Param:
    """The Python value `attr` carries (the inverse of `param_attr`): an int for a constant extent,
    a `Poly` for a symbolic one."""
    if isinstance(attr, IntegerAttr):
        return int(attr.value.data)
    if isinstance(attr, FloatAttr):
        return float(attr.value.data)
    if isinstance(attr, StringAttr):
        return attr.data
    if isinstance(attr, ExtentAttr):
        return _extent_value(attr.data)
    if isinstance(attr, DenseArrayBase):
        values = attr.get_values()
        return tuple(int(v) for v in values) if attr.elt_type == i64 else tuple(float(v) for v in values)
    if isinstance(attr, ArrayAttr) and all(isinstance(a, ExtentAttr) for a in attr.data):
        return tuple(_extent_value(a.data) for a in attr.data)
    raise VerifyException(f"{attr} is not a kernel parameter (a number, a string, an extent or an array)")


def _param_kind_ok(value: Param, kind: type) -> bool:
    """Whether `value` is of the PARAMS kind `kind` (an extent only the run knows counts as an int)."""
    if kind is float and isinstance(value, int):
        return True
    if kind is int and isinstance(value, Poly):
        return True
    return isinstance(value, kind)


class LibraryOp(KernelOp):
    """Base of the kernels a backend computes with one library function each.

    Syntax: `kernel.NAME(%a, ...) {node = "NODE", PARAM = VALUE, ...} : (A, ...) -> (R, ...)`

    `PARAMS` maps each parameter the kernel reads to its Python type (`int`, `float`, `str`,
    `tuple`); `OPTIONAL` lists those that may be absent.  An `int` parameter, or an item of a
    `tuple` one, may be an extent only the run knows (a `Poly`, carried as `#shape_poly.extent`).
    The parameters are plain attributes, so the generic and the custom form print them alike, and
    the numpy backend calls `kernel_NAME(operands..., PARAM=VALUE, ...)` (see
    `loam/runtime/kernels/`), computing a symbolic parameter from the bound symbols.
    """

    PARAMS: ClassVar[dict[str, type]] = {}
    OPTIONAL: ClassVar[frozenset[str]] = frozenset()
    # Whether a pass may leave the ONNX nodes the kernel computes on it (`fused`, for the build report).
    FUSES: ClassVar[bool] = False

    inputs = var_operand_def()
    outputs = var_result_def()
    node = node_prop()

    traits = traits_def(Pure())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "`(` $inputs `)` attr-dict `:` functional-type($inputs, $outputs)"

    def __init__(
        self,
        inputs: Sequence[SSAValue | Operation],
        result_types: Sequence[Attribute],
        node: str,
        **params: Param,
    ) -> None:
        super().__init__(
            operands=[inputs],
            result_types=[list(result_types)],
            properties={"node": StringAttr(node)},
            attributes={k: param_attr(v) for k, v in params.items()},
        )

    @property
    def kernel_name(self) -> str:
        """The op's name without the dialect prefix (`conv` for `kernel.conv`)."""
        return self.name.split(".", 1)[1]

    @property
    def params(self) -> dict[str, Param]:
        """The parameters as Python values, in `PARAMS` order."""
        return {k: param_value(self.attributes[k]) for k in self.PARAMS if k in self.attributes}

    def param(self, key: str) -> Any:
        return param_value(self.attributes[key])

    def verify_(self) -> None:
        where = f"{self.name} '{self.node.data}'"
        for key in self.attributes:
            if key not in self.PARAMS and not (self.FUSES and key == "fused"):
                raise VerifyException(f"{where}: unknown parameter '{key}'")
        for key, kind in self.PARAMS.items():
            if key not in self.attributes:
                if key in self.OPTIONAL:
                    continue
                raise VerifyException(f"{where}: missing parameter '{key}'")
            value = param_value(self.attributes[key])
            if not _param_kind_ok(value, kind):
                raise VerifyException(f"{where}: parameter '{key}' must be {kind.__name__}, got {value!r}")
        self.verify_kernel()

    def verify_kernel(self) -> None:
        """Kernel-specific checks of operand and result types; override where there are any."""


def library_types(op: LibraryOp) -> tuple[list[tuple[Any, ...] | None], list[tuple[Any, ...] | None]]:
    """The extents of a library op's operands and results (None for a type without axes)."""
    return [extents_of(v.type) for v in op.inputs], [extents_of(v.type) for v in op.outputs]


def require(op: LibraryOp, ok: bool, message: str) -> None:
    if not ok:
        raise VerifyException(f"{op.name} '{op.node.data}': {message}")


def kernel_rank(op: LibraryOp, value: SSAValue) -> int | None:
    ext = extents_of(value.type)
    return None if ext is None else len(ext)


def check_axes(op: LibraryOp, axes: Sequence[int], rank: int | None) -> None:
    where = f"{op.name} '{op.node.data}'"
    if len(set(axes)) != len(axes):
        raise VerifyException(f"{where}: axes {list(axes)} repeat an axis")
    if rank is not None and any(not 0 <= a < rank for a in axes):
        raise VerifyException(f"{where}: axes {list(axes)} are not all in [0, {rank})")
