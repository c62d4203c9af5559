"""Print the browser module: `model.js`, an ES module running the WGSL module's plan through WebGPU.

`loam build --target browser -o DIR` builds the WGSL module (the same passes, the same kernels, the
same buffer plan) and spells it for a page:

- `DIR/model.js`: the axis markers, `INPUTS`/`OUTPUTS`, the shaders, `Weights.load(source)` and
  `async forward(weights, ...inputs)`, translated statement by statement from the WGSL module's
  Python `forward` (`browser_js`), then the runtime (`browser/runtime.js`: the checks, the kernels'
  parameter functions, the device) and, for a build with --host-fallback whose module computes
  kernels on the host, `browser/host.js` (those kernels in JavaScript, on the page's CPU).  It
  imports nothing.
- `DIR/weights/`: the tensors forward uploads, in their device form (a weight the checkpoint stores
  in Q4_0, Q4_1 or Q8_0 as its blocks, byte for byte), as safetensors shards of at most 16 MiB (a
  larger tensor is split along its first axis into `NAME#0`, `NAME#1`, ...) and `manifest.json`
  holding each shard's size and sha256 (`browser_weights`).

The weights are made at build time by the WGSL module itself: its `Weights` loads and checks the
checkpoint (GGUF or safetensors, renamed, row orders restored), and its `_resident` names each
upload, which a recorder here takes instead of a device.  So the page reads no checkpoint format,
only shards; model.js checks each shard against the manifest's digest and each tensor's dtype and
extents against the ones compiled into it, and `LoadError` names the shard or the tensor and axis.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from types import ModuleType

import numpy as np

from loam.backends.browser_js import comment_safe, translate_forward
from loam.backends.browser_weights import Resident, write_weights
from loam.core.errors import CheckpointError


class _Recorder:
    """Stands in for the device while the WGSL module's `_resident` names its uploads."""

    def __init__(self, module: ModuleType) -> None:
        self.module = module
        self.uploads: list[tuple[str, np.ndarray, bool]] = []  # name, device form, as ggml blocks

    def upload(self, name: str, value: np.ndarray) -> int:
        self.uploads.append((name, self.module._device_array(name, value), False))
        return len(self.uploads) - 1

    def upload_blocks(self, name: str, blocks: np.ndarray) -> int:
        """A weight kept in ggml blocks: its bytes, a row of blocks to a row."""
        rows = np.ascontiguousarray(blocks).view(np.uint8).reshape(blocks.shape[0], -1)
        self.uploads.append((name, rows, True))
        return len(self.uploads) - 1


def residents(module: ModuleType, weights: object) -> list[Resident]:
    """The tensors the WGSL module's forward uploads from `weights`, in its upload order."""
    recorder = _Recorder(module)
    module._resident(weights, recorder)
    axes_of = {name: tuple(axis for axis, _ in axes) for name, _, _, axes in module.Weights._SPECS}
    found: list[Resident] = []
    for name, array, blocks in recorder.uploads:
        axes = axes_of.get(name, ())
        if blocks:  # rows of ggml blocks: the row axis, then the bytes of a row's blocks
            axes = (axes[0] if axes else "axis 0", "BlockBytes")
        if len(axes) != array.ndim:
            axes = tuple(f"axis {k}" for k in range(array.ndim))
        found.append(Resident(name, np.ascontiguousarray(array), axes, blocks))
    return found


def _markers(module: ModuleType) -> dict[str, int | None]:
    """The module's axis marker classes: name -> extent (None where the call decides)."""
    return {
        name: value.EXTENT
        for name, value in vars(module).items()
        if isinstance(value, type) and (value.__doc__ or "") == f"Axis {name}." and hasattr(value, "EXTENT")
    }


def runtime_source() -> str:
    return resources.files("loam.backends").joinpath("browser/runtime.js").read_text(encoding="utf-8")


def host_source() -> str:
    """The kernels a page computes on its CPU (`--host-fallback`), which a module carries when it uses them."""
    return resources.files("loam.backends").joinpath("browser/host.js").read_text(encoding="utf-8")


