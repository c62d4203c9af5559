"""Train the digits CNN example and write examples/digits/ (dev-time only; the files are committed).

Why this script exists: the digits example must be a *trained* network, so Loam is shown computing
the numbers a real model computes (accuracy, not only agreement on random weights).  Training uses
numpy alone (manual forward and backward passes, im2col convolutions, Adam) so nothing beyond the
project's own dependencies is needed, except scikit-learn for its bundled 8x8 digits data set
(`pip install scikit-learn`; not a project dependency).

The network, exported to ONNX opset 17 with the batch fixed to the held-out split's size:

    x[450,1,8,8] -> Conv(1->8, 3x3, pad 1) -> BatchNormalization -> Relu -> MaxPool(2x2)
                 -> Conv(8->16, 3x3, pad 1) -> BatchNormalization -> Relu -> MaxPool(2x2)
                 -> Flatten -> Gemm(64->32, transB=1) -> Relu -> MatMul(32->10) + Add -> logits
                 -> Softmax -> probs

BatchNormalization is exported unfolded, with its running statistics.  Files written:

- `digits.onnxtext`: the model, printed by `onnx.printer`; initializers are external data in
- `digits.safetensors`: the weights by initializer name;
- `test_images.npy` (float32 [450,1,8,8], pixels / 16) and `test_labels.npy` (int64 [450]);
- `loam.toml`: the build options (checkpoint and axis names);
- `PROVENANCE.md`: data set, split, seed, epochs and the accuracies measured here.

Run: `python scripts/train_digits.py` (about 5 s).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnx.checker
import onnx.parser
import onnx.printer
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnx.external_data_helper import load_external_data_for_model, set_external_data
from safetensors.numpy import save_file
from safetensors_layout import safetensors_offsets

OUT = Path(__file__).resolve().parent.parent / "examples" / "digits"
SEED = 20240611
SPLIT_SEED = 0
TEST_SIZE = 0.25
EPOCHS = 30
BATCH = 32
LR = 3e-3
EPS = 1e-5
MOMENTUM = 0.9  # running statistics: running = MOMENTUM * running + (1 - MOMENTUM) * batch
CHECKPOINT = "digits.safetensors"
Params = dict[str, np.ndarray]


# ---------------------------------------------------------------------------------------------
# Layers: forward functions return (output, cache); backward functions take (grad, cache).


def im2col(x: np.ndarray) -> np.ndarray:
    """[N,C,H,W] -> [N, C*9, H*W]: the 3x3 neighbourhoods (zero padded by 1) as columns."""
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.empty((n, c, 3, 3, h, w), dtype=x.dtype)
    for i in range(3):
        for j in range(3):
            cols[:, :, i, j] = xp[:, :, i : i + h, j : j + w]
    return cols.reshape(n, c * 9, h * w)


def col2im(dcols: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The adjoint of im2col: scatter-add columns back onto the [N,C,H,W] input."""
    n, c, h, w = shape
    d = dcols.reshape(n, c, 3, 3, h, w)
    dxp = np.zeros((n, c, h + 2, w + 2), dtype=dcols.dtype)
    for i in range(3):
        for j in range(3):
            dxp[:, :, i : i + h, j : j + w] += d[:, :, i, j]
    return dxp[:, :, 1:-1, 1:-1]


def conv_forward(x: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, tuple]:
    n, _, h, w = x.shape
    cols = im2col(x)
    out = np.einsum("ok,nkp->nop", weight.reshape(weight.shape[0], -1), cols)
    return out.reshape(n, weight.shape[0], h, w), (x.shape, cols, weight)


def conv_backward(dout: np.ndarray, cache: tuple) -> tuple[np.ndarray, np.ndarray]:
    shape, cols, weight = cache
    d = dout.reshape(dout.shape[0], dout.shape[1], -1)
    dw = np.einsum("nop,nkp->ok", d, cols).reshape(weight.shape)
    dx = col2im(np.einsum("ok,nop->nkp", weight.reshape(weight.shape[0], -1), d), shape)
    return dx, dw


