"""The operator rules Loam knows, by op type, and those of other domains than ONNX's.

`RULES` holds ONNX's own operators (default domain) by op type; `DOMAIN_RULES` the operators of other
domains (onnxruntime's `com.microsoft`, `loam.ops.microsoft`; ONNX's optimizers in
`ai.onnx.preview.training`, `loam.ops.training`) by (domain, op type).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loam.core.errors import UnsupportedError
from loam.ops import (
    activations,
    arithmetic,
    cast,
    channel_norms,
    constant,
    control,
    conv,
    detection,
    einsum,
    gather,
    generators,
    layer_norms,
    losses,
    matmul,
    microsoft,
    movement,
    pool,
    quantize,
    recurrent,
    reduce,
    regroup,
    resize,
    scatter,
    selection,
    signal,
    slicing,
    stochastic,
    training,
)
from loam.ops.base import NodeInfo, OpRule

if TYPE_CHECKING:
    from onnx import NodeProto

    from loam.ops.microsoft.body import DomainBody

# One module per operator family; each lists its rules in `RULES`.
FAMILIES = (
    constant,
    arithmetic,
    activations,
    cast,
    matmul,
    regroup,
    movement,
    slicing,
    gather,
    scatter,
    generators,
    selection,
    reduce,
    channel_norms,
    layer_norms,
    losses,
    quantize,
    recurrent,
    einsum,
    conv,
    pool,
    resize,
    signal,
    detection,
    stochastic,
    control,
)

_RULES: tuple[OpRule, ...] = tuple(rule for family in FAMILIES for rule in family.RULES)

RULES: dict[str, OpRule] = {op_type: rule for rule in _RULES for op_type in rule.op_types}

DOMAIN_RULES: dict[tuple[str, str], OpRule] = {
    (rule.domain, op_type): rule
    for family in (*microsoft.FAMILIES, training)
    for rule in family.RULES
    for op_type in rule.op_types
}

# Domains whose operators are ONNX's own.
ONNX_DOMAINS = ("", "ai.onnx")


# Why an operator that reaches the build uncompiled is not compiled, where Loam handles some of its nodes.
WHY_NOT: dict[str, str] = {
    "Scan": "the importer unrolls a Scan (opset 9 on) whose scan length the model fixes and makes one over a "
    "symbolic length a Loop; this one is opset 8's batched Scan, is fixed at no iterations, reverses an output "
    "at opset 9, or stacks an output of unknown rank on an axis other than 0",
}


def rule_for(node: NodeInfo, domain: str = "") -> OpRule:
    """The rule for `node`'s operator, or an UnsupportedError naming the node and the operator."""
    rule = RULES.get(node.op_type) if domain in ONNX_DOMAINS else DOMAIN_RULES.get((domain, node.op_type))
    if rule is None:
        qualified = node.op_type if domain in ONNX_DOMAINS else f"{domain}.{node.op_type}"
        why = f" ({WHY_NOT[qualified]})" if qualified in WHY_NOT else ""
        raise UnsupportedError(f"node '{node.name}' uses operator '{qualified}', which Loam does not compile{why}")
    return rule


def domain_body(node: NodeProto) -> DomainBody | None:
    """How the importer writes `node` (of another domain) as default-domain nodes before import, where
    its rule writes a body (`loam.ops.microsoft.body.BodyRule`); None for every other node."""
    rule = DOMAIN_RULES.get((node.domain, node.op_type))
    expand = getattr(rule, "expand", None)
    return expand if callable(expand) else None


def operand_names(node: NodeProto) -> list[str]:
    """The values `node` reads: its inputs, and for ONNX's Gradient also the `y` it differentiates
    (`loam.ops.training.gradient_operands`), so that its value is in scope where the node is lowered."""
    if added_operands(node.domain, node.op_type):
        return training.gradient_operands(node)
    return list(node.input)


def added_operands(domain: str, op_type: str) -> int:
    """How many operands `operand_names` adds after a node's ONNX inputs (the exporter leaves them out)."""
    return 1 if (domain, op_type) == (training.DOMAIN, "Gradient") else 0
