"""The build contract: the attributes a build leaves on its IR for the passes and backends after it.

`loam build` (`loam.driver.pipeline.build`) records its options and what it read of the checkpoints
as attributes of the top-level module before the first pass, and passes leave what later passes and
the backends need (the node list, the build notes, a weight kept packed, the nodes a kernel fused).
Being IR, all of it is in a dumped `.mlir` file, which `loam-opt` replays without the original files.

MLIR registers each discardable attribute with the dialect its name's prefix names, and that dialect
verifies it.  So here: every `loam.` module attribute, and each attribute passes leave on a kernel op
for the backends, is registered once as a `BuildAttribute`: its name, the xDSL attribute its value is
(`holder`), the Python value that attribute carries, a verifier between the two, and typed `get` and
`set` accessors.  The driver, passes and backends read and write each one through these accessors,
never by spelling its name.

Reading a module attribute checks the whole module: a `loam.` attribute this module does not
register, or a registered one whose verifier refuses its value, stops the build with an
UnsupportedError naming it (IR edited by hand and given to `loam-opt`, say).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from xdsl.dialects.builtin import (
    ArrayAttr,
    BoolAttr,
    DictionaryAttr,
    FloatAttr,
    IntAttr,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    StringAttr,
    UnitAttr,
    f64,
    i64,
)
from xdsl.ir import Attribute, Operation

from loam.core.errors import UnsupportedError
from loam.core.layout import LayoutRule
from loam.dialects.tensor_axes import LayoutAttr

A = TypeVar("A", bound=Attribute)
V = TypeVar("V")

PREFIX = "loam."
"""The name prefix of the build's module attributes: each one this module does not register is refused."""


@dataclass(frozen=True)
class BuildAttribute(Generic[A, V]):
    """One attribute of the build contract: `name` on the op that carries it, its value an xDSL `holder`
    carrying a Python `V`.

    `decode` is the verifier: the Python value of a well-formed attribute, None for a malformed one
    (which `expected` describes in the refusal); `encode` makes the attribute from the value.
    """

    name: str
    holder: type[A]
    decode: Callable[[A], V | None]
    encode: Callable[[V], A]
    expected: str
    """What a well-formed value is, as a refusal says it: `a dictionary of dim_param names to integers`."""
    doc: str

    def verify(self, attr: Attribute) -> V:
        """The value `attr` carries; an UnsupportedError naming the attribute when it is malformed."""
        if isinstance(attr, self.holder):
            value = self.decode(attr)
            if value is not None:
                return value
        raise UnsupportedError(f"{self.name} is {attr}, not {self.expected}")

    def get(self, op: Operation) -> V | None:
        """The value `op` carries (None when it carries none).  On a module, every `loam.` attribute
        it carries is checked first (`verify_module`)."""
        if isinstance(op, ModuleOp):
            verify_module(op)
        attr = op.attributes.get(self.name)
        return None if attr is None else self.verify(attr)

    def set(self, op: Operation, value: V) -> None:
        """Give `op` this attribute with `value` (replacing one it carries, in place)."""
        op.attributes[self.name] = self.encode(value)

    def is_on(self, op: Operation) -> bool:
        """Whether `op` carries this attribute (well-formed)."""
        return self.get(op) is not None


class Registered(Protocol):
    """A registered attribute as the module check sees it: a name and a verifier."""

    @property
    def name(self) -> str: ...

    def verify(self, attr: Attribute) -> object: ...


# -- decoders: each returns None for a malformed value ----------------------------------------------


def _strings(attr: ArrayAttr[Attribute]) -> tuple[str, ...] | None:
    out = tuple(s.data for s in attr.data if isinstance(s, StringAttr))
    return out if len(out) == len(attr.data) else None


def _string_array(values: Sequence[str]) -> ArrayAttr[StringAttr]:
    return ArrayAttr([StringAttr(v) for v in values])


def _int(attr: Attribute) -> int:
    """The integer a `#builtin.int` or an `IntegerAttr` holds (the decoders have checked which it is)."""
    if isinstance(attr, IntAttr):
        return attr.data
    assert isinstance(attr, IntegerAttr)
    return int(attr.value.data)


