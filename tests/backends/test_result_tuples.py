"""The named tuples a generated module returns (`Outputs`, `Grads`) behave as `collections.namedtuple`'s do.

Before: they had `_fields` but no `_asdict()`, so code written for a namedtuple (`out._asdict()`,
`out._replace(y=...)`, pickling a result to send it elsewhere) broke on them.  The module imports nothing but
numpy and the standard library, and a field may be any minted name (`_x`, `count`), which namedtuple itself
refuses, so the class is written out by hand; here every namedtuple behaviour is held to a real namedtuple of
the same fields and values, on the numpy module, the WGSL module and a `--grad` build's `Grads`.
"""

from __future__ import annotations

import collections
import copy
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from loam.driver.options import Options
from loam.driver.pipeline import build
from loam.testing import build_for

ROOT = Path(__file__).resolve().parents[2]
MLP = ROOT / "examples" / "mlp"
F = TensorProto.FLOAT


def three_outputs() -> onnx.ModelProto:
    """x [2, 3] -> Relu `y`, Neg `z`, Sigmoid `w`: forward returns `Outputs(y, z, w)`."""
    nodes = [helper.make_node(op, ["x"], [name]) for op, name in (("Relu", "y"), ("Neg", "z"), ("Sigmoid", "w"))]
    graph = helper.make_graph(
        nodes, "three", [helper.make_tensor_value_info("x", F, [2, 3])],
        [helper.make_tensor_value_info(n, F, [2, 3]) for n in ("y", "z", "w")],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def same_arrays(a: tuple[Any, ...], b: tuple[Any, ...]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y, strict=True)


def behaves_as_a_namedtuple(result: tuple[Any, ...], fields: tuple[str, ...]) -> None:
    """Every namedtuple behaviour of `result` (a module's tuple class) against a namedtuple of its values."""
    cls = type(result)
    twin = collections.namedtuple(cls.__name__, fields)(*result)  # type: ignore[misc]
    assert cls._fields == fields and result._fields == twin._fields  # type: ignore[attr-defined]
    assert cls._field_defaults == {} and cls.__match_args__ == fields  # type: ignore[attr-defined]
    assert result == twin and tuple(result) == tuple(twin)  # the same arrays, in the same order
    assert repr(result) == repr(twin)

    as_dict = result._asdict()  # type: ignore[attr-defined]
    assert type(as_dict) is dict and list(as_dict) == list(fields)
    assert all(as_dict[f] is getattr(result, f) for f in fields)

    replacement = np.full_like(result[0], 7.0)
    replaced = result._replace(**{fields[0]: replacement})  # type: ignore[attr-defined]
    assert type(replaced) is cls and replaced[0] is replacement and replaced[1:] == result[1:]
    assert getattr(result, fields[0]) is result[0]  # the original is unchanged
    with pytest.raises(ValueError, match=r"Got unexpected field names: \['nope'\]") as caught:
        result._replace(nope=replacement)  # type: ignore[attr-defined]
    with pytest.raises(ValueError) as twin_caught:
        twin._replace(nope=replacement)
    assert str(caught.value) == str(twin_caught.value)

    made = cls._make(iter(result))  # type: ignore[attr-defined]
    assert type(made) is cls and made == result
    with pytest.raises(TypeError) as caught_make:
        cls._make(result[:-1])  # type: ignore[attr-defined]
    with pytest.raises(TypeError) as twin_make:
        type(twin)._make(result[:-1])
    assert str(caught_make.value) == str(twin_make.value)

    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        back = pickle.loads(pickle.dumps(result, protocol=protocol))
        assert type(back) is cls and back._fields == fields, protocol
        same_arrays(back, result)
    for copied in (copy.copy(result), copy.deepcopy(result)):
        assert type(copied) is cls
        same_arrays(copied, result)

    match result:
        case cls(first):  # type: ignore[misc]  # a positional pattern reads __match_args__
            assert first is result[0]
        case _:
            pytest.fail("a positional class pattern did not match")


@pytest.mark.parametrize("backend", ["numpy", "wgsl"])
def test_outputs_behaves_as_a_namedtuple(backend: str) -> None:
    if backend == "wgsl":
        pytest.importorskip("wgpu")
    module = build_for(three_outputs(), backend=backend, fuse="dispatch" if backend == "wgsl" else "memory").module
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    out = module.forward(module.Weights.embedded(), x)
    assert type(out) is module.Outputs
    np.testing.assert_allclose(out.w, 1 / (1 + np.exp(-x)), rtol=1e-6)
    behaves_as_a_namedtuple(out, ("y", "z", "w"))


def test_grads_and_a_grad_builds_outputs_behave_as_namedtuples() -> None:
    options = Options.from_toml(MLP / "loam.toml")
    module = build(MLP / "mlp.onnxtext", options=options, grad=()).module
    weights = module.Weights.load_file([str(c) for c in options.checkpoints])
    rng = np.random.default_rng(3)
    x, g = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((4, 3)).astype(np.float32)
    y, grads = module.forward_backward(weights, x, g)
    assert type(grads) is module.Grads
    fields = ("fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias", "fc3_weight", "fc3_bias")
    behaves_as_a_namedtuple(grads, fields)
    # A step from a replaced gradient is the step from the gradients as given.
    zero = grads._replace(fc3_bias=np.zeros_like(grads.fc3_bias))
    np.testing.assert_array_equal(weights.updated(zero, 0.1).fc3_bias, weights.fc3_bias)
    every = module.forward(weights, x, g)  # the model's output, then each gradient
    assert type(every) is module.Outputs
    np.testing.assert_array_equal(every[0], y)
    behaves_as_a_namedtuple(every, ("y", *(f"grad_{f}" for f in fields)))
