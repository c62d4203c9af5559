"""Library kernels that normalise (LayerNormalization and InstanceNormalization as `kernel.normalize`,
BatchNormalization's training mode, GroupNormalization, LRN), and Einsum, listed in `NORMALIZATION_OPS`.
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.irdl import irdl_op_definition
from xdsl.utils.exceptions import VerifyException

from loam.dialects.kernel.library import LibraryOp, check_axes, kernel_rank


@irdl_op_definition
class NormalizeOp(LibraryOp):
    """LayerNormalization / InstanceNormalization: (x - mean) / sqrt(var + epsilon) * scale + bias.

    Mean and variance are taken over `axes`, computed in `stash` (a numpy float dtype name).
    `channel_axis` -1 broadcasts scale and bias numpy-style (LayerNorm); otherwise they are 1-D
    along that axis (InstanceNorm).  With `stats` 1 the kernel also returns the mean and
    1/sqrt(var + epsilon), keeping the reduced axes as extent 1.
    """

    name = "kernel.normalize"
    PARAMS: ClassVar[dict[str, type]] = {
        "axes": tuple, "epsilon": float, "channel_axis": int, "stash": str, "stats": int,
    }  # fmt: skip

    def verify_kernel(self) -> None:
        check_axes(self, self.param("axes"), kernel_rank(self, self.inputs[0]))
        want = 3 if self.param("stats") else 1
        if len(self.outputs) != want:
            raise VerifyException(
                f"kernel.normalize '{self.node.data}': stats={self.param('stats')} gives {want} results"
            )


@irdl_op_definition
class BatchNormTrainOp(LibraryOp):
    """ONNX BatchNormalization with training_mode 1: `(x, scale, bias, mean, var)`, X normalised per
    channel (axis 1) by its own mean and population variance over the other axes; results Y and the
    running mean and variance, `mean * momentum + batch statistic * (1 - momentum)`.

    Example: `%y, %m, %v = kernel.batch_norm_train(%x, %s, %b, %mean, %var) {node = "bn",
    epsilon = 1.0e-05 : f64, momentum = 9.0e-01 : f64} : (X, C, C, C, C) -> (X, C, C)`
    """

    name = "kernel.batch_norm_train"
    PARAMS: ClassVar[dict[str, type]] = {"epsilon": float, "momentum": float}

    def verify_kernel(self) -> None:
        if len(self.inputs) != 5 or len(self.outputs) != 3:
            raise VerifyException(
                f"{self.name} '{self.node.data}': takes x, scale, bias, mean and var and gives Y, "
                "the running mean and the running variance"
            )


@irdl_op_definition
class GroupNormOp(LibraryOp):
    """ONNX GroupNormalization: channels split into `num_groups`, each normalised over itself and the
    spatial axes, then scaled per channel (or per group, opset 18's meaning, with `per_group`)."""

    name = "kernel.group_norm"
    PARAMS: ClassVar[dict[str, type]] = {"num_groups": int, "epsilon": float, "per_group": int, "stash": str}


@irdl_op_definition
class LrnOp(LibraryOp):
    """ONNX LRN: x / (bias + alpha / size * (sum of squares over `size` neighbouring channels)) ** beta."""

    name = "kernel.lrn"
    PARAMS: ClassVar[dict[str, type]] = {"size": int, "alpha": float, "beta": float, "bias": float}


@irdl_op_definition
class EinsumOp(LibraryOp):
    """ONNX Einsum: numpy.einsum's meaning of `equation` (always with an explicit output)."""

    name = "kernel.einsum"
    PARAMS: ClassVar[dict[str, type]] = {"equation": str}


NORMALIZATION_OPS: tuple[type[LibraryOp], ...] = (NormalizeOp, BatchNormTrainOp, GroupNormOp, LrnOp, EinsumOp)