def _rows(attr: ArrayAttr[Attribute], kinds: Sequence[type[Attribute]]) -> list[tuple[Attribute, ...]] | None:
    """Each entry of `attr` as the tuple of its items, where every entry is an array of one item of each
    of `kinds`, in order."""
    rows: list[tuple[Attribute, ...]] = []
    for row in attr.data:
        if not isinstance(row, ArrayAttr) or len(row.data) != len(kinds):
            return None
        if not all(isinstance(item, kind) for item, kind in zip(row.data, kinds, strict=True)):
            return None
        rows.append(tuple(row.data))
    return rows


def _data(attr: Attribute) -> str:
    assert isinstance(attr, StringAttr)
    return attr.data


def _string_pairs(attr: ArrayAttr[Attribute]) -> tuple[tuple[str, str], ...] | None:
    rows = _rows(attr, (StringAttr, StringAttr))
    return None if rows is None else tuple((_data(a), _data(b)) for a, b in rows)


def _string_pairs_attr(pairs: Sequence[tuple[str, str]]) -> ArrayAttr[ArrayAttr[StringAttr]]:
    return ArrayAttr([_string_array(pair) for pair in pairs])


def _int_dictionary(attr: DictionaryAttr, kind: type[IntAttr | IntegerAttr]) -> dict[str, int] | None:
    """The entries of `attr` as integers, where each is a `kind`."""
    if not all(isinstance(v, kind) for v in attr.data.values()):
        return None
    return {k: _int(v) for k, v in attr.data.items()}


# -- the options `loam build` attaches (`attach_options`) --------------------------------------------


def _dims_attr(dims: Mapping[str, int]) -> DictionaryAttr:
    return DictionaryAttr({k: IntegerAttr(v, i64) for k, v in dims.items()})


DIMS = BuildAttribute[DictionaryAttr, dict[str, int]](
    "loam.dims",
    DictionaryAttr,
    lambda attr: _int_dictionary(attr, IntegerAttr),
    _dims_attr,
    "a dictionary of dim_param names to integers",
    "The `dims` option: each dim_param (or name inside one) the build fixes, and its extent.",
)


Value = bool | int | float | tuple[int, ...]
"""What the `values` option fixes a graph input to: a boolean, an integer, a float or a list of integers."""


def _value(attr: Attribute) -> Value | None:
    if isinstance(attr, IntegerAttr) and isinstance(attr.type, IntegerType):
        return _bool(attr) if attr.type.width.data == 1 else _int(attr)
    if isinstance(attr, FloatAttr):
        return float(attr.value.data)
    if isinstance(attr, ArrayAttr) and all(
        isinstance(a, IntegerAttr) and isinstance(a.type, IntegerType) and a.type.width.data == 64 for a in attr.data
    ):
        return tuple(_int(a) for a in attr.data)
    return None


def _values(attr: DictionaryAttr) -> dict[str, Value] | None:
    out: dict[str, Value] = {}
    for name, value in attr.data.items():
        decoded = _value(value)
        if decoded is None:
            return None
        out[name] = decoded
    return out


def _value_attr(value: Value) -> Attribute:
    if isinstance(value, bool):
        return BoolAttr.from_bool(value)
    if isinstance(value, int):
        return IntegerAttr(value, i64)
    if isinstance(value, float):
        return FloatAttr(value, f64)
    return ArrayAttr([IntegerAttr(v, i64) for v in value])


VALUES = BuildAttribute[DictionaryAttr, dict[str, Value]](
    "loam.values",
    DictionaryAttr,
    _values,
    lambda values: DictionaryAttr({name: _value_attr(v) for name, v in values.items()}),
    "a dictionary of graph input names to booleans, integers, floats or arrays of integers",
    "The `values` option: each graph input the build fixes and its value (apply-options makes it a constant).",
)


Dims = list[int | str]
"""A tensor's dims as the `interface` option declares them: an extent or a dim_param each."""


def _interface(attr: DictionaryAttr) -> dict[str, Dims] | None:
    out: dict[str, Dims] = {}
    for name, dims in attr.data.items():
        if not isinstance(dims, ArrayAttr):
            return None
        declared: Dims = []
        for d in dims.data:
            if isinstance(d, StringAttr):
                declared.append(d.data)
            elif isinstance(d, IntegerAttr):
                declared.append(_int(d))
            else:
                return None
        out[name] = declared
    return out


