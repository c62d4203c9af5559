"""onnxruntime's `com.microsoft` operators: those its GenAI model builder and transformer optimizer write.

Each family is a module listing its rules in `RULES` (every rule's `domain` is `domain.DOMAIN`), collected in
`FAMILIES` and registered by `loam.ops.DOMAIN_RULES` under (domain, op type), apart from ONNX's own
operators: `com.microsoft`'s Attention is not ONNX's.  onnxruntime's CPU kernels are their meaning
(its contrib-op documentation, and the tests in tests/ops/microsoft that run both).
"""

from __future__ import annotations

from types import ModuleType

from loam.ops.microsoft import activation, attention, normalization, quantized
from loam.ops.microsoft.domain import DOMAIN

__all__ = ["DOMAIN", "FAMILIES"]

FAMILIES: tuple[ModuleType, ...] = (activation, attention, normalization, quantized)
