"""Robustness: mutants of ONNX's node cases either build correctly or are refused with a LoamError.

Each mutant is one of ONNX's backend node cases (all of whose operators Loam compiles, shape operands
made Constants as the conformance harness does) changed in one seeded, deterministic way: an attribute
given an odd value (a negative, zero or huge int, an out-of-range axis, a NaN or infinite float, a list
of the wrong length, an unknown mode), an attribute dropped, an input dropped or added, a graph input's
declared shape or element type changed, or a Constant shape operand's value changed.

The oracle: `build_for` either succeeds or raises a `LoamError` (never a raw Python exception); where it
builds and onnxruntime accepts and runs the mutant on random inputs of the declared types and shapes,
Loam's outputs match onnxruntime's, or else ONNX's reference evaluator's (where onnxruntime departs
from the spec, e.g. Resize align_corners with scales, a reduction over an empty axis, LRN with an
infinite bias).  A wider sweep of the same mutants found the bugs the regression tests in tests/ops name.
"""

from __future__ import annotations

import copy
import traceback
import warnings
import zlib
from typing import Any

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import AttributeProto, TensorProto, numpy_helper

from loam.core.errors import LoamError
from loam.ops import RULES
from loam.testing import assert_same, build_for, run_built, run_onnxruntime
from tests.conformance import harness

# The fixed sample: every node case of supported operators (its function expansions aside: they are large
# and repeat the same operators) gets MUTANTS_PER_SEED mutants, split into SHARDS tests for pytest-xdist.
MUTANTS_PER_SEED = 2
SHARDS = 4
# The sample must exercise both halves of the oracle.
MIN_BUILT, MIN_COMPARED = 100, 50

ELEMENT_TYPES = (
    TensorProto.FLOAT16,
    TensorProto.INT32,
    TensorProto.BOOL,
    TensorProto.INT8,
    TensorProto.DOUBLE,
    TensorProto.INT64,
    TensorProto.BFLOAT16,
    TensorProto.UINT8,
    TensorProto.FLOAT,
)


def seeds() -> list[str]:
    """The node cases every operator of which Loam compiles, in name order."""
    out = []
    for name, case in harness._collected_node_cases().items():
        model = case.model
        if "_expanded" in name or not len(model.graph.node) or not case.data_sets:
            continue
        if not all(n.op_type in RULES and n.domain in harness.ONNX_DOMAINS for n in model.graph.node):
            continue
        need = harness.needs(model)
        if not (need.refusals or need.unsupported_types or need.unsupported_ops):
            out.append(name)
    return sorted(out)


def seed_model(name: str) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """The case's model with its shape operands made Constants, and its first data set's feeds."""
    case = harness._collected_node_cases()[name]
    names = [i.name for i in case.model.graph.input]
    feeds = {n: harness._as_value(x) for n, x in zip(names, case.data_sets[0][0], strict=False)}
    return harness.specialize(case.model, feeds)


# ----------------------------------------------------------------------------------------------------------
# Mutations


def _pick(rng: np.random.Generator, options: Any) -> Any:
    return options[int(rng.integers(len(options)))]


def _mutate_attribute(rng: np.random.Generator, node: onnx.NodeProto) -> str | None:
    if not node.attribute:
        return None
    a = _pick(rng, node.attribute)
    if a.type == AttributeProto.INT:
        a.i = _pick(rng, [-1, -2, 0, 1, 2, 3, 7, 100, 1 << 40, -(1 << 40), a.i + 1, a.i - 1])
        return f"{a.name}={a.i}"
    if a.type == AttributeProto.FLOAT:
        a.f = _pick(rng, [float("nan"), float("inf"), -float("inf"), -1.0, 0.0, 1e30, -0.5])
        return f"{a.name}={a.f}"
    if a.type == AttributeProto.INTS:
        values = list(a.ints)
        how = int(rng.integers(6))
        if how == 0:
            values.append(1)
        elif how == 1:
            values = values[:-1]
        elif how == 2:
            values = []
        elif how in (3, 4) and values:
            values[int(rng.integers(len(values)))] = -int(rng.integers(1, 4)) if how == 3 else 0
        else:
            values = [v + 5 for v in values] or [9]
        del a.ints[:]
        a.ints.extend(values)
        return f"{a.name}={values}"
    if a.type == AttributeProto.FLOATS:
        values = list(a.floats)
        values = [float("nan"), *values[1:]] if values and rng.random() < 0.5 else values[:-1]
        del a.floats[:]
        a.floats.extend(values)
        return f"{a.name}={values}"
    if a.type == AttributeProto.STRING:
        a.s = _pick(rng, [b"bogus", b"", b"SAME_LOWER", b"VALID", b"NOTSET", b"reflect", b"nearest", b"linear"])
        return f"{a.name}={a.s!r}"
    if a.type == AttributeProto.TENSOR:
        old = numpy_helper.to_array(a.t)
        flat = old.reshape(-1)
        new = flat[:-1] if rng.random() < 0.5 else np.concatenate([flat, flat[:1]])
        a.t.CopyFrom(numpy_helper.from_array(new.astype(old.dtype), a.t.name))
        return f"{a.name}=tensor{new.shape}"
    return None


