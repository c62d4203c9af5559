"""The onnx package's light-zoo CNNs (onnx/backend/test/data/light/light_*.onnx), with a free image size.

The files are the model zoo's CNNs at a fixed 1 x 3 x 224 x 224 image, each weight a ConstantOfShape
fill of 0.02 (which makes every class equally likely: nothing to compare).  `redeclared` makes of one
what a user re-exporting it with dynamic axes would have: the fills replaced by seeded weights (He-scaled
Conv and Gemm weights, BatchNormalization statistics near 1 and 0, small biases), the image's H and W
declared as the dim_params `height` and `width`, and the graph's stale shapes dropped: value_info, the
outputs' extents (their rank kept, each extent unknown), and the weights listed again as inputs, as IR
version 3 wrote them.

Each runs at 224 and at one other size its pooling allows (`SIZES`: onnxruntime runs the file there;
where a Reshape to the classifier fixes the last feature map at 7 x 7, that is a size which still
pools down to 7), and at an image too small for its pooling, which must be a ShapeError naming the
image input.
"""

from __future__ import annotations

import functools
import os

import numpy as np
import onnx
from onnx import numpy_helper

from tests.models.real_exports.exports import Export, Run

SIZES = {
    # model: the second image side (224 is the first), one onnxruntime runs the re-declared file at.  A
    # Reshape to the classifier fixes the last feature map (7 x 7 for ResNet-50 and VGG-19; 56 x 56 in
    # ShuffleNet's first channel shuffle), so those take a side that still pools down to it.
    "bvlc_alexnet": 240,
    "densenet121": 256,
    "inception_v1": 240,
    "inception_v2": 228,
    "resnet50": 200,
    "shufflenet": 222,
    "squeezenet": 256,
    "vgg19": 240,
    "zfnet512": 240,
}
TOO_SMALL = 16
"""An image side these networks pool away to nothing, which onnxruntime refuses; DenseNet-121 pads every
Conv and pool and ends in a global pool, so it runs at any side down to 1 and has none."""
RUNS_ANY_SIDE = frozenset({"densenet121"})


def light_folder() -> str:
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


BN_GAIN = {"shufflenet": 0.5}
"""BatchNormalization scales drawn around this instead of 1: ShuffleNet's 16 residual sums otherwise grow its
logits to 1e5, and its softmax to one-hot, where any two computations agree."""


def seeded(
    name: str, shape: tuple[int, ...], role: int | None, rng: np.random.Generator, gain: float = 1.0
) -> np.ndarray:
    """A weight in place of a fill: `role` is its input position on a BatchNormalization (1 scale,
    2 bias, 3 mean, 4 variance), else None; `gain` the scales' centre."""
    noise = rng.standard_normal(shape, dtype=np.float32)
    if role == 1:  # a ResNet residual branch's last scale small, so its 16 sums keep the activations tame
        values = gain * (0.2 if "branch2c" in name else 1.0) + 0.1 * noise
    elif role == 4:
        values = 1.0 + 0.1 * np.abs(noise)
    elif role in (2, 3) or len(shape) < 2:
        values = 0.1 * noise
    else:  # Conv and Gemm weights, He-scaled by their fan-in
        values = noise * np.float32(np.sqrt(2.0 / int(np.prod(shape[1:]))))
    return np.ascontiguousarray(values, dtype=np.float32)


def redeclared(name: str) -> onnx.ModelProto:
    """`light_NAME.onnx` as a user re-exporting it with dynamic image axes would have it."""
    model = onnx.load(os.path.join(light_folder(), f"light_{name}.onnx"))
    graph = model.graph
    data = image_input(model)
    stored = {t.name: t for t in graph.initializer}
    role = {}
    for node in graph.node:
        if node.op_type == "BatchNormalization":
            role.update({inp: i for i, inp in enumerate(node.input) if i})
    rng = np.random.default_rng(20240611)
    weights = []
    for node in [n for n in graph.node if n.op_type == "ConstantOfShape"]:
        shape = tuple(int(e) for e in numpy_helper.to_array(stored[node.input[0]]))
        out = node.output[0]
        values = seeded(out, shape, role.get(out), rng, BN_GAIN.get(name, 1.0))
        weights.append(numpy_helper.from_array(values, out))
    nodes = [n for n in graph.node if n.op_type != "ConstantOfShape"]
    read = {inp for n in nodes for inp in n.input}
    kept = [t for t in graph.initializer if t.name in read]
    del graph.node[:], graph.initializer[:], graph.value_info[:]
    graph.node.extend(nodes)
    graph.initializer.extend([*kept, *weights])
    (image,) = [i for i in graph.input if i.name == data]
    dims = image.type.tensor_type.shape.dim
    for axis, param in ((2, "height"), (3, "width")):
        dims[axis].ClearField("dim_value")
        dims[axis].dim_param = param
    del graph.input[:]
    graph.input.append(image)
    for output in graph.output:  # rank kept (the checker wants a shape), every extent left unknown
        for dim in output.type.tensor_type.shape.dim:
            dim.Clear()
    model.ir_version = max(model.ir_version, 4)  # initializers need not be inputs
    return model


def image_input(model: onnx.ModelProto) -> str:
    """The graph input that is the image: neither an initializer nor a fill's output (IR version 3 lists
    every weight as an input too)."""
    weights = {t.name for t in model.graph.initializer} | {o for n in model.graph.node for o in n.output}
    (image,) = [i.name for i in model.graph.input if i.name not in weights and len(i.type.tensor_type.shape.dim) == 4]
    return image


def images(name: str, side: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(side)
    return [{name: rng.standard_normal((1, 3, side, side)).astype(np.float32)}]


@functools.cache
def exports() -> tuple[Export, ...]:
    found = []
    for name, other in SIZES.items():
        if not os.path.isfile(os.path.join(light_folder(), f"light_{name}.onnx")):
            continue
        data = image_input(onnx.load(os.path.join(light_folder(), f"light_{name}.onnx")))
        runs = tuple(
            Run(f"{side}x{side}", f"{data} 1x3x{side}x{side}", functools.partial(images, data, side))
            for side in (224, other)
        )
        if name not in RUNS_ANY_SIDE:
            runs += (
                Run(
                    "too-small-refused",
                    f"{data} 1x3x{TOO_SMALL}x{TOO_SMALL}",
                    functools.partial(images, data, TOO_SMALL),
                    wrong=data,
                ),
            )
        found.append(Export(f"light_{name}", "light_zoo", functools.partial(redeclared, name), runs))
    return tuple(found)
