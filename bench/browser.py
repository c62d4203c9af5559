"""The browser module's forward time: headless Chromium's WebGPU on SwiftShader, beside the Python WGSL
module on wgpu (llvmpipe here), the numpy module and onnxruntime, on the same inputs.

    python -m bench.browser [--quick] [--output FILE]

Each model is built three ways from the same files (`--target browser`, `--backend wgsl`, numpy);
each time is the median of the calls after a first one (which compiles the shaders and uploads the
weights), measured inside the page for the browser module.  onnxruntime (CPU, all cores) runs the
ONNX models as the peer; the JAX block and SmolLM2 (a GGUF) have no ONNX file of the same weights
here, so their row has none.  On a machine without a GPU both WebGPU columns run on a CPU rasterizer,
so they say what the code costs there, not what a GPU gives.

Writes bench/RESULTS-browser.md (`--output FILE` elsewhere, `--quick` nowhere).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from bench.publish import publish
from loam.backends.browser_module import write_browser_module
from loam.driver.options import Options
from loam.driver.pipeline import build
from loam.tools.browser_run import Browser

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
GPT2 = ROOT / "tests" / "models" / "tiny_gpt2"


@dataclass(frozen=True)
class Case:
    name: str
    model: Path
    options: Options
    inputs: Callable[[object], dict[str, np.ndarray]]  # the numpy module -> its inputs by name
    onnx: bool = True  # whether onnxruntime runs `model` (with the options' checkpoint)


def _mlp(module: object) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)}


def _digits(module: object) -> dict[str, np.ndarray]:
    ((name, _, extents),) = module.INPUTS  # type: ignore[attr-defined]
    return {name: np.load(EXAMPLES / "digits" / "test_images.npy").astype(np.float32)[: extents[0]].reshape(extents)}


def _jax(module: object) -> dict[str, np.ndarray]:
    with np.load(EXAMPLES / "jax_attention" / "inputs.npz") as data:
        return {"tokens": data["tokens_5"]}


def _decoder(ids: np.ndarray, module: object, flag: bool | None) -> dict[str, np.ndarray]:
    inputs: dict[str, np.ndarray] = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    if flag is not None:
        inputs["use_cache_branch"] = np.array([flag])
    for name, _, extents in module.INPUTS:  # type: ignore[attr-defined]
        if name.startswith("past_key_values."):
            inputs[name] = np.zeros((1, extents[1], 0, extents[3]), np.float32)
    return inputs


def _gpt2(module: object) -> dict[str, np.ndarray]:
    with np.load(GPT2 / "expected.npz") as e:
        return _decoder(e["prompt_ids"], module, False)


def _smollm2(module: object) -> dict[str, np.ndarray]:
    return _decoder(np.array([[504]], np.int64), module, None)  # one token through an empty past


def cases() -> list[Case]:
    from tests.smollm2_file import smollm2_gguf

    gpt2 = replace(Options.from_toml(GPT2 / "decoder_merged.loam.toml"), checkpoints=(GPT2 / "tiny_gpt2.safetensors",))
    return [
        Case("MLP [4, 8]", EXAMPLES / "mlp" / "mlp.onnxtext", Options.from_toml(EXAMPLES / "mlp" / "loam.toml"), _mlp),
        Case("digits CNN, 450 images", EXAMPLES / "digits" / "digits.onnxtext",
             Options.from_toml(EXAMPLES / "digits" / "loam.toml"), _digits),
        Case("JAX attention block [5, 6]", EXAMPLES / "jax_attention" / "attention.mlir",
             Options.from_toml(EXAMPLES / "jax_attention" / "loam.toml"), _jax, onnx=False),
        Case("tiny GPT-2 merged, 7-token prompt", GPT2 / "decoder_merged.onnxtext", gpt2, _gpt2),
        Case("SmolLM2 Q4, one token", ROOT / "tests" / "models" / "smollm2" / "decoder_with_past.onnxtext",
             Options(checkpoints=(smollm2_gguf(),), architecture="llama"), _smollm2, onnx=False),
    ]  # fmt: skip


def _median_ms(call: Callable[[], object], repeats: int) -> float:
    call()  # the first call: shaders compiled, weights uploaded
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def _onnxruntime_ms(case: Case, inputs: dict[str, np.ndarray], repeats: int) -> float | None:
    if not case.onnx:
        return None
    import onnx.parser
    import onnxruntime as ort
    from onnx import numpy_helper
    from safetensors.numpy import load_file

    # The text model with the checkpoint's weights put in by name (examples/mlp/run_mlp.py does the same).
    model = onnx.parser.parse_model(case.model.read_text(encoding="utf-8"))
    stored = {k: v for c in case.options.checkpoints for k, v in load_file(str(c)).items()}
    filled = [
        numpy_helper.from_array(stored[i.name], i.name) if i.name in stored else i for i in model.graph.initializer
    ]
    del model.graph.initializer[:]
    model.graph.initializer.extend(filled)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    feed = {k: v for k, v in inputs.items() if k in names}
    return _median_ms(lambda: session.run(None, feed), repeats)


def measure(case: Case, browser: Browser, served: Path, repeats: int) -> list[str]:
    numpy_module = build(case.model, options=case.options).module
    weights = numpy_module.Weights.load_file([str(c) for c in case.options.checkpoints])
    inputs = case.inputs(numpy_module)
    ordered = [inputs[name] for name, _, _ in numpy_module.INPUTS]
    numpy_ms = _median_ms(lambda: numpy_module.forward(weights, *ordered), repeats)
    wgsl = build(case.model, options=case.options, backend="wgsl", fuse="dispatch")
    gpu_weights = wgsl.module.Weights.load_file([str(c) for c in case.options.checkpoints])
    wgsl_ms = _median_ms(lambda: wgsl.module.forward(gpu_weights, *ordered), repeats)
    folder = served / f"case{len(list(served.iterdir()))}"
    write_browser_module(folder, wgsl.source, wgsl.module, list(case.options.checkpoints), case.name)
    _, browser_ms = browser.forward(ordered, module=f"{folder.name}/model.js", weights=f"{folder.name}/weights/",
                                    repeat=repeats + 1)  # fmt: skip
    ort_ms = _onnxruntime_ms(case, inputs, repeats)
    peer = "" if ort_ms is None else f"{ort_ms:.2f}"
    ratio = "" if ort_ms is None else f"{browser_ms / ort_ms:.0f}x"
    return [case.name, f"{browser_ms:.1f}", f"{wgsl_ms:.1f}", f"{numpy_ms:.2f}", peer,
            f"{browser_ms / wgsl_ms:.2f}x", ratio]  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.browser", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the MLP only, two repeats, nothing written")
    parser.add_argument("--output", type=Path, help="write the report here (default bench/RESULTS-browser.md)")
    args = parser.parse_args(argv)
    repeats = 2 if args.quick else 5
    chosen = cases()[:1] if args.quick else cases()
    header = ["model", "browser (SwiftShader) ms", "Python WGSL (llvmpipe) ms", "numpy ms", "onnxruntime ms",
              "browser / Python WGSL", "browser / onnxruntime"]  # fmt: skip
    rows = []
    with tempfile.TemporaryDirectory() as tmp, Browser(Path(tmp)) as browser:
        for case in chosen:
            print(f"bench.browser: {case.name}", flush=True)
            rows.append(measure(case, browser, Path(tmp), repeats))
    table = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    table += ["| " + " | ".join(r) + " |" for r in rows]
    text = (
        "# The browser module's forward time\n\n`python -m bench.browser`: medians of "
        f"{repeats} calls after a first, on this machine (no GPU: SwiftShader in Chromium, llvmpipe under wgpu).\n\n"
        + "\n".join(table)
        + "\n"
    )
    publish(text, args, ROOT / "bench" / "RESULTS-browser.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