def _mutate_constant(rng: np.random.Generator, model: onnx.ModelProto) -> str | None:
    constants = [
        n
        for n in model.graph.node
        if n.op_type == "Constant" and n.attribute and n.attribute[0].type == AttributeProto.TENSOR
    ]
    if not constants:
        return None
    node = _pick(rng, constants)
    old = numpy_helper.to_array(node.attribute[0].t)
    if old.dtype.kind not in "iuf":
        return None
    flat = old.reshape(-1).copy()
    how = int(rng.integers(5))
    if how == 0 and flat.size:
        flat[int(rng.integers(flat.size))] = -int(rng.integers(1, 5))
        new = flat.reshape(old.shape)
    elif how == 1 and flat.size:
        big = (1 << 33) if old.dtype.itemsize == 8 else 30000
        flat[int(rng.integers(flat.size))] = 255 if old.dtype.kind == "u" else _pick(rng, [1000, big, 0])
        new = flat.reshape(old.shape)
    elif how == 2:
        new = flat[:-1]
    elif how == 3:
        new = np.concatenate([flat, flat[:1] if flat.size else np.ones(1, old.dtype)])
    else:
        new = flat.reshape(old.shape)[..., None] if old.ndim else flat
    node.attribute[0].t.CopyFrom(numpy_helper.from_array(new.astype(old.dtype), node.attribute[0].t.name))
    return f"Constant {node.output[0]} -> {new.tolist()}"


def mutate(name: str, k: int) -> tuple[onnx.ModelProto, dict[str, Any], str] | None:
    """Mutant `k` of seed `name`, the seed's feeds and what changed; None where the drawn change cannot apply."""
    model, feeds = seed_model(name)
    model = copy.deepcopy(model)
    rng = np.random.default_rng(zlib.crc32(f"{name}/{k}".encode()))
    targets = [i for i, n in enumerate(model.graph.node) if not n.name.endswith("_known")]
    node = model.graph.node[_pick(rng, targets or range(len(model.graph.node)))]
    initialized = {t.name for t in model.graph.initializer}
    graph_inputs = [vi for vi in model.graph.input if vi.name not in initialized]
    kind = _pick(
        rng, ["attr", "attr", "drop_attr", "drop_input", "add_input", "shape", "shape", "type", "type", "const"]
    )
    what: str | None = None
    if kind == "attr":
        what = _mutate_attribute(rng, node)
    elif kind == "drop_attr" and node.attribute:
        i = int(rng.integers(len(node.attribute)))
        what = f"drop attribute {node.attribute[i].name}"
        del node.attribute[i]
    elif kind == "drop_input" and node.input:
        if rng.random() < 0.5:
            what = f"drop input {node.input[-1]}"
            del node.input[-1]
        else:
            i = int(rng.integers(len(node.input)))
            what = f"blank input {i}"
            node.input[i] = ""
    elif kind == "add_input" and graph_inputs:
        extra = copy.deepcopy(_pick(rng, graph_inputs))
        what = f"add an input like {extra.name}"
        extra.name = "extra_input"
        model.graph.input.append(extra)
        node.input.append("extra_input")
    elif kind == "shape" and graph_inputs:
        vi = _pick(rng, graph_inputs)
        dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        how = int(rng.integers(4))
        if how == 0:
            dims.append(2)
        elif how == 1 and dims:
            dims = dims[1:]
        elif dims:
            j = int(rng.integers(len(dims)))
            dims[j] = dims[j] + 1 if how == 2 else int(rng.integers(2))
        else:
            dims = [3]
        vi.type.tensor_type.ClearField("shape")
        vi.type.tensor_type.shape.SetInParent()
        for d in dims:
            vi.type.tensor_type.shape.dim.add().dim_value = d
        what = f"input {vi.name} of shape {dims}"
    elif kind == "type" and graph_inputs:
        vi = _pick(rng, graph_inputs)
        elem = _pick(rng, ELEMENT_TYPES)
        if elem == vi.type.tensor_type.elem_type:
            return None
        vi.type.tensor_type.elem_type = elem
        what = f"input {vi.name} of type {TensorProto.DataType.Name(elem)}"
    elif kind == "const":
        what = _mutate_constant(rng, model)
    if what is None:
        return None
    return model, feeds, f"{node.op_type} {what}"


def _shape_inference_would_crash(model: onnx.ModelProto) -> bool:
    """onnx's C++ shape inference aborts the process on a Split whose num_outputs disagrees with its outputs."""
    for node in model.graph.node:
        for a in node.attribute:
            if node.op_type == "Split" and a.name == "num_outputs" and a.i != len(node.output):
                return True
    return False


