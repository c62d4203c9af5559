"""ONNX initializers whose data a checkpoint holds (external data), for models built beside a checkpoint."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
from onnx.external_data_helper import set_external_data


def external_initializers(
    values: Mapping[str, np.ndarray], location: str = "weights.safetensors"
) -> list[onnx.TensorProto]:
    """One initializer per value, of its type and extents, its data left to `location`."""
    found = []
    for name, value in values.items():
        t = numpy_helper.from_array(value, name)
        set_external_data(t, location)
        t.ClearField("raw_data")
        t.data_location = TensorProto.EXTERNAL
        found.append(t)
    return found
