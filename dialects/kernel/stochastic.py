"""Library kernels that draw random values (ONNX RandomNormal, RandomUniform, their Like forms, and
Bernoulli), listed in `STOCHASTIC_OPS`.

Unlike every other library kernel, a draw is not a function of its operands: two draws over the same
operand differ.  `Weights` never computes one at load (`passes/weight_only.py` leaves it in forward),
and the numpy kernel reads the generator forward makes from its `seed` argument.  (The op keeps the
`Pure` trait `LibraryOp` declares, xDSL's traits adding up along the bases; no pass of Loam's merges
or drops ops by that trait.)
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.irdl import irdl_op_definition

from loam.dialects.kernel.library import LibraryOp, library_types, require

DISTRIBUTIONS = ("normal", "uniform", "bernoulli")
"""What `kernel.random` draws: `normal` (mean `a`, standard deviation `b`), `uniform` (in [`a`, `b`))
or `bernoulli` (1 with the probability its operand holds at each element, else 0)."""


@irdl_op_definition
class RandomOp(LibraryOp):
    """Values drawn from `dist` (one of `DISTRIBUTIONS`), of type `to` (numpy's name).

    With an operand (the Like forms, Bernoulli's probabilities) the result has its extents, and only
    Bernoulli reads its values; without one, the result has the extents `shape`.  `seed`, where the
    node gave one, seeds the node's own draws when forward is given no seed.

    Example: `%y = kernel.random(%x) {node = "r", dist = "normal", a = 0.0 : f64, b = 1.0 : f64,
    to = "float32"} : (X) -> Y`
    """

    name = "kernel.random"
    PARAMS: ClassVar[dict[str, type]] = {"dist": str, "a": float, "b": float, "to": str, "shape": tuple, "seed": float}
    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"shape", "seed"})

    def verify_kernel(self) -> None:
        ins, outs = library_types(self)
        require(self, self.param("dist") in DISTRIBUTIONS, f"dist must be one of {', '.join(DISTRIBUTIONS)}")
        require(self, len(outs) == 1, "gives one result")
        if ins:
            require(self, len(ins) == 1 and "shape" not in self.attributes, "takes one operand or a shape, not both")
            if ins[0] is not None and outs[0] is not None:
                require(self, ins[0] == outs[0], "the result's extents are not the operand's")
        else:
            require(self, "shape" in self.attributes, "takes one operand or a shape")
            require(self, self.param("dist") != "bernoulli", "bernoulli reads its probabilities from an operand")
            if outs[0] is not None:
                require(self, tuple(outs[0]) == tuple(self.param("shape")), "the result's extents are not shape")


STOCHASTIC_OPS: tuple[type[LibraryOp], ...] = (RandomOp,)