def declare_outputs(model: onnx.ModelProto) -> None:
    """Re-derive the graph outputs' declared types by shape inference (a mutation may change them)."""
    if _shape_inference_would_crash(model):
        return
    probe = copy.deepcopy(model)
    for o in probe.graph.output:
        o.ClearField("type")
    del probe.graph.value_info[:]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            inferred = onnx.shape_inference.infer_shapes(probe, strict_mode=True)
    except Exception:
        return
    known = {vi.name: vi for vi in (*inferred.graph.value_info, *inferred.graph.output)}
    for o in model.graph.output:
        vi = known.get(o.name)
        if vi is not None and vi.type.tensor_type.elem_type:
            o.type.CopyFrom(vi.type)
    del model.graph.value_info[:]


def feeds_for(model: onnx.ModelProto, given: dict[str, Any], rng: np.random.Generator) -> dict[str, np.ndarray] | None:
    """The seed's feed where it still fits the declared input (converted between number types), else random."""
    initialized = {t.name for t in model.graph.initializer}
    out = {}
    for vi in model.graph.input:
        if vi.name in initialized:
            continue
        t = vi.type.tensor_type
        if t.elem_type not in harness._NP_OF:
            return None
        shape = tuple(d.dim_value for d in t.shape.dim)
        dtype = np.dtype(harness._NP_OF[t.elem_type])
        seed_value = given.get(vi.name)
        fits = isinstance(seed_value, np.ndarray) and seed_value.shape == shape
        if fits and (seed_value.dtype == dtype or (seed_value.dtype.kind in "iu" and dtype.kind in "iuf")):
            out[vi.name] = seed_value.astype(dtype)
        elif fits and seed_value.dtype.kind == "f" and dtype.kind == "f":
            out[vi.name] = seed_value.astype(dtype)
        else:
            out[vi.name] = harness.random_input(vi, rng)
    return out


# ----------------------------------------------------------------------------------------------------------
# The oracle


def tolerances(dtype: np.dtype) -> tuple[float, float]:
    if dtype == np.float16:
        return 1e-2, 1e-3
    if dtype == ml_dtypes.bfloat16:
        return 3e-2, 1e-2
    return 1e-4, 1e-5


def agree(got: list[np.ndarray], want: list[Any]) -> str | None:
    """Why `got` differs from `want` (count, dtype, shape, values), or None."""
    try:
        assert_same(got, want, tolerance=tolerances)
    except AssertionError as err:
        return " ".join(str(err).split())[:300]
    return None


def _reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[Any] | None:
    from onnx.reference import ReferenceEvaluator

    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            return list(ReferenceEvaluator(model).run(None, feeds))
    except Exception:
        return None


def check_mutant(name: str, k: int) -> tuple[str, str]:
    """(outcome, detail): 'refused', 'built' (onnxruntime declined the mutant), 'match', 'ort-deviates',
    'run-refused' (the module's DataError named input values the operator does not define), or a failure:
    'raw' (a Python exception from the build), 'run-raw' (any other from the generated module), 'mismatch'."""
    mutant = mutate(name, k)
    if mutant is None:
        return "none", ""
    model, given, what = mutant
    declare_outputs(model)
    try:
        built = build_for(model)
    except LoamError:
        return "refused", what
    except Exception as err:
        frame = traceback.extract_tb(err.__traceback__)[-1]
        return "raw", f"{what}: {harness.first_line(err)} at {frame.filename}:{frame.lineno}"
    feeds = feeds_for(model, given, np.random.default_rng(k))
    if feeds is None or _shape_inference_would_crash(model):
        return "built", what
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            onnx.checker.check_model(model, full_check=True)
        want = run_onnxruntime(model, feeds)
    except Exception:
        return "built", what
    try:
        got = run_built(built, feeds)
    except built.module.DataError:  # values the operator does not define (onnxruntime may read past them)
        return "run-refused", what
    except Exception as err:
        return "run-raw", f"{what}: {harness.first_line(err)}"
    why = agree(got, want)
    if why is None:
        return "match", what
    reference = _reference(model, feeds)
    if reference is not None and agree(got, reference) is None:
        return "ort-deviates", what
    return "mismatch", f"{what}: {why}"


@pytest.mark.parametrize("shard", range(SHARDS))
def test_mutants_build_or_are_refused_and_match(shard: int) -> None:
    jobs = [(name, k) for name in seeds() for k in range(MUTANTS_PER_SEED)][shard::SHARDS]
    outcomes: dict[str, int] = {}
    failures = []
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        for name, k in jobs:
            outcome, detail = check_mutant(name, k)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            if outcome in ("raw", "run-raw", "mismatch"):
                failures.append(f"{name} #{k} ({outcome}): {detail}")
    assert not failures, "\n".join(failures)
    built = sum(outcomes.get(o, 0) for o in ("built", "match", "ort-deviates"))
    compared = outcomes.get("match", 0) + outcomes.get("ort-deviates", 0)
    assert built >= MIN_BUILT // SHARDS and compared >= MIN_COMPARED // SHARDS, outcomes