def browser_source(wgsl_source: str, module: ModuleType, resident: Sequence[Resident], model: str) -> str:
    """model.js for the WGSL module `module` (printed as `wgsl_source`) and its uploads `resident`."""
    outputs = list(module.OUTPUTS)
    forward = translate_forward(wgsl_source, outputs)
    inputs = [[name, dtype, list(extents)] for name, dtype, extents in module.INPUTS]
    specs = [[r.name, r.dtype, list(r.array.shape), list(r.axes), r.blocks] for r in resident]
    parts = [
        f"// The model {comment_safe(repr(model))}, compiled by Loam for WebGPU: await forward(weights, ...inputs).\n"
        "//\n"
        "// Generated code: it imports nothing and carries its own runtime. Regenerate it from the model\n"
        "// rather than editing it.\n"
        "//\n"
        "//   const weights = await Weights.load(new URL('./weights/', import.meta.url));\n"
        "//   const out = await forward(weights, new Tensor('float32', data, [4, 8]), ...);\n",
        "// Each named axis and its extent (null where the call decides)\n"
        f"export const AXES = Object.freeze({json.dumps(_markers(module))});\n\n"
        "// forward's inputs in order (ONNX name, dtype, extents: null where the call decides) and its\n"
        "// outputs' ONNX names\n"
        f"export const INPUTS = {json.dumps(inputs)};\n"
        f"export const OUTPUTS = {json.dumps(outputs)};\n",
        "// The tensors forward uploads, in order: name, dtype, extents, axis names, whether it is a weight's\n"
        "// ggml blocks (uploaded byte for byte); Weights.load checks each shard's tensors against these\n"
        f"const _RESIDENT = {json.dumps(specs)};\n",
        _WEIGHTS_CLASS,
        forward,
        "// Every compute shader forward dispatches, by name (WGSL source)\n"
        f"const _SHADERS = {json.dumps(dict(module._SHADERS), indent=1)};\n\n"
        "// The shaders reading their last operands from one packed buffer: how many (_Gpu.pack)\n"
        f"const _PACKED_OPERANDS = {json.dumps(dict(module._PACKED_OPERANDS))};\n"
        "// The device limits the shaders were built within: what forward requests of the adapter\n"
        f"export const LIMITS = Object.freeze({json.dumps(dict(module._LIMITS))});\n\n"
        "let _GPU = null;  // the module's device, made on first use\n"
        "async function _gpu() {\n"
        "  if (_GPU === null) _GPU = _Gpu.make(_SHADERS, _PACKED_OPERANDS, LIMITS);\n"
        "  return await _GPU;\n}\n",
        "// " + "-" * 98 + "\n// What forward calls: Loam's browser runtime, copied in\n// " + "-" * 98 + "\n",
        runtime_source(),
        *([host_source()] if "g.host(" in wgsl_source else []),
    ]
    return "\n".join(p.rstrip("\n") + "\n" for p in parts)


_WEIGHTS_CLASS = """\
/** The tensors forward uploads, checked against the graph when loaded, on the device once used. */
export class Weights {
  constructor(arrays) {
    this.arrays = arrays;  // each resident tensor's device form, in _RESIDENT's order
    this.buffers = null;  // [device, buffers] they were uploaded to, made on first use
  }

  /** Read the weights: a folder URL holding manifest.json and its shards, a function reading one of
   * those files by name (to a Promise of its ArrayBuffer: Node), an object mapping those file names to
   * ArrayBuffers, or one safetensors ArrayBuffer.  Every shard is checked against the
   * manifest's sha256 and every tensor against the graph; LoadError names the shard or the tensor. */
  static async load(source) {
    const tensors = await _readWeights(source);
    return new Weights(_RESIDENT.map((spec) => _residentTensor(tensors, spec)));
  }

  /** The device buffers (uploaded once per device). */
  resident(g) {
    if (this.buffers === null || this.buffers[0] !== g) {
      this.buffers = [g, _RESIDENT.map(([name, dtype, , , blocks], k) =>
        blocks ? g.upload_blocks(name, this.arrays[k]) : g.upload(name, dtype, this.arrays[k]))];
    }
    return this.buffers[1];
  }
}
"""


def write_browser_module(
    folder: Path, wgsl_source: str, module: ModuleType, checkpoints: Sequence[Path], model: str
) -> list[Path]:
    """Write `folder/model.js` and `folder/weights/` for the built WGSL module `module` (its source
    `wgsl_source`), its weights read from `checkpoints` (none: the weights the module carries)."""
    if not checkpoints and not hasattr(module.Weights, "embedded"):
        raise CheckpointError(
            "the model reads weights from a checkpoint: give it (--checkpoint FILE or `checkpoint =`)"
        )
    weights = module.Weights.load_file([str(p) for p in checkpoints]) if checkpoints else module.Weights.embedded()
    resident = residents(module, weights)
    source = browser_source(wgsl_source, module, resident, model)
    folder.mkdir(parents=True, exist_ok=True)
    written = write_weights(folder / "weights", resident)
    (folder / "model.js").write_text(source, encoding="utf-8")
    return [folder / "model.js", *written]
