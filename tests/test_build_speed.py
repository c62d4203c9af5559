"""What the build's speed-ups must keep: a long graph builds (no recursion past Python's limit) and computes
what onnxruntime does, the module attributes are checked once per value yet still refused when malformed,
the collector is restored after a build whether it succeeded or failed, remembered polynomial arithmetic
is the arithmetic, and the ops made without IRDL's generic constructor are the ops it makes."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from onnx import TensorProto, helper
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, IntegerAttr, StringAttr, i64
from xdsl.ir import Block

from bench.build_scaling import CHAIN_LAYOUT, TRANSFORMER_LAYOUT, chain, transformer
from loam.core.errors import LoamError, UnsupportedError
from loam.core.layout import LayoutRule
from loam.core.poly import Poly
from loam.dialects import build_contract as contract
from loam.dialects.expr import Expr
from loam.dialects.graph import NodeOp, UnknownType
from loam.dialects.kernel import ExprAttr, ZipOp
from loam.dialects.tensor_axes import Axis, axes_tensor_type
from loam.driver.options import Options
from loam.driver.pipeline import build
from loam.testing import run_onnxruntime


def options(layout: tuple[tuple[str, tuple[str, ...]], ...]) -> Options:
    return Options(layout=tuple(LayoutRule(pattern, axes) for pattern, axes in layout))


def test_a_long_chain_builds_and_computes_what_onnxruntime_does() -> None:
    model = chain(3000)  # deeper than Python's default recursion limit: no pass may recurse along it
    result = build(model, options=options(CHAIN_LAYOUT))
    x = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)
    got = result.module.forward(result.module.Weights.embedded(), x)
    (expected,) = run_onnxruntime(model, {"x": x})
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


def test_the_transformer_blocks_compute_what_onnxruntime_does() -> None:
    model = transformer(66)  # two blocks
    result = build(model, options=options(TRANSFORMER_LAYOUT))
    for batch, seq in ((1, 1), (2, 5)):
        x = np.random.default_rng(batch).standard_normal((batch, seq, 8)).astype(np.float32)
        got = result.module.forward(result.module.Weights.embedded(), x)
        (expected,) = run_onnxruntime(model, {"x": x})
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_as_it_was_after_a_build_and_after_a_refused_one(enabled: bool) -> None:
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        build(chain(3), options=options(CHAIN_LAYOUT))
        assert gc.isenabled() is enabled
        bad = helper.make_model(
            helper.make_graph(
                [helper.make_node("Relu", ["x"], ["y"])],
                "g",
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])],
            ),
            opset_imports=[helper.make_opsetid("", 17)],
        )
        with pytest.raises(LoamError):
            build(bad)  # no layout names x's axes
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_a_module_attribute_is_refused_when_malformed_after_a_wellformed_one_was_read() -> None:
    result = build(chain(3), options=options(CHAIN_LAYOUT))
    ir = result.ir
    assert contract.NODES.get(ir) == (("n0", "Relu", False), ("n1", "Neg", False), ("n2", "Abs", False))
    ir.attributes[contract.NODES.name] = ArrayAttr([StringAttr("not a row")])
    with pytest.raises(UnsupportedError, match=r"loam\.nodes"):
        contract.NOTES.get(ir)  # any read checks the whole module, the replaced value included


def test_remembered_polynomial_arithmetic_is_the_arithmetic() -> None:
    n, m = Poly.symbol("N"), Poly.symbol("M")
    for _ in range(2):  # the second round reads the remembered results
        assert str((n + 1) * (m - 2)) == "M*N + M - 2*N - 2"
        assert (n * 2) + 0 == 2 * n and str(n * 0) == "0" and str(1 + n) == "N + 1"
    with pytest.raises(TypeError):
        _ = n * True  # a bool is refused, not read as the integer 1


def test_the_fast_constructors_make_the_ops_irdl_makes() -> None:
    # ZipOp and NodeOp skip IRDL's generic argument building: the op must be the one it builds, and verify.
    t = axes_tensor_type("f32", (Axis.named("N", Poly.symbol("N")), Axis.named("C", Poly.const(3))))
    block = Block(arg_types=[t, t])
    expr = ExprAttr(Expr.operand(0).binary("add", Expr.operand(1)).unary("relu"))
    for inputs in ([block.args[0], block.args[1]], [block.args[1], block.args[1]]):
        fast = ZipOp(inputs, expr, t, "n")
        irdl = ZipOp.build(operands=[inputs], result_types=[t], properties={"expr": expr, "node": StringAttr("n")})
        fast.verify()
        assert str(fast) == str(irdl) and list(fast.operands) == inputs
    args = list(Block(arg_types=[UnknownType(), UnknownType()]).args)
    for outputs in (["y"], ["y", "z"]):
        node = NodeOp("Relu", args, [UnknownType()] * len(outputs), outputs, node_name="n", since=17)
        irdl = NodeOp.build(
            operands=[args],
            result_types=[[UnknownType()] * len(outputs)],
            properties={
                "op_type": StringAttr("Relu"),
                "node_name": StringAttr("n"),
                "domain": StringAttr(""),
                "since": IntegerAttr(17, i64),
                "attrs": DictionaryAttr({}),
                "output_names": ArrayAttr([StringAttr(o) for o in outputs]),
            },
            regions=[[]],
        )
        assert str(node) == str(irdl) and len(node.outs) == len(outputs) and node.since == 17