def _interface_attr(interface: Mapping[str, Sequence[int | str]]) -> DictionaryAttr:
    return DictionaryAttr(
        {
            name: ArrayAttr([IntegerAttr(d, i64) if isinstance(d, int) else StringAttr(d) for d in dims])
            for name, dims in interface.items()
        }
    )


INTERFACE = BuildAttribute[DictionaryAttr, dict[str, Dims]](
    "loam.interface",
    DictionaryAttr,
    _interface,
    _interface_attr,
    "a dictionary of graph input and output names to arrays of extents and dim_params",
    "The `interface` option: graph inputs and outputs re-declared with these dims (apply-options).",
)

OUTPUTS = BuildAttribute[ArrayAttr[Attribute], tuple[str, ...]](
    "loam.outputs",
    ArrayAttr,
    _strings,
    _string_array,
    "an array of graph output names",
    "The `outputs` option: the graph outputs `forward` returns (apply-options cuts the graph to them).",
)

LAYOUT = BuildAttribute[LayoutAttr, tuple[LayoutRule, ...]](
    "loam.layout",
    LayoutAttr,
    lambda attr: attr.rules,
    LayoutAttr,
    "a #tensor_axes.layout",
    "The layout rules: the options' `[[layout]]` entries, then what `draft-layout` drafts (name-axes reads them).",
)


def _bool(attr: IntegerAttr) -> bool | None:
    return bool(attr.value.data) if isinstance(attr.type, IntegerType) and attr.type.width.data == 1 else None


INLINE_WEIGHTS = BuildAttribute[IntegerAttr, bool](
    "loam.inline_weights",
    IntegerAttr,
    _bool,
    BoolAttr.from_bool,
    "a bool (`true`)",
    "The `inline_weights` option: the module carries every weight the graph reads.",
)

INT8_ACTIVATIONS = BuildAttribute[IntegerAttr, bool](
    "loam.int8_activations",
    IntegerAttr,
    _bool,
    BoolAttr.from_bool,
    "a bool (`true` or `false`)",
    "The `int8_activations` option, where given: packed products round their activations to int8 per block "
    "and multiply integers (true) or multiply in float32 (false); absent, each MatMulNBits does as its "
    "accuracy_level asks.",
)

# -- what `loam build` read of the checkpoints and the model -----------------------------------------

CHECKPOINT_NAMES = BuildAttribute[ArrayAttr[Attribute], tuple[tuple[str, str], ...]](
    "loam.checkpoint_names",
    ArrayAttr,
    _string_pairs,
    _string_pairs_attr,
    "an array of [pattern, template] pairs of strings",
    "The `[checkpoint_names]` rules (the options' first, then the architecture's): the module renames "
    "checkpoint tensors by them at load.",
)


def _row_orders(attr: ArrayAttr[Attribute]) -> tuple[tuple[str, int], ...] | None:
    rows = _rows(attr, (StringAttr, IntAttr))
    return None if rows is None else tuple((_data(name), _int(heads)) for name, heads in rows)


ROW_ORDERS = BuildAttribute[ArrayAttr[Attribute], tuple[tuple[str, int], ...]](
    "loam.row_orders",
    ArrayAttr,
    _row_orders,
    lambda orders: ArrayAttr([ArrayAttr([StringAttr(name), IntAttr(heads)]) for name, heads in orders]),
    "an array of [tensor name, head count] pairs",
    "[checkpoint tensor, head count] for each GGUF tensor whose rows llama.cpp interleaved for its rotary "
    "embedding: the module un-interleaves them at load.",
)

READABLE_FORMATS = ("safetensors", "gguf")
"""Every checkpoint format a module can read."""


def _formats(attr: ArrayAttr[Attribute]) -> tuple[str, ...] | None:
    formats = _strings(attr)
    return formats if formats and all(f in READABLE_FORMATS for f in formats) else None


