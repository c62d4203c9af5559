"""The browser module in headless Chromium (WebGPU on SwiftShader) gives the numpy module's numbers.

Each model is built twice from the same files: `--target browser` (model.js and its weight shards,
served from 127.0.0.1) and the numpy module, the oracle here (itself held to onnxruntime or JAX by
its own tests).  The MLP, the digits CNN, the JAX attention block (a symbolic batch, two extents)
and the tiny GPT-2 merged decoder (an If on an input, a past that grows; a greedy loop run in the
page) agree within 1e-4, and the greedy tokens are equal.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from loam.backends.browser_module import write_browser_module
from loam.driver.options import Options
from loam.driver.pipeline import build
from loam.tools.browser_run import Browser

pytestmark = pytest.mark.xdist_group("browser")

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"
GPT2 = ROOT / "tests" / "models" / "tiny_gpt2"
ATOL = 1e-4


def _options(toml: Path, checkpoint: Path | None) -> Options:
    options = Options.from_toml(toml)
    return options if checkpoint is None else replace(options, checkpoints=(checkpoint,))


@functools.cache
def _numpy(model: Path, toml: Path, checkpoint: Path | None) -> tuple[ModuleType, object]:
    options = _options(toml, checkpoint)
    module = build(model, options=options).module
    return module, module.Weights.load_file([str(c) for c in options.checkpoints])


def built(
    served: Path, name: str, model: Path, toml: Path, checkpoint: Path | None = None
) -> tuple[ModuleType, object]:
    """Write the browser module of `model` into `served/name` (once) and return the numpy module and its weights."""
    folder = served / name
    if not (folder / "model.js").exists():
        options = _options(toml, checkpoint)
        result = build(model, options=options, backend="wgsl", fuse="dispatch")
        write_browser_module(folder, result.source, result.module, list(options.checkpoints), name)
    return _numpy(model, toml, checkpoint)


def outputs_of(module: ModuleType, out: object) -> dict[str, np.ndarray]:
    return dict(zip(module.OUTPUTS, out if len(module.OUTPUTS) > 1 else [out], strict=True))


def close(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert sorted(got) == sorted(want)
    for name, value in want.items():
        assert got[name].dtype == value.dtype, name
        assert got[name].shape == value.shape, name
        np.testing.assert_allclose(got[name], value, atol=ATOL, rtol=1e-5, err_msg=name)


def test_the_mlp_gives_the_numpy_modules_numbers(browser: Browser, served: Path) -> None:
    module, weights = built(served, "mlp", EXAMPLES / "mlp" / "mlp.onnxtext", EXAMPLES / "mlp" / "loam.toml")
    x = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
    got, _ = browser.forward([x], module="mlp/model.js", weights="mlp/weights/")
    close(got, outputs_of(module, module.forward(weights, x)))


def test_the_digits_cnn_gives_the_numpy_modules_numbers_and_labels(browser: Browser, served: Path) -> None:
    digits = EXAMPLES / "digits"
    module, weights = built(served, "digits", digits / "digits.onnxtext", digits / "loam.toml")
    images = np.load(digits / "test_images.npy").astype(np.float32)
    ((_, _, extents),) = module.INPUTS
    x = images[: extents[0]].reshape(extents)
    want = outputs_of(module, module.forward(weights, x))
    got, _ = browser.forward([x], module="digits/model.js", weights="digits/weights/")
    close(got, want)
    assert (got["logits"].argmax(-1) == want["logits"].argmax(-1)).all()


def test_the_jax_attention_block_gives_the_numpy_modules_numbers_at_two_batch_sizes(
    browser: Browser, served: Path
) -> None:
    jax = EXAMPLES / "jax_attention"
    module, weights = built(served, "jax_attention", jax / "attention.mlir", jax / "loam.toml")
    with np.load(jax / "inputs.npz") as inputs:
        for key in ("tokens_2", "tokens_5"):
            tokens = inputs[key]
            got, _ = browser.forward([tokens], module="jax_attention/model.js", weights="jax_attention/weights/")
            close(got, outputs_of(module, module.forward(weights, tokens)))


# The merged decoder's greedy loop, run in the page: the prompt through the branch without a past,
# then each token through the branch with one, the presents fed back as the next pasts.
GREEDY = """
const [modelUrl, weightsUrl, prompt, count] = arguments;
const done = arguments[arguments.length - 1];
(async () => {
  const m = await import(modelUrl);
  const weights = await m.Weights.load(weightsUrl);
  const pastNames = m.INPUTS.map(([name]) => name).filter((n) => n.startsWith("past_key_values."));
  let past = Object.fromEntries(pastNames.map((n) => {
    const [, , heads, , size] = [0, ...m.INPUTS.find(([name]) => name === n)[2]];
    return [n, new m.Tensor("float32", new Float32Array(0), [1, heads, 0, size])];
  }));
  let ids = prompt.map(BigInt);
  let length = 0;
  const tokens = [];
  let first = null;
  while (tokens.length < count) {
    length += ids.length;
    const inputs = {
      input_ids: new m.Tensor("int64", BigInt64Array.from(ids), [1, ids.length]),
      attention_mask: new m.Tensor("int64", new BigInt64Array(length).fill(1n), [1, length]),
      use_cache_branch: new m.Tensor("bool", Uint8Array.of(tokens.length > 0 ? 1 : 0), [1]),
      ...past,
    };
    const out = await m.forward(weights, ...m.INPUTS.map(([name]) => inputs[name]));
    const [, rows, vocab] = out.logits.shape;
    const last = out.logits.data.subarray((rows - 1) * vocab, rows * vocab);
    if (first === null) first = Array.from(last);
    let best = 0;
    for (let v = 1; v < vocab; v++) if (last[v] > last[best]) best = v;
    tokens.push(best);
    ids = [BigInt(best)];
    past = Object.fromEntries(pastNames.map((n) => [n, out[n.replace("past_key_values", "present")]]));
  }
  return {ok: true, tokens, first};
})().then(done, (e) => done({ok: false, message: `${e.name}: ${e.message}`}));
"""


def test_the_merged_gpt2_decodes_greedily_in_the_page_with_the_numpy_modules_tokens(
    browser: Browser, served: Path
) -> None:
    module, weights = built(
        served,
        "gpt2",
        GPT2 / "decoder_merged.onnxtext",
        GPT2 / "decoder_merged.loam.toml",
        GPT2 / "tiny_gpt2.safetensors",
    )
    with np.load(GPT2 / "expected.npz") as e:
        prompt, want = e["prompt_ids"], e["greedy_ids"].tolist()
    result = browser.script(
        GREEDY, browser.base + "gpt2/model.js", browser.base + "gpt2/weights/", prompt[0].tolist(), 8
    )
    assert isinstance(result, dict) and result["ok"], result
    assert result["tokens"] == want[:8]
    past = {
        f"past_key_values.{i}.{kv}": np.zeros((1, 4, 0, 16), np.float32) for i in range(2) for kv in ("key", "value")
    }
    inputs = {
        "input_ids": prompt,
        "attention_mask": np.ones_like(prompt),
        "use_cache_branch": np.array([False]),
        **past,
    }
    out = module.forward(weights, *[inputs[name] for name, _, _ in module.INPUTS])
    np.testing.assert_allclose(np.array(result["first"], np.float32), out.logits[0, -1], atol=ATOL)


def test_packed_ggml_blocks_travel_and_compute_as_the_file_stores_them(browser: Browser, served: Path) -> None:
    """Q8_0, Q4_1 and Q4_0 weights (a gather, a linear layer, a [K, N] product) stay blocks from the GGUF
    file to the device: the shards hold the file's bytes, and the page's outputs are onnxruntime's over
    llama.cpp's widening of the same blocks."""
    from tests.backends.wgsl.test_packed_device import packed_model

    folder = served / "packed"
    folder.mkdir()
    result, gguf, session, stored = packed_model(folder, {"embed": "Q8_0", "proj": "Q4_1", "head": "Q4_0"})
    write_browser_module(folder / "web", result.source, result.module, [gguf], "packed")
    shards = sum(p.stat().st_size for p in (folder / "web" / "weights").glob("shard-*.safetensors"))
    assert stored <= shards <= stored + 4096  # the blocks and one header
    ids = np.array([[3, -1, 49, 0, 17]], np.int64)
    got, _ = browser.forward([ids], module="packed/web/model.js", weights="packed/web/weights/")
    np.testing.assert_allclose(got["y"], session.run(None, {"ids": ids})[0], rtol=1e-4, atol=1e-4)


