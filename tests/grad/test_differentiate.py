"""The `differentiate` pass: a built module also returns its weights' gradients, on numpy and on WGSL.

The example MLP (Gemm, Relu, MatMul + Add, Relu, Gemm) built with `grad=()` takes the upstream
gradient `grad.y` after its input and returns `grad.W` for each weight after `y`.  The oracle is the
MLP's backward pass derived by hand and computed in float64 from the same weights, itself checked
against central finite differences of the float64 forward.  A kernel with no grad clause yet stops the
build naming its node; so do a weight name the program does not read and a weight no gradient reaches.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from loam.core.errors import LoamError
from loam.driver.draft import draft_layout
from loam.driver.options import Options
from loam.driver.pipeline import build

ROOT = Path(__file__).resolve().parents[2]
MLP = ROOT / "examples" / "mlp"
OPTIONS = Options.from_toml(MLP / "loam.toml")
WEIGHTS = ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias")


def forward64(p: dict[str, np.ndarray], x: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    h1 = x @ p["fc1.weight"].T + p["fc1.bias"]
    a1 = np.maximum(h1, 0)
    h2 = a1 @ p["fc2.weight"] + p["fc2.bias"]
    a2 = np.maximum(h2, 0)
    return a2 @ p["fc3.weight"] + p["fc3.bias"], [h1, a1, h2, a2]


def backward64(p: dict[str, np.ndarray], x: np.ndarray, g: np.ndarray) -> dict[str, np.ndarray]:
    _, (h1, a1, h2, a2) = forward64(p, x)
    dh2 = (g @ p["fc3.weight"].T) * (h2 > 0)
    dh1 = (dh2 @ p["fc2.weight"].T) * (h1 > 0)
    return {
        "fc3.weight": a2.T @ g, "fc3.bias": g.sum(0), "fc2.weight": a1.T @ dh2, "fc2.bias": dh2.sum(0),
        "fc1.weight": dh1.T @ x, "fc1.bias": dh1.sum(0), "x": dh1 @ p["fc1.weight"],
    }  # fmt: skip


def params64(module: object) -> dict[str, np.ndarray]:
    weights = module.Weights.load_file([str(c) for c in OPTIONS.checkpoints])  # type: ignore[attr-defined]
    return {name: np.asarray(getattr(weights, attr), np.float64) for name, attr, *_ in module.Weights._SPECS}  # type: ignore[attr-defined]


def test_the_hand_derived_oracle_is_the_finite_difference_gradient() -> None:
    module = build(MLP / "mlp.onnxtext", options=OPTIONS).module
    p = params64(module)
    rng = np.random.default_rng(4)
    x, g = rng.standard_normal((4, 8)), rng.standard_normal((4, 3))
    grads = backward64(p, x, g)
    for name in WEIGHTS:
        for index in list(np.ndindex(p[name].shape))[:: max(1, p[name].size // 7)]:
            up, down = {**p, name: p[name].copy()}, {**p, name: p[name].copy()}
            up[name][index] += 1e-6
            down[name][index] -= 1e-6
            numeric = ((forward64(up, x)[0] - forward64(down, x)[0]) * g).sum() / 2e-6
            assert numeric == pytest.approx(grads[name][index], rel=1e-5, abs=1e-7), (name, index)
    for index in np.ndindex(x.shape):  # the input's gradient too
        step = np.zeros_like(x)
        step[index] = 1e-6
        numeric = ((forward64(p, x + step)[0] - forward64(p, x - step)[0]) * g).sum() / 2e-6
        assert numeric == pytest.approx(grads["x"][index], rel=1e-5, abs=1e-7), ("x", index)


@pytest.mark.parametrize("backend", ["numpy", "wgsl"])
def test_the_mlp_returns_every_weights_gradient(backend: str) -> None:
    if backend == "wgsl":
        pytest.importorskip("wgpu")
    fuse = "dispatch" if backend == "wgsl" else "memory"
    result = build(MLP / "mlp.onnxtext", options=OPTIONS, grad=(), backend=backend, fuse=fuse)
    module = result.module
    assert [name for name, _, _ in module.INPUTS] == ["x", "grad.y"]
    assert list(module.OUTPUTS) == ["y", *(f"grad.{w}" for w in WEIGHTS)]
    weights = module.Weights.load_file([str(c) for c in OPTIONS.checkpoints])
    rng = np.random.default_rng(5)
    x, g = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((4, 3)).astype(np.float32)
    out = module.forward(weights, x, g)
    p = params64(module)
    np.testing.assert_allclose(out[0], forward64(p, x.astype(np.float64))[0], rtol=1e-5, atol=1e-5)
    want = backward64(p, x.astype(np.float64), g.astype(np.float64))
    for k, name in enumerate(WEIGHTS, start=1):
        assert out[k].dtype == np.float32 and out[k].shape == p[name].shape
        np.testing.assert_allclose(out[k], want[name], rtol=1e-5, atol=1e-5, err_msg=name)


def test_grad_of_picks_the_weights_and_refuses_a_name_the_program_does_not_read() -> None:
    module = build(MLP / "mlp.onnxtext", options=OPTIONS, grad=("fc3.weight",)).module
    assert list(module.OUTPUTS) == ["y", "grad.fc3.weight"]
    with pytest.raises(
        LoamError, match=r"grad_of names 'fc9.weight', which the program reads as no float weight or input"
    ):
        build(MLP / "mlp.onnxtext", options=OPTIONS, grad=("fc9.weight",))


@pytest.mark.parametrize("backend", ["numpy", "wgsl"])
def test_grad_of_an_input_gives_its_gradient_in_grads_by_forwards_parameter(backend: str) -> None:
    """d(sum(y * g))/dx from the hand-derived float64 backward."""
    if backend == "wgsl":
        pytest.importorskip("wgpu")
    fuse = "dispatch" if backend == "wgsl" else "memory"
    module = build(MLP / "mlp.onnxtext", options=OPTIONS, grad=("x", "fc1.bias"), backend=backend, fuse=fuse).module
    assert list(module.OUTPUTS) == ["y", "grad.fc1.bias", "grad.x"] and module.Grads._fields == ("fc1_bias", "x")
    weights = module.Weights.load_file([str(c) for c in OPTIONS.checkpoints])
    rng = np.random.default_rng(7)
    x, g = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((4, 3)).astype(np.float32)
    _, grads = module.forward_backward(weights, x, g)
    want = backward64(params64(module), x.astype(np.float64), g.astype(np.float64))
    np.testing.assert_allclose(grads.x, want["x"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(grads.fc1_bias, want["fc1.bias"], rtol=1e-4, atol=1e-5)


def test_a_kernel_with_no_grad_clause_yet_stops_the_build_naming_its_node() -> None:
    w = helper.make_tensor("w", TensorProto.FLOAT, [3, 1], [1.0, 2.0, 3.0])
    nodes = [helper.make_node("Mul", ["x", "w"], ["xw"]), helper.make_node("Unique", ["xw"], ["y"], name="distinct")]
    graph = helper.make_graph(
        nodes,
        "unique",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["distinct"])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(LoamError, match=r"kernel\.unique 'distinct': no grad clause for this kernel yet"):
        build(model, options=draft_layout(model).options(None), grad=())


@pytest.mark.parametrize(
    ("equation", "shape", "out", "message"),
    [
        ("ii->i", [3, 3], [3], r"kernel\.einsum 'diag': no grad clause for a letter repeated in operand 0's term 'ii'"),
    ],
)
def test_an_einsum_its_clause_does_not_cover_stops_the_build_naming_why(
    equation: str, shape: list[int], out: list[int], message: str
) -> None:
    """A diagonal and a broadcast within the equation are refused, never differentiated wrong."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [3, 2], [1.0] * 6)
    nodes = [helper.make_node("Einsum", ["x", "w"][: equation.count(",") + 1], ["y"], name="diag", equation=equation)]
    graph = helper.make_graph(
        nodes,
        "einsum",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(LoamError, match=message):
        build(model, options=draft_layout(model).options(None), grad=("x",))


DIGITS = ROOT / "examples" / "digits"


@pytest.mark.parametrize("backend", ["numpy", "wgsl"])
def test_the_digits_cnn_gradients_are_torch_autograds(backend: str) -> None:
    """Convolutions, inference batch norm, max pooling, Gemm, MatMul and Softmax: every weight's gradient
    equals torch's (scripts/make_grad_oracles.py wrote tests/grad/digits_grads.npz)."""
    if backend == "wgsl":
        pytest.importorskip("wgpu")
    options = Options.from_toml(DIGITS / "loam.toml")
    fuse = "dispatch" if backend == "wgsl" else "memory"
    module = build(DIGITS / "digits.onnxtext", options=options, grad=(), backend=backend, fuse=fuse).module
    weights = module.Weights.load_file([str(c) for c in options.checkpoints])
    x = np.load(DIGITS / "test_images.npy").astype(np.float32)[:450].reshape(450, 1, 8, 8)
    with np.load(Path(__file__).parent / "digits_grads.npz") as oracle:
        want = {k: oracle[k] for k in oracle.files}
    out = module.forward(weights, x, want["g_logits"], want["g_probs"])
    got = dict(zip(module.OUTPUTS, out, strict=True))
    np.testing.assert_allclose(got["logits"], want["logits"], rtol=1e-4, atol=1e-4)
    names = [k for k in want if k.startswith("grad.")]
    assert sorted(k for k in got if k.startswith("grad.")) == sorted(names)
    for name in names:
        scale = max(1.0, float(np.abs(want[name]).max()))
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4 * scale, err_msg=name)