CHECKPOINT_FORMATS = BuildAttribute[ArrayAttr[Attribute], tuple[str, ...]](
    "loam.checkpoint_formats",
    ArrayAttr,
    _formats,
    _string_array,
    f"a list of {', '.join(READABLE_FORMATS)}",
    "The formats of the checkpoints the build checked, which the module's `Weights.load` reads (absent: every format).",
)

WEIGHTS_BESIDE = BuildAttribute[IntAttr, int](
    "loam.weights_beside",
    IntAttr,
    lambda attr: attr.data if attr.data >= 0 else None,
    IntAttr,
    "a non-negative #builtin.int",
    "The carried weights' total bytes past which the module keeps them in a safetensors file beside itself "
    "instead of a bytes literal in its source (absent: always the literal).",
)


def _stored_encodings(attr: DictionaryAttr) -> dict[str, tuple[str, str]] | None:
    out: dict[str, tuple[str, str]] = {}
    for name, value in attr.data.items():
        pair = _string_pairs(ArrayAttr([value]))
        if pair is None:
            return None
        out[name] = pair[0]
    return out


STORED_ENCODINGS = BuildAttribute[DictionaryAttr, dict[str, tuple[str, str]]](
    "loam.stored_encodings",
    DictionaryAttr,
    _stored_encodings,
    lambda stored: DictionaryAttr({name: _string_array(pair) for name, pair in sorted(stored.items())}),
    "a dictionary of weight names to [encoding, checkpoint path] pairs",
    "Each weight a checkpoint stores in ggml blocks: its encoding and the checkpoint (pack-quantized marks "
    "those weights `stored` and keeps them packed).",
)

DEVICE_LIMITS = BuildAttribute[DictionaryAttr, dict[str, int]](
    "loam.device_limits",
    DictionaryAttr,
    lambda attr: _int_dictionary(attr, IntAttr),
    lambda limits: DictionaryAttr({k: IntAttr(v) for k, v in limits.items()}),
    "a dictionary of WebGPU limit names to integers",
    "The limits above WebGPU's defaults the WGSL module is built within, in WebGPU's names (absent: the defaults).",
)

ExternalRow = tuple[str, str, int, int, str, tuple[int, ...]]
"""(ONNX name, location relative to the model, byte offset, byte length, safetensors dtype, shape)."""


def _external(attr: ArrayAttr[Attribute]) -> tuple[ExternalRow, ...] | None:
    rows = _rows(attr, (StringAttr, StringAttr, IntAttr, IntAttr, StringAttr, ArrayAttr))
    if rows is None:
        return None
    out: list[ExternalRow] = []
    for name, location, offset, length, encoding, shape in rows:
        assert isinstance(shape, ArrayAttr)
        if not all(isinstance(d, IntAttr) for d in shape.data):
            return None
        dims = tuple(_int(d) for d in shape.data)
        out.append((_data(name), _data(location), _int(offset), _int(length), _data(encoding), dims))
    return tuple(out)


def _external_attr(rows: Sequence[ExternalRow]) -> ArrayAttr[ArrayAttr[Attribute]]:
    return ArrayAttr(
        [
            ArrayAttr(
                [
                    StringAttr(name),
                    StringAttr(location),
                    IntAttr(offset),
                    IntAttr(length),
                    StringAttr(encoding),
                    ArrayAttr([IntAttr(d) for d in shape]),
                ]
            )
            for name, location, offset, length, encoding, shape in rows
        ]
    )


EXTERNAL_DATA = BuildAttribute[ArrayAttr[Attribute], tuple[ExternalRow, ...]](
    "loam.external_data",
    ArrayAttr,
    _external,
    _external_attr,
    "an array of [name, location, offset, length, dtype, shape] rows",
    "One row per initializer whose bytes are ONNX external data in a file of their own (absent: none); the "
    "module reads each tensor there at load.",
)

# -- what passes leave on the module --------------------------------------------------------------


_FLAGS: Mapping[bool, BoolAttr] = {False: BoolAttr.from_bool(False), True: BoolAttr.from_bool(True)}
"""The two flags, made once: making an IntegerAttr checks its value, a cost per node of a large graph."""