def test_an_if_on_a_condition_the_device_computes_reads_it_back_and_records_on(browser: Browser, served: Path) -> None:
    """sum(x) > 0 decides, on the device's value, which branch's kernels the page dispatches next (a
    sync, then a new encoder), for both branches and twice each."""
    import onnx
    from onnx import TensorProto, helper

    from loam.testing import build_for

    def vec(name: str) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, [3])

    then = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["t"])], "then", [], [vec("t")])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [vec("e")])
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["zero"], value=helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])),
         helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
         helper.make_node("Greater", ["s", "zero"], ["p"]),
         helper.make_node("If", ["p"], ["r"], then_branch=then, else_branch=other),
         helper.make_node("Add", ["r", "x"], ["y"])],
        "control", [vec("x")], [vec("y")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    built = build_for(model, fuse="dispatch", backend="wgsl")
    assert "g.sync(" in built.source and "g.resume()" in built.source
    write_browser_module(served / "if_sync", built.source, built.module, [], "if_sync")
    for x in ([1.0, 2.0, -0.5], [-1.0, -2.0, 0.5]):
        x32 = np.array(x, np.float32)
        want = x32 * x32 + x32 if x32.sum() > 0 else np.zeros(3, np.float32)
        got, _ = browser.forward([x32], module="if_sync/model.js", weights="if_sync/weights/", repeat=2)
        np.testing.assert_allclose(got["y"], want, atol=1e-6)


def test_a_kernel_past_the_storage_buffer_budget_reads_its_packed_operands_in_chromium(
    browser: Browser, served: Path
) -> None:
    """Twelve operands fused into one kernel: past WebGPU's default 8 storage buffers, so 8 of them
    share one buffer the page's runtime packs (backends/wgsl_limits.py); the page's device is asked
    for the defaults, and the numbers are onnxruntime's."""
    import onnx
    from onnx import TensorProto, helper

    from loam.testing import run_onnxruntime

    n = 12
    nodes, last = [], "x0"
    for i in range(1, n):
        nodes.append(helper.make_node("Mul" if i % 3 == 0 else "Add", [last, f"x{i}"], [f"s{i}"]))
        last = f"s{i}"
    graph = helper.make_graph(
        [*nodes, helper.make_node("Tanh", [last], ["y"])],
        "sum",
        [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, ["N", 6]) for i in range(n)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 6])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    folder = served / "many_operands"
    folder.mkdir()
    onnx.save(model, served / "many_operands.onnx")
    options = Options.from_mapping({"layout": [{"pattern": "*", "axes": ["Batch", "Feature"]}]})
    result = build(served / "many_operands.onnx", options=options, backend="wgsl", fuse="dispatch")
    assert list(result.module._PACKED_OPERANDS.values()) == [8]
    write_browser_module(folder, result.source, result.module, [], "sum")
    feeds = {f"x{i}": np.random.default_rng(i).standard_normal((3, 6)).astype(np.float32) for i in range(n)}
    got, _ = browser.forward(list(feeds.values()), module="many_operands/model.js", weights="many_operands/weights/")
    np.testing.assert_allclose(got["y"], run_onnxruntime(model, feeds)[0], rtol=1e-5, atol=1e-5)