def bn_train(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> tuple[np.ndarray, tuple]:
    """Batch normalization with the batch's statistics (training mode)."""
    mean = x.mean(axis=(0, 2, 3))
    var = x.var(axis=(0, 2, 3))
    inv = 1.0 / np.sqrt(var + EPS)
    xhat = (x - mean[None, :, None, None]) * inv[None, :, None, None]
    y = gamma[None, :, None, None] * xhat + beta[None, :, None, None]
    return y, (xhat, inv, gamma, mean, var)


def bn_backward(dy: np.ndarray, cache: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    xhat, inv, gamma, _, _ = cache
    m = dy.shape[0] * dy.shape[2] * dy.shape[3]
    dgamma = (dy * xhat).sum(axis=(0, 2, 3))
    dbeta = dy.sum(axis=(0, 2, 3))
    dxhat = dy * gamma[None, :, None, None]
    dx = (
        inv[None, :, None, None]
        / m
        * (
            m * dxhat
            - dxhat.sum(axis=(0, 2, 3))[None, :, None, None]
            - xhat * (dxhat * xhat).sum(axis=(0, 2, 3))[None, :, None, None]
        )
    )
    return dx, dgamma, dbeta


def bn_eval(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, mean: np.ndarray, var: np.ndarray) -> np.ndarray:
    """BatchNormalization as ONNX computes it at inference (running statistics)."""
    scale = gamma / np.sqrt(var + EPS)
    return x * scale[None, :, None, None] + (beta - mean * scale)[None, :, None, None]


def pool_forward(x: np.ndarray) -> tuple[np.ndarray, tuple]:
    """2x2 max pooling, stride 2."""
    n, c, h, w = x.shape
    windows = x.reshape(n, c, h // 2, 2, w // 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(n, c, h // 2, w // 2, 4)
    which = windows.argmax(axis=-1)
    return np.take_along_axis(windows, which[..., None], axis=-1)[..., 0], (x.shape, which)


def pool_backward(dout: np.ndarray, cache: tuple) -> np.ndarray:
    (n, c, h, w), which = cache
    dwin = np.zeros((n, c, h // 2, w // 2, 4), dtype=dout.dtype)
    np.put_along_axis(dwin, which[..., None], dout[..., None], axis=-1)
    return dwin.reshape(n, c, h // 2, w // 2, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(n, c, h, w)


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


# ---------------------------------------------------------------------------------------------
# The network.


def init_params(rng: np.random.Generator) -> Params:
    """He-initialized weights; BatchNormalization starts as the identity."""

    def he(shape: tuple[int, ...], fan_in: int) -> np.ndarray:
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)

    return {
        "conv1.weight": he((8, 1, 3, 3), 9),
        "bn1.scale": np.ones(8, np.float32),
        "bn1.bias": np.zeros(8, np.float32),
        "conv2.weight": he((16, 8, 3, 3), 72),
        "bn2.scale": np.ones(16, np.float32),
        "bn2.bias": np.zeros(16, np.float32),
        "fc1.weight": he((32, 64), 64),  # Gemm transB=1: [out, in]
        "fc1.bias": np.zeros(32, np.float32),
        "fc2.weight": he((32, 10), 32) / 4,  # MatMul: [in, out]
        "fc2.bias": np.zeros(10, np.float32),
    }


def running_stats() -> Params:
    return {
        "bn1.mean": np.zeros(8, np.float32),
        "bn1.var": np.ones(8, np.float32),
        "bn2.mean": np.zeros(16, np.float32),
        "bn2.var": np.ones(16, np.float32),
    }


def train_step(p: Params, stats: Params, x: np.ndarray, labels: np.ndarray) -> tuple[float, Params]:
    """One forward/backward pass in training mode; updates `stats`, returns (loss, gradients)."""
    grads: Params = {}
    c1, k1 = conv_forward(x, p["conv1.weight"])
    b1, kb1 = bn_train(c1, p["bn1.scale"], p["bn1.bias"])
    r1 = np.maximum(b1, 0)
    m1, kp1 = pool_forward(r1)
    c2, k2 = conv_forward(m1, p["conv2.weight"])
    b2, kb2 = bn_train(c2, p["bn2.scale"], p["bn2.bias"])
    r2 = np.maximum(b2, 0)
    m2, kp2 = pool_forward(r2)
    flat = m2.reshape(m2.shape[0], -1)
    h = flat @ p["fc1.weight"].T + p["fc1.bias"]
    a = np.maximum(h, 0)
    logits = a @ p["fc2.weight"] + p["fc2.bias"]
    probs = softmax(logits)
    n = x.shape[0]
    loss = float(-np.log(probs[np.arange(n), labels] + 1e-12).mean())

    for bn, cache in (("bn1", kb1), ("bn2", kb2)):
        _, _, _, mean, var = cache
        m = n * cache[0].shape[2] * cache[0].shape[3]
        stats[f"{bn}.mean"] = (MOMENTUM * stats[f"{bn}.mean"] + (1 - MOMENTUM) * mean).astype(np.float32)
        unbiased = var * m / (m - 1)
        stats[f"{bn}.var"] = (MOMENTUM * stats[f"{bn}.var"] + (1 - MOMENTUM) * unbiased).astype(np.float32)

    dlogits = probs.copy()
    dlogits[np.arange(n), labels] -= 1
    dlogits /= n
    grads["fc2.weight"] = a.T @ dlogits
    grads["fc2.bias"] = dlogits.sum(axis=0)
    dh = (dlogits @ p["fc2.weight"].T) * (h > 0)
    grads["fc1.weight"] = dh.T @ flat
    grads["fc1.bias"] = dh.sum(axis=0)
    dm2 = (dh @ p["fc1.weight"]).reshape(m2.shape)
    db2 = pool_backward(dm2, kp2) * (b2 > 0)
    dc2, grads["bn2.scale"], grads["bn2.bias"] = bn_backward(db2, kb2)
    dm1, grads["conv2.weight"] = conv_backward(dc2, k2)
    db1 = pool_backward(dm1, kp1) * (b1 > 0)
    dc1, grads["bn1.scale"], grads["bn1.bias"] = bn_backward(db1, kb1)
    _, grads["conv1.weight"] = conv_backward(dc1, k1)
    return loss, grads


def forward_eval(p: Params, stats: Params, x: np.ndarray) -> np.ndarray:
    """The exported network's meaning in numpy (inference mode); returns the logits."""
    c1, _ = conv_forward(x, p["conv1.weight"])
    m1, _ = pool_forward(np.maximum(bn_eval(c1, p["bn1.scale"], p["bn1.bias"], stats["bn1.mean"], stats["bn1.var"]), 0))
    c2, _ = conv_forward(m1, p["conv2.weight"])
    m2, _ = pool_forward(np.maximum(bn_eval(c2, p["bn2.scale"], p["bn2.bias"], stats["bn2.mean"], stats["bn2.var"]), 0))
    a = np.maximum(m2.reshape(m2.shape[0], -1) @ p["fc1.weight"].T + p["fc1.bias"], 0)
    return a @ p["fc2.weight"] + p["fc2.bias"]


def train(x: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> tuple[Params, Params, list[float]]:
    """Adam (beta1 0.9, beta2 0.999) over shuffled mini-batches; returns params, stats, epoch losses."""
    p = init_params(rng)
    stats = running_stats()
    m1 = {k: np.zeros_like(v) for k, v in p.items()}
    m2 = {k: np.zeros_like(v) for k, v in p.items()}
    step = 0
    losses: list[float] = []
    for _ in range(EPOCHS):
        order = rng.permutation(len(x))
        total = 0.0
        for start in range(0, len(x), BATCH):
            idx = order[start : start + BATCH]
            loss, grads = train_step(p, stats, x[idx], y[idx])
            total += loss * len(idx)
            step += 1
            for k, g in grads.items():
                m1[k] = 0.9 * m1[k] + 0.1 * g
                m2[k] = 0.999 * m2[k] + 0.001 * g * g
                mhat = m1[k] / (1 - 0.9**step)
                vhat = m2[k] / (1 - 0.999**step)
                p[k] = (p[k] - LR * mhat / (np.sqrt(vhat) + 1e-8)).astype(np.float32)
        losses.append(total / len(x))
    return p, stats, losses


# ---------------------------------------------------------------------------------------------
# Export.

INITIALIZER_ORDER = (
    "conv1.weight",
    "bn1.scale",
    "bn1.bias",
    "bn1.mean",
    "bn1.var",
    "conv2.weight",
    "bn2.scale",
    "bn2.bias",
    "bn2.mean",
    "bn2.var",
    "fc1.weight",
    "fc1.bias",
    "fc2.weight",
    "fc2.bias",
)


def make_model(initializers: list[TensorProto], batch: int) -> onnx.ModelProto:
    """The exported graph with the given initializers (embedded or external)."""
    conv = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    pool = {"kernel_shape": [2, 2], "strides": [2, 2]}
    nodes = [
        helper.make_node("Conv", ["x", "conv1.weight"], ["conv1.out"], name="conv1", **conv),
        helper.make_node(
            "BatchNormalization",
            ["conv1.out", "bn1.scale", "bn1.bias", "bn1.mean", "bn1.var"],
            ["bn1.out"],
            name="bn1",
            epsilon=EPS,
        ),
        helper.make_node("Relu", ["bn1.out"], ["relu1.out"], name="relu1"),
        helper.make_node("MaxPool", ["relu1.out"], ["pool1.out"], name="pool1", **pool),
        helper.make_node("Conv", ["pool1.out", "conv2.weight"], ["conv2.out"], name="conv2", **conv),
        helper.make_node(
            "BatchNormalization",
            ["conv2.out", "bn2.scale", "bn2.bias", "bn2.mean", "bn2.var"],
            ["bn2.out"],
            name="bn2",
            epsilon=EPS,
        ),
        helper.make_node("Relu", ["bn2.out"], ["relu2.out"], name="relu2"),
        helper.make_node("MaxPool", ["relu2.out"], ["pool2.out"], name="pool2", **pool),
        helper.make_node("Flatten", ["pool2.out"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc1.weight", "fc1.bias"], ["fc1.out"], name="fc1", transB=1),
        helper.make_node("Relu", ["fc1.out"], ["relu3.out"], name="relu3"),
        helper.make_node("MatMul", ["relu3.out", "fc2.weight"], ["fc2.mm"], name="fc2.matmul"),
        helper.make_node("Add", ["fc2.mm", "fc2.bias"], ["logits"], name="fc2.add"),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "digits",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 1, 8, 8])],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 10]),
            helper.make_tensor_value_info("probs", TensorProto.FLOAT, [batch, 10]),
        ],
        initializer=initializers,
    )
    return helper.make_model(
        graph, producer_name="loam-example", ir_version=8, opset_imports=[helper.make_opsetid("", 17)]
    )


LOAM_TOML = """\
# Build options for the digits CNN: `loam build digits.onnxtext --options loam.toml -o digits.py`.
# The graph's input, outputs and initializers get their axes named here, and so do the pooled
# values (MaxPool makes new spatial axes, half the size); every other intermediate value gets its
# axes from the node computing it (a Conv's output channels from its weight's first axis, ...).
checkpoint = "digits.safetensors"

[[layout]]
pattern = "x"
axes = ["Batch", "Channel", "Height", "Width"]

[[layout]]
pattern = "conv1.weight"    # [out, in, kh, kw]
axes = ["Channel1", "Channel", "KernelH", "KernelW"]

[[layout]]
pattern = "bn1.[!o]*"      # scale, bias, mean, var (not bn1.out)
axes = ["Channel1"]

[[layout]]
pattern = "pool1.out"
axes = ["Batch", "Channel1", "Height1", "Width1"]

[[layout]]
pattern = "conv2.weight"
axes = ["Channel2", "Channel1", "KernelH", "KernelW"]

[[layout]]
pattern = "bn2.[!o]*"
axes = ["Channel2"]

[[layout]]
pattern = "pool2.out"
axes = ["Batch", "Channel2", "Height2", "Width2"]

[[layout]]
pattern = "fc1.weight"      # Gemm with transB=1: stored [out, in]
axes = ["Hidden", "(Channel2 Height2 Width2)"]  # Flatten merges pool2.out's axes

[[layout]]
pattern = "fc1.bias"
axes = ["Hidden"]

[[layout]]
pattern = "fc2.weight"      # MatMul: stored [in, out]
axes = ["Hidden", "Digit"]

[[layout]]
pattern = "fc2.bias"
axes = ["Digit"]

[[layout]]
pattern = "logits"
axes = ["Batch", "Digit"]

[[layout]]
pattern = "probs"
axes = ["Batch", "Digit"]
"""

PROVENANCE = """\
# Provenance of the digits example

Everything in this folder except `run_digits.py` and `README.md` is written by
`scripts/train_digits.py` (numpy training, about 5 s; numpy {np_version}, scikit-learn
{sk_version}); rerun it to regenerate them.

- **Data set**: scikit-learn's bundled 8x8 handwritten digits (`sklearn.datasets.load_digits`,
  {n_total} images, 10 classes; a copy of the UCI "Optical Recognition of Handwritten Digits" test
  set). Pixels (0..16) are divided by 16, images are shaped [1, 8, 8].
- **Split**: `train_test_split(test_size={test_size}, random_state={split_seed}, stratify=None)`:
  {n_train} training images, {n_test} held-out images. The held-out images and labels are
  `test_images.npy` (float32 [{n_test},1,8,8]) and `test_labels.npy` (int64 [{n_test}]).
- **Training**: numpy forward/backward (im2col convolutions), softmax cross-entropy, Adam
  (lr {lr}, betas 0.9/0.999), mini-batches of {batch}, {epochs} epochs, weight seed {seed}.
  BatchNormalization trains on batch statistics and keeps running statistics (momentum {momentum});
  the exported nodes use those running statistics (epsilon {eps}); nothing is folded.
  Final training loss: {loss:.4f}.
- **Model**: `digits.onnxtext` (ONNX opset 17, IR 8, batch fixed to {n_test}): Conv(1->8, 3x3,
  pad 1) -> BatchNormalization -> Relu -> MaxPool(2x2) -> Conv(8->16, 3x3, pad 1) ->
  BatchNormalization -> Relu -> MaxPool(2x2) -> Flatten -> Gemm(64->32, transB=1) -> Relu ->
  MatMul(32->10) + Add -> `logits` -> Softmax -> `probs`. Weights are external data in
  `digits.safetensors` ({n_params} parameters).
- **Measured held-out accuracy**: onnxruntime {ort_version}: {ort_acc:.2%} ({ort_right}/{n_test});
  the numpy training code in inference mode: {np_acc:.2%}; the largest |logit| difference between
  the two is {diff:.1e}.
"""


def main() -> int:
    import sklearn
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    labels = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(images, labels, test_size=TEST_SIZE, random_state=SPLIT_SEED)

    rng = np.random.default_rng(SEED)
    params, stats, losses = train(x_train, y_train, rng)
    for epoch, loss in enumerate(losses, 1):
        print(f"epoch {epoch:2d}: loss {loss:.4f}")
    logits_np = forward_eval(params, stats, x_test)
    np_acc = float((logits_np.argmax(axis=1) == y_test).mean())

    weights = {name: ({**params, **stats})[name] for name in INITIALIZER_ORDER}
    OUT.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(OUT / CHECKPOINT))
    offsets = safetensors_offsets(OUT / CHECKPOINT)
    external: list[TensorProto] = []
    for name, array in weights.items():
        tensor = numpy_helper.from_array(array, name)
        offset, length = offsets[name]
        assert length == array.nbytes, (name, length, array.nbytes)
        set_external_data(tensor, CHECKPOINT, offset=offset, length=length)
        tensor.ClearField("raw_data")
        external.append(tensor)
    text = onnx.printer.to_text(make_model(external, len(x_test)))
    (OUT / "digits.onnxtext").write_text(
        "# The digits CNN; written by scripts/train_digits.py. Weights: external data in digits.safetensors.\n"
        + text
        + ("" if text.endswith("\n") else "\n"),
        encoding="utf-8",
    )

    # The text read back with its external data must be exactly the trained model.
    reread = onnx.parser.parse_model((OUT / "digits.onnxtext").read_text(encoding="utf-8"))
    load_external_data_for_model(reread, str(OUT))
    for got in reread.graph.initializer:
        np.testing.assert_array_equal(numpy_helper.to_array(got), weights[got.name])
    full = make_model([numpy_helper.from_array(a, n) for n, a in weights.items()], len(x_test))
    onnx.checker.check_model(full, full_check=True)
    onnx.checker.check_model(reread, full_check=True)

    session = ort.InferenceSession(full.SerializeToString(), providers=["CPUExecutionProvider"])
    logits, probs = session.run(["logits", "probs"], {"x": x_test})
    diff = float(np.abs(logits - logits_np).max())
    assert diff < 1e-3, f"numpy and onnxruntime disagree by {diff}"
    np.testing.assert_allclose(probs, softmax(logits), rtol=1e-5, atol=1e-6)
    ort_right = int((logits.argmax(axis=1) == y_test).sum())
    ort_acc = ort_right / len(y_test)
    print(f"held-out accuracy: onnxruntime {ort_acc:.2%}, numpy {np_acc:.2%}, max |logit diff| {diff:.1e}")
    if ort_acc < 0.97:
        print("FAIL: held-out accuracy below 97%")
        return 1

    np.save(OUT / "test_images.npy", x_test)
    np.save(OUT / "test_labels.npy", y_test)
    (OUT / "loam.toml").write_text(LOAM_TOML, encoding="utf-8")
    (OUT / "PROVENANCE.md").write_text(
        PROVENANCE.format(
            n_total=len(images),
            test_size=TEST_SIZE,
            split_seed=SPLIT_SEED,
            n_train=len(x_train),
            n_test=len(x_test),
            lr=LR,
            batch=BATCH,
            epochs=EPOCHS,
            seed=SEED,
            momentum=MOMENTUM,
            eps=EPS,
            loss=losses[-1],
            n_params=sum(a.size for a in weights.values()),
            ort_version=ort.__version__,
            ort_acc=ort_acc,
            ort_right=ort_right,
            np_acc=np_acc,
            diff=diff,
            np_version=np.__version__,
            sk_version=sklearn.__version__,
        ),
        encoding="utf-8",
    )
    print(f"wrote digits.onnxtext, {CHECKPOINT}, test_images.npy, test_labels.npy, loam.toml, PROVENANCE.md in {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