def test_a_weight_no_gradient_reaches_is_refused_by_name(tmp_path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [
            helper.make_node("Greater", ["x", "threshold"], ["mask"], name="compare"),
            helper.make_node("Cast", ["mask"], ["maskf"], name="cast", to=TensorProto.FLOAT),
            helper.make_node("Mul", ["x", "maskf"], ["y"], name="gate"),
        ],
        "gate",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(np.zeros(3, np.float32), "threshold")],
    )
    path = tmp_path / "gate.onnx"
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    from loam.driver.draft import draft_layout

    options = draft_layout(path).options(Options())
    with pytest.raises(LoamError, match=r"no gradient reaches weight 'threshold' from the outputs: every path from "
                       r"it to the outputs passes kernel\.\w+ 'compare', which has no derivative"):  # fmt: skip
        build(path, options=options, grad=())


def test_by_default_the_weights_no_gradient_reaches_are_left_out_with_a_note() -> None:
    """A training-mode batch norm's running statistics are float weights its Y does not read: the default
    (every float weight) leaves them out of Grads and says so; naming one is refused."""
    c = 3
    weights = {"scale": np.ones(c), "bias": np.zeros(c), "running_mean": np.zeros(c), "running_var": np.ones(c)}
    graph = helper.make_graph(
        [
            helper.make_node(
                "BatchNormalization", ["x", *weights], ["y", "mean_next", "var_next"], name="bn", training_mode=1
            )
        ],
        "bn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, c])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, c])],
        [helper.make_tensor(n, TensorProto.FLOAT, [c], v.tolist()) for n, v in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    options = draft_layout(model).options(None)
    built = build(model, options=options, grad=())
    assert built.module.Grads._fields == ("scale", "bias")
    left = [n for n in built.notes if "left out of Grads" in n]
    assert left == [
        "differentiate: no gradient reaches 2 float weights, left out of Grads: 'running_mean', 'running_var' "
        "(the first: nothing computed from it reaches the outputs)"
    ], built.notes
    with pytest.raises(LoamError, match=r"no gradient reaches weight 'running_var' from the outputs"):
        build(model, options=options, grad=("scale", "running_var"))


def test_loam_build_grad_writes_the_module_and_replays_with_loam_opt(tmp_path: Path) -> None:
    import subprocess
    import sys

    def loam(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "loam.tools.loam_main", *args], capture_output=True, text=True,
                              timeout=300)  # fmt: skip

    common = [str(MLP / "mlp.onnxtext"), "--options", str(MLP / "loam.toml"), "--no-cache"]
    built = loam("build", *common, "--grad", "--grad-of", "fc3.bias,fc1.weight", "-o", str(tmp_path / "g.py"))
    assert built.returncode == 0, built.stderr
    text = (tmp_path / "g.py").read_text(encoding="utf-8")
    assert "OUTPUTS = ('y', 'grad.fc1.weight', 'grad.fc3.bias')" in text
    pipeline = loam("build", *common, "--grad", "--grad-of", "fc3.bias,fc1.weight", "--print-pipeline")
    assert 'lower-to-kernel,differentiate{of="fc3.bias","fc1.weight"},pack-quantized' in pipeline.stdout
    refused = loam("build", *common, "--grad-of", "fc3.bias", "-o", str(tmp_path / "h.py"))
    assert refused.returncode == 2 and "give --grad too" in refused.stderr
    # The options file says the same: grad = true, grad_of = [...]; a flag replaces it.
    toml = (MLP / "loam.toml").read_text(encoding="utf-8").replace('checkpoint = "', f'checkpoint = "{MLP}/')
    (tmp_path / "grad.toml").write_text('grad = true\ngrad_of = ["fc2.bias"]\n' + toml, encoding="utf-8")
    from_file = [str(MLP / "mlp.onnxtext"), "--options", str(tmp_path / "grad.toml"), "--no-cache"]
    assert loam("build", *from_file, "-o", str(tmp_path / "f.py")).returncode == 0
    assert "OUTPUTS = ('y', 'grad.fc2.bias')" in (tmp_path / "f.py").read_text(encoding="utf-8")
    assert loam("build", *from_file, "--grad", "--grad-of", "fc3.bias", "-o", str(tmp_path / "f.py")).returncode == 0
    assert "OUTPUTS = ('y', 'grad.fc3.bias')" in (tmp_path / "f.py").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"grad_of": ["fc1.weight"]}, "key 'grad_of' names the weights 'grad' differentiates: set grad = true too"),
        ({"grad": "yes"}, "key 'grad' must be true or false, got a string ('yes')"),
        ({"grad": True, "grad_of": "fc1.weight"}, "key 'grad_of' must be an array of weight names"),
    ],
)
def test_the_options_files_grad_keys_are_checked(table: dict[str, object], message: str) -> None:
    with pytest.raises(LoamError, match=re.escape(message)):
        Options.from_mapping(table, source="grad.toml")
    assert Options.from_mapping({"grad": True}).grad == ()
    assert Options.from_mapping({"grad": False, "layout": []}).grad is None


