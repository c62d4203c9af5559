"""The StableHLO ops that slide a window over their operand: `convolution` (its pretty syntax with
`dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], window = {...}`, parsed by hand),
`reduce_window` and `select_and_scatter` (JAX prints these two in the generic form only).
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    ArrayAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    IntegerAttr,
    StringAttr,
    TensorType,
    i1,
    i64,
)
from xdsl.ir import Attribute, ParametrizedAttribute
from xdsl.irdl import (
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from loam.dialects.stablehlo.attributes import PrecisionAttr
from loam.dialects.stablehlo.base import compatible, i64_array, ints, parse_int_list, print_attrs, ranked


@irdl_attr_definition
class ConvDimensionNumbersAttr(ParametrizedAttribute):
    """
    Which dims of a `stablehlo.convolution`'s input, kernel and output are the batch (`b`), the
    features (`f`; the kernel's `i` and `o`) and the spatial dims (`0`, `1`, ...).

    Syntax: `#stablehlo.conv<[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]>` (the same text follows
    `dim_numbers =` in the op's pretty form).  Each layout is kept as its words: "b", "f", "0", ...
    """

    name = "stablehlo.conv"

    lhs: ArrayAttr[StringAttr]
    rhs: ArrayAttr[StringAttr]
    out: ArrayAttr[StringAttr]

    @staticmethod
    def parse_layouts(parser: AttrParser) -> tuple[ArrayAttr[StringAttr], ...]:
        def word() -> StringAttr:
            number = parser.parse_optional_integer(allow_boolean=False, allow_negative=False)
            return StringAttr(str(number) if number is not None else parser.parse_identifier())

        def layout() -> ArrayAttr[StringAttr]:
            return ArrayAttr(parser.parse_comma_separated_list(parser.Delimiter.SQUARE, word))

        lhs = layout()
        parser.parse_keyword("x")
        rhs = layout()
        parser.parse_punctuation("->")
        return lhs, rhs, layout()

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            return cls.parse_layouts(parser)

    def text(self) -> str:
        lhs, rhs, out = (f"[{', '.join(w.data for w in side.data)}]" for side in (self.lhs, self.rhs, self.out))
        return f"{lhs}x{rhs}->{out}"

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.text()}>")

    def layout(self, side: str) -> tuple[str, ...]:
        return tuple(w.data for w in getattr(self, side).data)

    def positions(self, side: str, batch: str, feature: str) -> tuple[int, int, list[int]]:
        """(the batch dim, the feature dim, the spatial dims in order) of `side` ("lhs", "rhs", "out")."""
        words = self.layout(side)
        spatial = sorted((int(w), d) for d, w in enumerate(words) if w.isdigit())
        return words.index(batch), words.index(feature), [d for _, d in spatial]


_WINDOW_KEYS = {"stride": "window_strides", "lhs_dilate": "lhs_dilation", "rhs_dilate": "rhs_dilation"}


@irdl_op_definition
class ConvolutionOp(IRDLOperation):
    """
    A convolution (`lax.conv_general_dilated`, flax's `Conv`).

    Syntax: `stablehlo.convolution(%x, %w) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f],
    window = {stride = [1, 1], pad = [[1, 1], [1, 1]], lhs_dilate = [1, 1], rhs_dilate = [1, 1],
    reverse = [false, false]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64,
    precision_config = [...]} : (tensor<...>, tensor<...>) -> tensor<...>` (parsed by hand), or
    the generic form with `dimension_numbers = #stablehlo.conv<...>`.
    """

    name = "stablehlo.convolution"

    lhs = operand_def()
    rhs = operand_def()
    result = result_def()
    window_strides = opt_prop_def(DenseArrayBase)
    padding = opt_prop_def(DenseIntOrFPElementsAttr)
    lhs_dilation = opt_prop_def(DenseArrayBase)
    rhs_dilation = opt_prop_def(DenseArrayBase)
    window_reversal = opt_prop_def(DenseArrayBase)
    dimension_numbers = prop_def(ConvDimensionNumbersAttr)
    feature_group_count = prop_def(IntegerAttr)
    batch_group_count = prop_def(IntegerAttr)
    precision_config = opt_prop_def(ArrayAttr)

    @property
    def spatial_rank(self) -> int:
        return len(self.dimension_numbers.lhs.data) - 2

    def padding_pairs(self) -> list[tuple[int, int]]:
        """(low, high) padding of each spatial dim (0s when absent)."""
        n = self.spatial_rank
        if self.padding is None:
            return [(0, 0)] * n
        values = [int(v) for v in self.padding.get_values()]
        if len(values) == 1:
            values = values * (2 * n)
        return [(values[2 * k], values[2 * k + 1]) for k in range(n)]

    def window(self, name: str) -> tuple[int, ...]:
        """window_strides, lhs_dilation or rhs_dilation: 1s when absent."""
        return ints(getattr(self, name)) or (1,) * self.spatial_rank

    def reversed_dims(self) -> tuple[bool, ...]:
        return tuple(bool(v) for v in ints(self.window_reversal)) or (False,) * self.spatial_rank

    @classmethod
    def parse(cls, parser: Parser) -> ConvolutionOp:
        with parser.in_parens():
            x = parser.parse_unresolved_operand()
            parser.parse_punctuation(",")
            w = parser.parse_unresolved_operand()
        properties: dict[str, Attribute] = {}
        parser.parse_keyword("dim_numbers")
        parser.parse_punctuation("=")
        properties["dimension_numbers"] = ConvDimensionNumbersAttr(*ConvDimensionNumbersAttr.parse_layouts(parser))
        if parser.parse_optional_punctuation(","):
            parser.parse_keyword("window")
            parser.parse_punctuation("=")

            def entry() -> None:
                key = parser.parse_identifier()
                parser.parse_punctuation("=")
                if key in _WINDOW_KEYS:
                    properties[_WINDOW_KEYS[key]] = i64_array(parse_int_list(parser))
                elif key == "pad":
                    pairs = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, lambda: parse_int_list(parser))
                    flat = [v for pair in pairs for v in pair]
                    properties["padding"] = DenseIntOrFPElementsAttr.from_list(TensorType(i64, [len(pairs), 2]), flat)
                elif key == "reverse":
                    flags = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, parser.parse_boolean)
                    properties["window_reversal"] = DenseArrayBase.from_list(i1, [int(f) for f in flags])
                else:
                    parser.raise_error(f"stablehlo.convolution: unexpected window key '{key}'")

            parser.parse_comma_separated_list(parser.Delimiter.BRACES, entry)
        attributes = dict(parser.parse_optional_attr_dict())
        for key in ("batch_group_count", "feature_group_count", "precision_config"):
            if key in attributes:
                properties[key] = attributes.pop(key)
        parser.parse_punctuation(":")
        position = parser.pos
        function = parser.parse_function_type()
        values = parser.resolve_operands([x, w], list(function.inputs.data), position)
        return cls.create(
            operands=values,
            result_types=list(function.outputs.data),
            properties=properties,
            attributes=attributes,
        )

    def print(self, printer: Printer) -> None:
        printer.print_string("(")
        printer.print_operand(self.lhs)
        printer.print_string(", ")
        printer.print_operand(self.rhs)
        printer.print_string(f") dim_numbers = {self.dimension_numbers.text()}, window = {{")
        parts = [f"stride = {list(self.window('window_strides'))}"]
        parts.append("pad = [" + ", ".join(f"[{lo}, {hi}]" for lo, hi in self.padding_pairs()) + "]")
        parts.append(f"lhs_dilate = {list(self.window('lhs_dilation'))}")
        parts.append(f"rhs_dilate = {list(self.window('rhs_dilation'))}")
        parts.append("reverse = [" + ", ".join("true" if r else "false" for r in self.reversed_dims()) + "]")
        printer.print_string(", ".join(parts) + "} {")
        printer.print_string(f"batch_group_count = {self.batch_group_count.value.data} : i64, ")
        printer.print_string(f"feature_group_count = {self.feature_group_count.value.data} : i64")
        if isinstance(self.precision_config, ArrayAttr):
            names = [p.text for p in self.precision_config.data if isinstance(p, PrecisionAttr)]
            spelled = ", ".join(f"#stablehlo<precision {n}>" for n in names)
            printer.print_string(f", precision_config = [{spelled}]")
        printer.print_string("}")
        print_attrs(printer, self)
        printer.print_string(" : ")
        printer.print_function_type(self.operand_types, self.result_types)

    def verify_(self) -> None:
        lhs, rhs = ranked(self.lhs, "stablehlo.convolution lhs"), ranked(self.rhs, "stablehlo.convolution rhs")
        out = ranked(self.result, "stablehlo.convolution result")
        numbers = self.dimension_numbers
        n = len(lhs.get_shape())
        for side, words, t, ids in (
            ("lhs", numbers.layout("lhs"), lhs, ("b", "f")),
            ("rhs", numbers.layout("rhs"), rhs, ("o", "i")),
            ("result", numbers.layout("out"), out, ("b", "f")),
        ):
            want = {*ids, *(str(k) for k in range(n - 2))}
            if len(words) != len(t.get_shape()) or set(words) != want or len(set(words)) != len(words):
                raise VerifyException(f"stablehlo.convolution: the {side} layout {list(words)} does not fit {t}")
        for name in ("window_strides", "lhs_dilation", "rhs_dilation"):
            if len(self.window(name)) != n - 2:
                raise VerifyException(f"stablehlo.convolution: {name} needs {n - 2} values")
        if len(self.padding_pairs()) != n - 2:
            raise VerifyException(f"stablehlo.convolution: padding needs {n - 2} pairs")


@irdl_op_definition
class ReduceWindowOp(IRDLOperation):
    """
    A reduction over each window of its operand (`lax.reduce_window`: max and sum pooling), its
    body the combining op, as in `stablehlo.reduce`.

    Syntax (JAX prints the generic form only): `"stablehlo.reduce_window"(%x, %init)
    <{window_dimensions = array<i64: 1, 2, 2, 1>, window_strides = array<i64: 1, 2, 2, 1>,
    padding = dense<0> : tensor<4x2xi64>, base_dilations = ..., window_dilations = ...}> ({ ^bb0(%a:
    tensor<f32>, %b: tensor<f32>): ... stablehlo.return %r : tensor<f32> }) : (...) -> ...`
    """

    name = "stablehlo.reduce_window"

    operands_ = var_operand_def()  # the inputs, then as many init values
    outs = var_result_def()
    window_dimensions = prop_def(DenseArrayBase)
    window_strides = opt_prop_def(DenseArrayBase)
    base_dilations = opt_prop_def(DenseArrayBase)
    window_dilations = opt_prop_def(DenseArrayBase)
    padding = opt_prop_def(DenseIntOrFPElementsAttr)
    body = region_def("single_block")

    def window(self, name: str) -> tuple[int, ...]:
        """window_dimensions, window_strides, base_dilations or window_dilations (1s when absent)."""
        return ints(getattr(self, name)) or (1,) * len(ints(self.window_dimensions))

    def padding_pairs(self) -> list[tuple[int, int]]:
        n = len(ints(self.window_dimensions))
        if self.padding is None:
            return [(0, 0)] * n
        values = [int(v) for v in self.padding.get_values()]
        if len(values) == 1:
            values = values * (2 * n)
        return [(values[2 * k], values[2 * k + 1]) for k in range(n)]

    def verify_(self) -> None:
        n = len(self.operands) // 2
        if len(self.operands) % 2 or n == 0 or len(self.outs) != n:
            raise VerifyException("stablehlo.reduce_window: as many init values and results as inputs")
        rank = len(ranked(self.operands[0], "stablehlo.reduce_window input").get_shape())
        for name in ("window_dimensions", "window_strides", "base_dilations", "window_dilations"):
            if len(self.window(name)) != rank:
                raise VerifyException(f"stablehlo.reduce_window: {name} needs {rank} values")
        if len(self.padding_pairs()) != rank:
            raise VerifyException(f"stablehlo.reduce_window: padding needs {rank} pairs")
        if len(self.body.block.args) != 2 * n:
            raise VerifyException(f"stablehlo.reduce_window: the body takes {2 * n} scalars")


@irdl_op_definition
class SelectAndScatterOp(IRDLOperation):
    """
    The gradient of max pooling (`jax.grad` through `lax.reduce_window` with `lax.max`, flax's
    `max_pool`): in each window of the padded `operand` the `select` region picks one element
    (keeping the one it has while `select(kept, next)` holds, in row-major window order), and the
    `scatter` region combines that window's `source` element into the result there, which starts
    as `init_value` everywhere.  Padding is never picked.

    Syntax (JAX prints the generic form only): `"stablehlo.select_and_scatter"(%x, %source, %init)
    <{padding = dense<0> : tensor<4x2xi64>, window_dimensions = array<i64: 1, 2, 2, 1>,
    window_strides = array<i64: 1, 2, 2, 1>}> ({ ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %p = stablehlo.compare GE, %a, %b, FLOAT : ... stablehlo.return %p : tensor<i1> }, { ^bb0(...):
    %s = stablehlo.add %a, %b : tensor<f32> stablehlo.return %s : tensor<f32> }) : (...) -> ...`
    """

    name = "stablehlo.select_and_scatter"

    operand = operand_def()
    source = operand_def()
    init_value = operand_def()
    result = result_def()
    window_dimensions = opt_prop_def(DenseArrayBase)
    window_strides = opt_prop_def(DenseArrayBase)
    padding = opt_prop_def(DenseIntOrFPElementsAttr)
    select = region_def("single_block")
    scatter = region_def("single_block")

    @property
    def rank(self) -> int:
        return len(ranked(self.operand, "stablehlo.select_and_scatter operand").get_shape())

    def window(self, name: str) -> tuple[int, ...]:
        """window_dimensions or window_strides (1s when absent)."""
        return ints(getattr(self, name)) or (1,) * self.rank

    def padding_pairs(self) -> list[tuple[int, int]]:
        """(low, high) padding of each dim (0s when absent)."""
        if self.padding is None:
            return [(0, 0)] * self.rank
        values = [int(v) for v in self.padding.get_values()]
        if len(values) == 1:
            values = values * (2 * self.rank)
        return [(values[2 * k], values[2 * k + 1]) for k in range(len(values) // 2)]

    def verify_(self) -> None:
        what = "stablehlo.select_and_scatter"
        operand, source = ranked(self.operand, f"{what} operand"), ranked(self.source, f"{what} source")
        init, out = ranked(self.init_value, f"{what} init value"), ranked(self.result, f"{what} result")
        elem = operand.element_type
        if source.element_type != elem or init.element_type != elem or out.element_type != elem:
            raise VerifyException(f"{what}: the operand, source, init value and result must share {elem}")
        if init.get_shape():
            raise VerifyException(f"{what}: the init value must be a scalar, got {init}")
        shape, rank = operand.get_shape(), self.rank
        if not compatible(shape, out.get_shape()):
            raise VerifyException(f"{what}: the result {out} must have the operand's shape {list(shape)}")
        window, strides, pads = self.window("window_dimensions"), self.window("window_strides"), self.padding_pairs()
        if len(window) != rank or len(strides) != rank or len(pads) != rank:
            raise VerifyException(f"{what}: window_dimensions, window_strides and padding need {rank} entries each")
        if any(w < 1 for w in window) or any(s < 1 for s in strides):
            raise VerifyException(f"{what}: window dims {list(window)} and strides {list(strides)} must be positive")
        windows: list[int] = []
        for e, w, s, (lo, hi) in zip(shape, window, strides, pads, strict=True):
            if e == DYNAMIC_INDEX:
                windows.append(DYNAMIC_INDEX)
                continue
            padded = lo + e + hi
            windows.append(0 if padded <= 0 or w > padded else (padded - w) // s + 1)
        if not compatible(windows, source.get_shape()):
            raise VerifyException(f"{what}: the operand has {windows} windows but the source is {source}")
        for region, name in ((self.select, "select"), (self.scatter, "scatter")):
            if len(region.block.args) != 2:
                raise VerifyException(f"{what}: the {name} region takes 2 scalars")
