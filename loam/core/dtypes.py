"""ONNX element types: one table mapping ONNX's enum to Loam's short IR name and a numpy dtype.

Every layer (readers, dialects, stage 0, backends, checkpoint checks) looks element types up here,
so a type is spelled the same way everywhere.  Short names follow MLIR where MLIR has one.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np
from numpy.typing import DTypeLike
from onnx import TensorProto


@dataclass(frozen=True)
class ElementType:
    """One ONNX element type."""

    onnx: int  # TensorProto.DataType value
    name: str  # Loam's IR spelling, e.g. "f32"
    numpy: np.dtype | None  # storage dtype; None where numpy has no exact one (string: object)
    bits: int  # storage bits per element (0 for string)

    @property
    def from_ml_dtypes(self) -> bool:
        """Whether numpy holds it through ml_dtypes (bfloat16, float8, float4, 4- and 2-bit integers):
        a module holding one imports ml_dtypes."""
        return self.numpy is not None and self.numpy.type.__module__ != "numpy"

    @property
    def is_float(self) -> bool:
        return self.name.startswith(("f", "bf")) or self.name.startswith("c")


def _dt(x: DTypeLike) -> np.dtype:
    return np.dtype(x)


_TABLE: tuple[ElementType, ...] = (
    ElementType(TensorProto.UNDEFINED, "undefined", None, 0),
    ElementType(TensorProto.FLOAT, "f32", _dt(np.float32), 32),
    ElementType(TensorProto.UINT8, "ui8", _dt(np.uint8), 8),
    ElementType(TensorProto.INT8, "i8", _dt(np.int8), 8),
    ElementType(TensorProto.UINT16, "ui16", _dt(np.uint16), 16),
    ElementType(TensorProto.INT16, "i16", _dt(np.int16), 16),
    ElementType(TensorProto.INT32, "i32", _dt(np.int32), 32),
    ElementType(TensorProto.INT64, "i64", _dt(np.int64), 64),
    ElementType(TensorProto.STRING, "string", _dt(object), 0),
    ElementType(TensorProto.BOOL, "bool", _dt(np.bool_), 8),
    ElementType(TensorProto.FLOAT16, "f16", _dt(np.float16), 16),
    ElementType(TensorProto.DOUBLE, "f64", _dt(np.float64), 64),
    ElementType(TensorProto.UINT32, "ui32", _dt(np.uint32), 32),
    ElementType(TensorProto.UINT64, "ui64", _dt(np.uint64), 64),
    ElementType(TensorProto.COMPLEX64, "c64", _dt(np.complex64), 64),
    ElementType(TensorProto.COMPLEX128, "c128", _dt(np.complex128), 128),
    ElementType(TensorProto.BFLOAT16, "bf16", _dt(ml_dtypes.bfloat16), 16),
    ElementType(TensorProto.FLOAT8E4M3FN, "f8E4M3FN", _dt(ml_dtypes.float8_e4m3fn), 8),
    ElementType(TensorProto.FLOAT8E4M3FNUZ, "f8E4M3FNUZ", _dt(ml_dtypes.float8_e4m3fnuz), 8),
    ElementType(TensorProto.FLOAT8E5M2, "f8E5M2", _dt(ml_dtypes.float8_e5m2), 8),
    ElementType(TensorProto.FLOAT8E5M2FNUZ, "f8E5M2FNUZ", _dt(ml_dtypes.float8_e5m2fnuz), 8),
    ElementType(TensorProto.UINT4, "ui4", _dt(ml_dtypes.uint4), 4),
    ElementType(TensorProto.INT4, "i4", _dt(ml_dtypes.int4), 4),
    ElementType(TensorProto.FLOAT4E2M1, "f4E2M1", _dt(ml_dtypes.float4_e2m1fn), 4),
    ElementType(TensorProto.FLOAT8E8M0, "f8E8M0FNU", _dt(ml_dtypes.float8_e8m0fnu), 8),
    ElementType(TensorProto.UINT2, "ui2", _dt(ml_dtypes.uint2), 2),
    ElementType(TensorProto.INT2, "i2", _dt(ml_dtypes.int2), 2),
    ElementType(TensorProto.FLOAT6E2M3, "f6E2M3", None, 6),
    ElementType(TensorProto.FLOAT6E3M2, "f6E3M2", None, 6),
)

BY_ONNX: dict[int, ElementType] = {e.onnx: e for e in _TABLE}
BY_NAME: dict[str, ElementType] = {e.name: e for e in _TABLE}

# safetensors dtype strings (header "dtype") for the element types a checkpoint may hold.
SAFETENSORS_NAMES: dict[str, str] = {
    "F64": "f64",
    "F32": "f32",
    "F16": "f16",
    "BF16": "bf16",
    "I64": "i64",
    "I32": "i32",
    "I16": "i16",
    "I8": "i8",
    "U64": "ui64",
    "U32": "ui32",
    "U16": "ui16",
    "U8": "ui8",
    "BOOL": "bool",
    "F8_E4M3": "f8E4M3FN",
    "F8_E5M2": "f8E5M2",
}


def by_onnx(code: int) -> ElementType:
    """The element type of ONNX enum value `code`; KeyError names it when ONNX defines no such type."""
    try:
        return BY_ONNX[code]
    except KeyError:
        raise KeyError(f"unknown ONNX element type {code}") from None


def by_name(name: str) -> ElementType:
    """The element type Loam spells `name` in IR (`f32`, `i64`, `bf16`, ...)."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown element type '{name}'") from None
