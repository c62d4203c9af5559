"""fuse-attention: an export's attention chain becomes one `kernel.attention` call, with onnxruntime's numbers.

Two blocks: the grouped-query block of test_grouped_heads (keys and values repeated per group, an additive
mask), and GPT-2's (a causal Where with -FLT_MAX, then an additive padding mask).  Each must build to one
attention kernel per chain (a build note naming its nodes, no softmax or repeat left in the module) and give
onnxruntime's outputs for one query and for more queries than the compiled kernel takes (BLAS's path), with
the compiled path on and off.  A row whose every key is masked gives what onnxruntime's chain gives: V's
mean where only the Where masks it (every score -FLT_MAX), NaN where the padding mask adds -FLT_MAX too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from loam.dialects.expr import Expr
from loam.passes.fuse_attention import ScoreForm, score_form
from loam.runtime.kernels.compiled import set_compiled
from loam.testing import assert_same, build_for, run_built, run_onnxruntime
from tests.passes.test_grouped_heads import GROUPS, HEAD, REPEATS, attention_block, feeds_for

FLOAT_MIN = float(np.finfo(np.float32).min)


def grouped_block() -> onnx.ModelProto:
    """test_grouped_heads' block with its scale a Constant node (as exports give it), which the build folds
    into the score; a scale read from a weight stays a kernel operand, and the chain its kernels."""
    model = attention_block()
    (scale,) = [t for t in model.graph.initializer if t.name == "scale"]
    model.graph.initializer.remove(scale)
    model.graph.node.insert(0, helper.make_node("Constant", [], ["scale"], value=scale))
    return model


def causal_block(heads: int = 2) -> onnx.ModelProto:
    """GPT-2's attention: softmax(Where(causal, Q K^T / sqrt(HEAD), -FLT_MAX) + mask) V, one head per key head."""
    f32 = TensorProto.FLOAT
    nodes = [
        helper.make_node("Constant", [], ["scale"], value=helper.make_tensor("s", f32, [], [float(np.sqrt(HEAD))])),
        helper.make_node("Constant", [], ["lowest"], value=helper.make_tensor("m", f32, [], [FLOAT_MIN])),
        helper.make_node("Transpose", ["k"], ["k_t"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "k_t"], ["scores"]),
        helper.make_node("Div", ["scores", "scale"], ["scaled"]),
        helper.make_node("Where", ["causal", "scaled", "lowest"], ["kept"]),
        helper.make_node("Add", ["kept", "mask"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["probs"], axis=3),
        helper.make_node("MatMul", ["probs", "v"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "causal",
        [
            helper.make_tensor_value_info("q", f32, ["B", heads, "S", HEAD]),
            helper.make_tensor_value_info("k", f32, ["B", heads, "L", HEAD]),
            helper.make_tensor_value_info("v", f32, ["B", heads, "L", HEAD]),
            helper.make_tensor_value_info("causal", TensorProto.BOOL, [1, 1, "S", "L"]),
            helper.make_tensor_value_info("mask", f32, ["B", 1, 1, "L"]),
        ],
        [helper.make_tensor_value_info("y", f32, ["B", heads, "S", HEAD])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def causal_feeds(batch: int, queries: int, keys: int, padded: int) -> dict[str, np.ndarray]:
    """Queries at the last positions of `keys`; the first `padded` keys of batch row 0 are padding."""
    rng = np.random.default_rng(batch * 100 + queries * 10 + keys)
    causal = np.tril(np.ones((keys, keys), bool))[keys - queries :][None, None]
    mask = np.zeros((batch, 1, 1, keys), np.float32)
    mask[0, ..., :padded] = FLOAT_MIN
    return {
        "q": rng.standard_normal((batch, 2, queries, HEAD)).astype(np.float32),
        "k": rng.standard_normal((batch, 2, keys, HEAD)).astype(np.float32),
        "v": rng.standard_normal((batch, 2, keys, HEAD)).astype(np.float32),
        "causal": causal,
        "mask": mask,
    }


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize(("batch", "queries", "keys"), [(1, 1, 7), (2, 1, 33), (2, 5, 5), (1, 20, 40)])
def test_grouped_attention_is_one_kernel_with_onnxruntimes_numbers(
    batch: int, queries: int, keys: int, compiled: bool
) -> None:
    model = grouped_block()
    result = build_for(model)
    (note,) = [n for n in result.notes if "one attention kernel" in n]
    assert note.startswith("nodes 'scores', 'scaled', 'masked', 'probs', 'y': one attention kernel"), note
    assert "kernel_attention(" in result.source and "_softmax(" not in result.source and "_reach(" not in result.source
    assert not any(n.startswith("grouped heads") for n in result.notes)  # nothing left to regroup
    feeds = feeds_for(batch, queries, keys)
    before = set_compiled(compiled)
    try:
        got = run_built(result, feeds)
    finally:
        set_compiled(before)
    assert got[0].shape == (batch, GROUPS * REPEATS, queries, HEAD)
    assert_same(got, run_onnxruntime(model, feeds), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize(
    ("batch", "queries", "keys", "padded"), [(1, 1, 9, 0), (2, 1, 9, 3), (2, 6, 6, 2), (1, 17, 30, 0)]
)
def test_a_causal_block_is_one_kernel_with_onnxruntimes_numbers(
    batch: int, queries: int, keys: int, padded: int, compiled: bool
) -> None:
    model = causal_block()
    result = build_for(model)
    (note,) = [n for n in result.notes if "one attention kernel" in n]
    assert note.startswith("nodes 'scores', 'scaled', 'kept', 'masked', 'probs', 'y': one attention kernel")
    feeds = causal_feeds(batch, queries, keys, padded)
    before = set_compiled(compiled)
    try:
        got = run_built(result, feeds)
    finally:
        set_compiled(before)
    assert_same(got, run_onnxruntime(model, feeds), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("compiled", [True, False])
def test_fully_masked_rows_are_onnxruntimes(compiled: bool) -> None:
    """Query 0 sees no key through the causal mask: every score -FLT_MAX, a uniform softmax (V's mean); in
    batch row 1 the padding adds -FLT_MAX to every key too: every score -inf, NaN in onnxruntime and here."""
    model = causal_block()
    result = build_for(model)
    feeds = causal_feeds(2, 3, 5, 0)
    feeds["causal"][..., 0, :] = False
    feeds["mask"][1] = FLOAT_MIN
    before = set_compiled(compiled)
    try:
        (got,) = run_built(result, feeds)
    finally:
        set_compiled(before)
    (want,) = run_onnxruntime(model, feeds)
    np.testing.assert_allclose(got[0, :, 0], feeds["v"][0].mean(axis=1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)  # NaN exactly where onnxruntime's is
    assert np.isnan(got[1]).all() == np.isnan(want[1]).all()


RUN_WITHOUT_NUMBA = r"""
import importlib.util, json, sys
sys.modules["numba"] = None  # `import numba` raises ImportError, as where it is not installed
import numpy as np
spec = importlib.util.spec_from_file_location("fused_attention_module", sys.argv[1])
module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
feeds = {k: np.array(v, dtype=d) for k, (v, d) in json.loads(sys.argv[2]).items()}
y = module.forward(module.Weights(), *(feeds[name] for name, _, _ in module.INPUTS))
print(json.dumps({"y": y.tolist(), "compiled": module._CompiledAttention.get() is not None,
                  "imported": sorted({m.split(".")[0] for m, v in sys.modules.items() if v is not None}
                                     - set(sys.stdlib_module_names))}))
"""


def test_a_fused_module_runs_on_numpy_alone_where_numba_is_absent(tmp_path: Path) -> None:
    """The module imports only numpy there, computes with the numpy kernel, and gives the compiled numbers."""
    model = causal_block()
    result = build_for(model)
    path = tmp_path / "fused_attention_module.py"
    path.write_text(result.source, encoding="utf-8")
    feeds = causal_feeds(2, 1, 9, 3)
    given = json.dumps({k: (v.tolist(), str(v.dtype)) for k, v in feeds.items()})
    done = subprocess.run(
        [sys.executable, "-c", RUN_WITHOUT_NUMBA, str(path), given], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert not report["compiled"]
    assert [name for name in report["imported"] if not name.startswith("_")] == ["numpy"]
    (compiled,) = run_built(result, feeds)
    np.testing.assert_allclose(np.array(report["y"], np.float32), compiled, rtol=1e-5, atol=2e-6)


def test_score_forms() -> None:
    s, a, b = Expr.operand(0), Expr.operand(1), Expr.operand(2)
    assert score_form(s / 8.0 + a) == ScoreForm(8.0, True, None, 0.0, 1)
    assert score_form(a + s * 0.5) == ScoreForm(0.5, False, None, 0.0, 1)
    assert score_form(Expr.select(a, s / 4.0, -1.0) + b) == ScoreForm(4.0, True, 1, -1.0, 2)
    assert score_form(s) == ScoreForm(1.0, False, None, 0.0, None)
    assert score_form(s * s) is None  # the product twice
    assert score_form(s / a) is None  # a scale that is not a constant
    assert score_form((s + a) / 8.0) is None  # a bias before the scale
    assert score_form(Expr.select(a, s, b)) is None  # a fill that is not a constant