def test_forward_backward_backward_and_an_sgd_step_as_training_code_reads_them() -> None:
    module = build(MLP / "mlp.onnxtext", options=OPTIONS, grad=()).module
    weights = module.Weights.load_file([str(c) for c in OPTIONS.checkpoints])
    rng = np.random.default_rng(6)
    x, target = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((4, 3)).astype(np.float32)
    y0 = module.forward(weights, x, np.zeros((4, 3), np.float32))[0]
    g = (2 * (y0 - target) / y0.size).astype(np.float32)  # d(mean squared error)/dy
    y, grads = module.forward_backward(weights, x, g)
    every = module.forward(weights, x, g)
    np.testing.assert_array_equal(y, every[0])
    assert grads._fields == ("fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias", "fc3_weight", "fc3_bias")
    for got, want in zip(grads, every[1:], strict=True):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(module.backward(weights, x, g).fc2_bias, grads.fc2_bias)
    stepped = weights.updated(grads, 0.05)
    np.testing.assert_allclose(stepped.fc3_weight, weights.fc3_weight - 0.05 * grads.fc3_weight, rtol=1e-6)
    assert stepped.fc3_weight.dtype == np.float32 and weights.fc3_weight is not stepped.fc3_weight

    def loss(w: object) -> float:
        out = module.forward(w, x, np.zeros((4, 3), np.float32))[0]
        return float(((out - target) ** 2).mean())

    assert loss(stepped) < loss(weights)  # a step against the gradient lowers the loss it is the gradient of


