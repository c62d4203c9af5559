"""The light-zoo CNNs (light_zoo.py) with a free image size, each built once, match onnxruntime at two
image sizes, and refuse an image too small for their pooling with a ShapeError naming the image."""

from __future__ import annotations

import onnx
import pytest

from tests.models.real_exports import exports, light_zoo

pytestmark = pytest.mark.xdist_group("real_exports_light_zoo")


def test_redeclared_images_are_free_and_shapes_dropped() -> None:
    """What a user re-exporting with dynamic axes has: H and W named, no stale shape left, seeded weights."""
    model = light_zoo.redeclared("squeezenet")
    (image,) = model.graph.input
    assert [d.dim_param or d.dim_value for d in image.type.tensor_type.shape.dim] == [1, 3, "height", "width"]
    assert not model.graph.value_info
    assert all(not d.HasField("dim_value") for o in model.graph.output for d in o.type.tensor_type.shape.dim)
    assert not any(n.op_type == "ConstantOfShape" for n in model.graph.node)
    onnx.checker.check_model(model)


@pytest.mark.parametrize(("export", "run"), exports.pytest_params(light_zoo.exports()))
def test_matches_onnxruntime(export: exports.Export, run: exports.Run) -> None:
    exports.check(export, run)


@pytest.mark.parametrize("name", ["squeezenet", "shufflenet"])
def test_the_seeded_weights_tell_classes_apart(name: str) -> None:
    """The comparison means something: onnxruntime's class probabilities are neither uniform (the fills'
    0.02 made them so) nor one-hot (ShuffleNet's residual sums did, before its BN_GAIN)."""
    (export,) = [e for e in light_zoo.exports() if e.name == f"light_{name}"]
    feeds = light_zoo.images(light_zoo.image_input(exports.model_of(export)), 224)[0]
    probabilities = exports.call_onnxruntime(export, feeds)[0]
    assert 0.01 < float(probabilities.max()) < 0.9 and float(probabilities.max()) > 10 * float(probabilities.min())
