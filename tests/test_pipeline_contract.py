"""The build contract (`loam.dialects.build_contract`): each attribute the build leaves on its IR reads back
as the value it was given, through its text too (a dumped `.mlir` file replays with `loam-opt`); a malformed
value, or a `loam.` module attribute the contract does not register, is refused naming it."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import pytest
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, IntAttr, ModuleOp, StringAttr, UnitAttr
from xdsl.ir import Attribute
from xdsl.printer import Printer

from loam.core.errors import UnsupportedError
from loam.core.layout import LayoutRule
from loam.dialects import build_contract as contract
from loam.dialects.build_contract import BuildAttribute
from loam.frontends.context import parse_ir
from loam.tools import loam_opt
from tests.tools.test_cli import assert_one_line_error, run

Contracted = BuildAttribute[Any, Any]
"""Any attribute of the contract: each pairs its own holder and value types."""

MODULE_VALUES: list[tuple[Contracted, object]] = [
    (contract.DIMS, {"N": 4, "past + 1": 7}),
    (contract.VALUES, {"sr": 16000, "scale": 0.25, "flag": True, "axes": (0, -1), "none": ()}),
    (contract.INTERFACE, {"attention_mask": ["batch", 3], "logits": [1]}),
    (contract.OUTPUTS, ("y", "present.0.key")),
    (contract.LAYOUT, (LayoutRule("x", ("Batch", "In")), LayoutRule("mask", ("Seq", "(C H W)"), graph="then"))),
    (contract.INLINE_WEIGHTS, True),
    (contract.INT8_ACTIVATIONS, False),
    (contract.CHECKPOINT_NAMES, (("blk.*.w", "b.*.w"), ("a", "b"))),
    (contract.ROW_ORDERS, (("blk.0.attn_q.weight", 9),)),
    (contract.CHECKPOINT_FORMATS, ("safetensors", "gguf")),
    (contract.WEIGHTS_BESIDE, 1 << 20),
    (contract.STORED_ENCODINGS, {"a.weight": ("Q4_1", "m.gguf"), "b.weight": ("Q8_0", "n.gguf")}),
    (contract.DEVICE_LIMITS, {"maxStorageBuffersPerShaderStage": 16}),
    (
        contract.EXTERNAL_DATA,
        (("w", "model.onnx.data", 0, 24, "F32", (2, 3)), ("s", "model.onnx.data", 24, 4, "I32", ())),
    ),
    (contract.NODES, (("fc1", "Gemm", False), ("shape", "Shape", True))),
    (contract.NOTES, ("a note", "another")),
]

OP_VALUES: list[tuple[Contracted, object]] = [
    (contract.PACKED, True),
    (contract.STORED, "Q4_0"),
    (contract.FUSED, ("mul", "add")),
]


def _text(module: ModuleOp) -> str:
    out = io.StringIO()
    Printer(stream=out).print_op(module)
    return out.getvalue()


def test_every_module_attribute_is_registered_once_and_tested_here() -> None:
    assert sorted(a.name for a, _ in MODULE_VALUES) == sorted(contract.MODULE_ATTRIBUTES)
    assert sorted(a.name for a, _ in OP_VALUES) == sorted(contract.OP_ATTRIBUTES)
    assert all(name.startswith(contract.PREFIX) for name in contract.MODULE_ATTRIBUTES)


@pytest.mark.parametrize(("attribute", "value"), MODULE_VALUES, ids=[a.name for a, _ in MODULE_VALUES])
def test_a_module_attribute_round_trips_through_its_text(attribute: Contracted, value: object) -> None:
    module = ModuleOp([])
    attribute.set(module, value)
    assert attribute.get(module) == value
    read = parse_ir(_text(module), "<contract>")
    assert attribute.get(read) == value
    assert f"{attribute.name} = " in _text(read)


@pytest.mark.parametrize(("attribute", "value"), OP_VALUES, ids=[a.name for a, _ in OP_VALUES])
def test_an_op_attribute_round_trips_through_its_text(attribute: Contracted, value: object) -> None:
    inner = ModuleOp([])
    attribute.set(inner, value)
    read = parse_ir(_text(ModuleOp([inner])), "<contract>")
    op = next(iter(read.ops))
    assert attribute.get(op) == value


def test_absent_reads_none() -> None:
    module = ModuleOp([])
    assert all(a.get(module) is None for a, _ in (*MODULE_VALUES, *OP_VALUES))
    assert not contract.PACKED.is_on(module)


MALFORMED: list[tuple[Contracted, Attribute]] = [
    (contract.DIMS, DictionaryAttr({"N": StringAttr("four")})),
    (contract.VALUES, DictionaryAttr({"sr": StringAttr("16000")})),
    (contract.INTERFACE, DictionaryAttr({"x": ArrayAttr([IntAttr(1)])})),
    (contract.OUTPUTS, ArrayAttr([IntAttr(0)])),
    (contract.LAYOUT, StringAttr("x -> [Batch]")),
    (contract.INLINE_WEIGHTS, IntAttr(1)),
    (contract.INT8_ACTIVATIONS, StringAttr("true")),
    (contract.CHECKPOINT_NAMES, ArrayAttr([ArrayAttr([StringAttr("only a pattern")])])),
    (contract.ROW_ORDERS, ArrayAttr([ArrayAttr([StringAttr("w"), StringAttr("nine")])])),
    (contract.CHECKPOINT_FORMATS, ArrayAttr([StringAttr("pickle")])),
    (contract.WEIGHTS_BESIDE, IntAttr(-1)),
    (contract.STORED_ENCODINGS, DictionaryAttr({"w": StringAttr("Q4_0")})),
    (contract.DEVICE_LIMITS, DictionaryAttr({"maxStorageBuffersPerShaderStage": StringAttr("16")})),
    (contract.EXTERNAL_DATA, ArrayAttr([ArrayAttr([StringAttr("w"), StringAttr("model.onnx.data")])])),
    (contract.NODES, ArrayAttr([ArrayAttr([StringAttr("fc1"), StringAttr("Gemm"), IntAttr(0)])])),
    (contract.NOTES, StringAttr("one note")),
    (contract.PACKED, StringAttr("yes")),
    (contract.STORED, ArrayAttr([StringAttr("Q4_0")])),
    (contract.FUSED, ArrayAttr([UnitAttr()])),
]


def test_every_attribute_has_a_malformed_case_here() -> None:
    assert sorted(a.name for a, _ in MALFORMED) == sorted([*contract.MODULE_ATTRIBUTES, *contract.OP_ATTRIBUTES])


@pytest.mark.parametrize(("attribute", "bad"), MALFORMED, ids=[a.name for a, _ in MALFORMED])
def test_a_malformed_attribute_is_refused_naming_it(attribute: Contracted, bad: Attribute) -> None:
    module = ModuleOp([])
    module.attributes[attribute.name] = bad
    with pytest.raises(
        UnsupportedError, match=f"^{re.escape(attribute.name)} is .*, not {re.escape(attribute.expected)}$"
    ):
        attribute.get(module)


def test_a_malformed_module_attribute_is_refused_whichever_one_is_read() -> None:
    module = ModuleOp([])
    contract.NOTES.set(module, ("fine",))
    module.attributes[contract.DIMS.name] = StringAttr("N=4")
    with pytest.raises(UnsupportedError, match=r"^loam\.dims is"):
        contract.NOTES.get(module)


def test_an_unregistered_loam_attribute_is_refused_naming_it() -> None:
    module = ModuleOp([])
    module.attributes["loam.dimz"] = DictionaryAttr({})
    module.attributes["other.note"] = StringAttr("not the build's: left alone")
    with pytest.raises(UnsupportedError, match=r"module attribute loam\.dimz is not one the build contract registers"):
        contract.DIMS.get(module)
    del module.attributes["loam.dimz"]
    assert contract.DIMS.get(module) is None


GRAPH = """\
  graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {
    graph.graph "g" (%x: !graph.tensor<f32, ["N", 8]>) inputs ["x"] {
      %r = graph.node "Relu" "relu" since 17 (%x) -> ["r"] : !graph.unknown
      graph.return %r ["r"] : !graph.tensor<f32, ["N", 8]>
    }
  }
"""


@pytest.mark.parametrize(
    ("attributes", "needle"),
    [
        ('loam.dims = {N = "four"}', "loam.dims is"),
        ("loam.dimz = {N = 4 : i64}", "module attribute loam.dimz is not one the build contract registers"),
    ],
)
def test_loam_opt_refuses_hand_edited_attributes_naming_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], attributes: str, needle: str
) -> None:
    path = tmp_path / "edited.mlir"
    path.write_text(f"builtin.module attributes {{{attributes}}} {{\n{GRAPH}}}\n", encoding="utf-8")
    code, _, err = run(loam_opt.main, [str(path), "-p", "apply-options"], capsys)
    assert code == 1
    assert_one_line_error(err, "loam-opt", needle)


def test_the_well_formed_graph_above_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "fine.mlir"
    path.write_text(f"builtin.module attributes {{loam.dims = {{N = 4 : i64}}}} {{\n{GRAPH}}}\n", encoding="utf-8")
    code, out, err = run(loam_opt.main, [str(path), "-p", "apply-options"], capsys)
    assert code == 0, err
    assert "!graph.tensor<f32, [4, 8]>" in out