@pytest.mark.parametrize("backend", ["numpy", "wgsl"])
def test_an_embedding_lookup_adds_each_rows_gradient_into_the_row_it_read(backend: str, tmp_path: Path) -> None:
    """Gather along axis 0 (repeated and negative ids included): dE[v] is the sum of g over the positions
    that read row v, as numpy's add.at computes it."""
    if backend == "wgsl":
        pytest.importorskip("wgpu")
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from loam.driver.draft import draft_layout

    table = np.random.default_rng(8).standard_normal((6, 4)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["embed", "ids"], ["rows"], name="lookup"),
         helper.make_node("Tanh", ["rows"], ["y"], name="squash")],
        "embedding",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5, 4])],
        [numpy_helper.from_array(table, "embed")],
    )  # fmt: skip
    path = tmp_path / "embedding.onnx"
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    fuse = "dispatch" if backend == "wgsl" else "memory"
    module = build(path, options=draft_layout(path).options(Options()), grad=(), backend=backend, fuse=fuse).module
    ids = np.array([[0, 3, 3, -1, 2], [5, 0, -6, 1, 3]], np.int64)  # -1 is row 5, -6 row 0
    g = np.random.default_rng(9).standard_normal((2, 5, 4)).astype(np.float32)
    y, grads = module.forward_backward(module.Weights.embedded(), ids, g)
    np.testing.assert_allclose(y, np.tanh(table[ids]), rtol=1e-5, atol=1e-6)
    want = np.zeros((6, 4))
    np.add.at(want, ids % 6, g * (1 - np.tanh(table[ids].astype(np.float64)) ** 2))
    np.testing.assert_allclose(grads.embed, want, rtol=1e-4, atol=1e-5)