def _nodes(attr: ArrayAttr[Attribute]) -> tuple[tuple[str, str, bool], ...] | None:
    rows = _rows(attr, (StringAttr, StringAttr, IntegerAttr))
    if rows is None:
        return None
    out: list[tuple[str, str, bool]] = []
    for name, op_type, folded in rows:
        assert isinstance(folded, IntegerAttr)
        flag = _bool(folded)
        if flag is None:
            return None
        out.append((_data(name), _data(op_type), flag))
    return tuple(out)


NODES = BuildAttribute[ArrayAttr[Attribute], tuple[tuple[str, str, bool], ...]](
    "loam.nodes",
    ArrayAttr,
    _nodes,
    lambda nodes: ArrayAttr([ArrayAttr([StringAttr(n), StringAttr(t), _FLAGS[f]]) for n, t, f in nodes]),
    "an array of [name, op type, folded] rows",
    "Every ONNX node as [name, op type, folded], in graph order (stage 0 leaves it), so the fuse pass reports "
    "the nodes stage 0 folded away after the graph itself is gone.",
)

NOTES = BuildAttribute[ArrayAttr[Attribute], tuple[str, ...]](
    "loam.notes",
    ArrayAttr,
    _strings,
    _string_array,
    "an array of strings",
    "The build's notes that passes leave, in order; `loam build` prints each one.",
)

# -- what passes leave on kernel ops ------------------------------------------------------------------

PACKED = BuildAttribute[UnitAttr, bool](
    "packed",
    UnitAttr,
    lambda _attr: True,
    lambda _value: UnitAttr(),
    "a unit attribute",
    "On a `kernel.weight`: `Weights` keeps it in the ggml blocks the checkpoint stores (pack-quantized).",
)

STORED = BuildAttribute[StringAttr, str](
    "stored",
    StringAttr,
    lambda attr: attr.data,
    StringAttr,
    "a string naming an encoding",
    "On a `kernel.weight`: the encoding the checkpoint stores it in (pack-quantized sets it from "
    "`loam.stored_encodings`).",
)

FUSED = BuildAttribute[ArrayAttr[Attribute], tuple[str, ...]](
    "fused",
    ArrayAttr,
    _strings,
    _string_array,
    "an array of ONNX node names",
    "On a kernel the fuse pass composed: the ONNX nodes it computes, for the report.",
)

GRAD_PREFIX = "grad."
"""The prefix of the program's gradient inputs and outputs: `differentiate` adds the gradient of weight `W`
as output `grad.W`, from upstream gradients `grad.O` given as inputs after the model's own."""

MODULE_ATTRIBUTES: Mapping[str, Registered] = {
    a.name: a
    for a in (
        DIMS,
        VALUES,
        INTERFACE,
        OUTPUTS,
        LAYOUT,
        INLINE_WEIGHTS,
        INT8_ACTIVATIONS,
        CHECKPOINT_NAMES,
        ROW_ORDERS,
        CHECKPOINT_FORMATS,
        WEIGHTS_BESIDE,
        STORED_ENCODINGS,
        DEVICE_LIMITS,
        EXTERNAL_DATA,
        NODES,
        NOTES,
    )
}
"""Every module attribute of the contract, by name."""

OP_ATTRIBUTES: Mapping[str, Registered] = {a.name: a for a in (PACKED, STORED, FUSED)}
"""The attributes passes leave on kernel ops, by name."""


_VERIFIED: weakref.WeakValueDictionary[str, Attribute] = weakref.WeakValueDictionary()
"""The module attribute each name last passed its verifier with.  Attributes are immutable, so the same
object needs no second check: every read of a module attribute checks the whole module, and decoding
the node list again at each pass's reads made a large graph's build spend seconds here."""


def verify_module(module: ModuleOp) -> None:
    """Refuse a `loam.` attribute of `module` the contract does not register, or a registered one its
    verifier refuses, naming it (UnsupportedError)."""
    for name, attr in module.attributes.items():
        if not name.startswith(PREFIX) or _VERIFIED.get(name) is attr:
            continue
        registered = MODULE_ATTRIBUTES.get(name)
        if registered is None:
            raise UnsupportedError(
                f"module attribute {name} is not one the build contract registers "
                f"({', '.join(sorted(MODULE_ATTRIBUTES))})"
            )
        registered.verify(attr)
        _VERIFIED[name] = attr
