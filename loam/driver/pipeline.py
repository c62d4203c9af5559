"""The whole build as one function: model (+ checkpoint headers + options) -> generated module.

`build` runs the passes `loam-opt` registers, in memory, each through its `apply`, in the order
`pipeline_passes` gives (`loam build --print-pipeline` prints it as a `-p` string):

    read (frontends) -> apply-options -> stage0 -> name-axes -> lower-to-kernel
        -> pack-quantized (numpy) -> split-wide-weights (wgsl) -> fuse
        -> fold-conv-affine, decode-state-in-place, fuse-attention, grouped-heads (numpy)
        -> tile-attention, tile-rows, tile-matmul (wgsl) -> emit (backends)

`fuse` (objective `memory`) runs unless `build(..., fuse=None)` turns it off (`loam build --no-fuse`);
its decision report is `BuildResult.fusion`.  Stage 0 records the graph's nodes (`loam.nodes`) so the
report names the folded nodes too; what pack-quantized needs from the checkpoint headers and the
notes it leaves are module attributes too (`loam.stored_encodings`, `loam.notes`).

The options enter the IR as attributes of the top-level module before the first pass, so the IR
dumped after any pass (`dump_ir`) can be replayed with `loam-opt` without the original files.
"""

from __future__ import annotations

import functools
import gc
import sys
import threading
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ParamSpec, TypeVar

import onnx
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.passes import ModulePass
from xdsl.printer import Printer

from loam.core.errors import CheckpointError, LoamError, UsageError
from loam.dialects import build_contract as contract
from loam.dialects.tensor_axes import AxesTensorType
from loam.driver.options import Options
from loam.driver.registry import read_model
from loam.frontends.checkpoint import read_headers
from loam.frontends.context import make_context
from loam.frontends.headers import HeaderEntry
from loam.frontends.onnx_proto import check_external_data_sources

P = ParamSpec("P")
R = TypeVar("R")

if TYPE_CHECKING:
    from loam.dialects.kernel import WeightOp
    from loam.frontends.checkpoint import WeightSpec
    from loam.passes.report import FusionReport


@dataclass
class BuildResult:
    """What a build produces: the module's source, the build report and the module, imported."""

    source: str
    report: str
    module: types.ModuleType
    ir: ModuleOp
    notes: list[str] = field(default_factory=list[str])
    fusion: FusionReport | None = None
    """The `fuse` pass's decision report (None when the build ran without fusion)."""
    weights: bytes | None = None
    """The safetensors file the module reads its carried weights from, to be written beside it (see
    `write`); None when the source carries them all."""

    def write(self, path: str | Path) -> list[Path]:
        """Write the module to `path` (a `.py` file) and, where it has one, its weights file beside it
        (`beside_path`); the paths written."""
        return write_module(Path(path), self.source, self.weights)


def write_module(path: Path, source: str, weights: bytes | None) -> list[Path]:
    """Write a module's `source` to `path` and its `weights` file (if any) beside it; the paths written."""
    path.write_text(source, encoding="utf-8")
    if weights is None:
        return [path]
    beside = beside_path(path)
    beside.write_bytes(weights)
    return [path, beside]


def beside_path(module: Path) -> Path:
    """Where a module written to `module` finds the weights it keeps beside itself: its name with
    `.safetensors` for `.py` (the rule the module's `_beside` follows)."""
    name = module.name[:-3] if module.name.endswith(".py") else module.name
    return module.with_name(name + ".safetensors")


DEFAULT_FUSE = "memory"
"""The `fuse` objective `build` uses unless told otherwise (None: no fusion)."""


BACKENDS: tuple[str, ...] = ("numpy", "wgsl")
"""The backends `build` prints a module with."""


def pipeline_passes(
    fuse: str | None = DEFAULT_FUSE, backend: str = "numpy", draft: bool = False, grad: tuple[str, ...] | None = None
) -> list[ModulePass]:
    """Every pass `build` runs after reading, in order: what `loam build --print-pipeline` prints for
    `loam-opt -p`.  They read the options (and the checkpoint's stored encodings) from the module's
    attributes.  `fuse` is the fuse pass's objective, None to leave it out.  Both backends keep weights
    the checkpoint stores in ggml blocks packed (`pack-quantized`); the numpy backend keeps a decoder's
    past in place (`decode-state-in-place`), computes attention as one kernel (`fuse-attention`) and
    multiplies the repeated key/value heads left once per group (`grouped-heads`); the WGSL backend
    splits a weight past one storage binding that only products read (`split-wide-weights`) and runs its
    attention, row kernels and float32 products as tile programs (`tile-attention`, `tile-rows`,
    `tile-matmul`).  `draft` (an architecture table's build) names the axes the layout leaves open after
    stage 0 (`draft-layout`).
    `grad` (the weights to differentiate; empty: every float weight) adds the gradients of the weights
    to the program right after lowering (`differentiate`), so the later passes treat them as any kernel."""
    from loam.passes.apply_options import ApplyOptionsPass
    from loam.passes.fuse import FusePass
    from loam.passes.lower_to_kernel import LowerToKernelPass
    from loam.passes.name_axes import NameAxesPass
    from loam.passes.stage0 import Stage0Pass

    passes: list[ModulePass] = [ApplyOptionsPass(), Stage0Pass()]
    if draft:
        from loam.driver.draft_layout import DraftLayoutPass

        passes.append(DraftLayoutPass())
    passes += [NameAxesPass(), LowerToKernelPass()]
    if grad is not None:
        from loam.passes.differentiate import DifferentiatePass

        passes.append(DifferentiatePass(of=tuple(grad)))
    from loam.passes.pack_quantized import PackQuantizedPass

    passes.append(PackQuantizedPass())
    if backend == "wgsl":
        from loam.passes.split_wide_weights import SplitWideWeightsPass

        passes.append(SplitWideWeightsPass())
    if fuse is not None:
        passes.append(FusePass(objective=fuse))
    if backend == "numpy":
        from loam.passes.decode_state_in_place import DecodeStateInPlacePass
        from loam.passes.fold_conv_affine import FoldConvAffinePass
        from loam.passes.fuse_attention import FuseAttentionPass
        from loam.passes.grouped_heads import GroupedHeadsPass

        passes += [FoldConvAffinePass(), DecodeStateInPlacePass(), FuseAttentionPass(), GroupedHeadsPass()]
    if backend == "wgsl":
        from loam.passes.tile_attention import TileAttentionPass
        from loam.passes.tile_matmul import TileMatmulPass
        from loam.passes.tile_rows import TileRowsPass

        passes += [TileAttentionPass(), TileRowsPass(), TileMatmulPass()]
    return passes


def pipeline_text(
    fuse: str | None = DEFAULT_FUSE, backend: str = "numpy", draft: bool = False, grad: tuple[str, ...] | None = None
) -> str:
    """`pipeline_passes` as a `loam-opt -p` string."""
    return ",".join(str(p.pipeline_pass_spec()) for p in pipeline_passes(fuse, backend, draft, grad))


_PAUSED_BUILDS = 0
_PAUSE_LOCK = threading.Lock()
_COLLECTING = True


def collections_paused(run: Callable[P, R]) -> Callable[P, R]:
    """`run` with Python's cyclic garbage collector paused while it runs (and while any other paused
    run does), restored as it was after the last one.

    Why: a build makes a few objects per node and frees few of them until it ends, so the collector's
    passes over the growing heap found little and took about a fifth of a large graph's build (measured
    with `gc.callbacks` on a 16,000-node graph); reference counting still frees what it can."""

    @functools.wraps(run)
    def paused(*args: P.args, **kwargs: P.kwargs) -> R:
        global _PAUSED_BUILDS, _COLLECTING
        with _PAUSE_LOCK:
            if _PAUSED_BUILDS == 0:
                _COLLECTING = gc.isenabled()
                gc.disable()
            _PAUSED_BUILDS += 1
        try:
            return run(*args, **kwargs)
        finally:
            with _PAUSE_LOCK:
                _PAUSED_BUILDS -= 1
                if _PAUSED_BUILDS == 0 and _COLLECTING:
                    gc.enable()

    return paused


@collections_paused
def build(
    model: str | Path | onnx.ModelProto,
    checkpoints: Sequence[str | Path] = (),
    options: Options | None = None,
    *,
    dump_ir: str | Path | None = None,
    progress: Callable[[str], None] | None = None,
    fuse: str | None = DEFAULT_FUSE,
    backend: str = "numpy",
    host_fallback: bool = False,
    grad: tuple[str, ...] | None = None,
) -> BuildResult:
    """Compile `model` into a Python module; stop with a LoamError naming the culprit on bad input.

    `fuse` is the fuse pass's objective (`memory` or `dispatch`), None to build without fusion;
    `backend` is `numpy` (the module computes with numpy) or `wgsl` (with WebGPU compute shaders,
    through wgpu); `host_fallback` (wgsl only) runs the kernels that have no WGSL form on the host
    instead of refusing them, and the report lists them; `grad` (weight names, empty for every float
    weight; None: `options.grad`) makes forward also return each one's gradient `grad.W` from upstream
    gradients `grad.O` given as inputs after the model's own (`differentiate`)."""
    if backend not in BACKENDS:
        raise UsageError(f"backend '{backend}' is not one of {', '.join(BACKENDS)}")
    if host_fallback and backend != "wgsl":
        raise UsageError("host_fallback is a WGSL backend choice: the numpy backend computes everything on the host")
    from loam.backends.numpy_module import numpy_module
    from loam.driver.options import attach_options
    from loam.passes.fuse import FusePass
    from loam.passes.notes import build_notes
    from loam.passes.pack_quantized import PACKED_ENCODINGS

    options = options or Options()
    # An onnxruntime-genai folder's config states extents the graph leaves symbolic (kv_cache_dim).
    from loam.driver.genai import with_config_dims

    options, config_notes = with_config_dims(model, options)
    grad = options.grad if grad is None else grad
    names = options.checkpoint_names
    table = None
    if options.architecture is not None:
        from loam.driver.architectures import architecture

        table = architecture(options.architecture)
        names = names + table.checkpoint_names
    say = progress or (lambda _msg: None)
    all_checkpoints = [Path(c) for c in (*options.checkpoints, *checkpoints)]
    # Headers are read (and refused when malformed) before the model, so a bad checkpoint fails fast.
    headers = read_headers(all_checkpoints, names=names, architecture=options.architecture)
    say(f"reading {model if not isinstance(model, onnx.ModelProto) else 'model'}")
    ir = read_model(model)
    draft = table is not None and bool(table.layout)
    if draft:
        # The table names the family's inputs and weights after the options' own rules (those of its
        # rules that reach a tensor of this graph: an export without position_ids is still a Llama);
        # every other tensor that needs names gets them drafted after stage 0 (`draft-layout`).
        from dataclasses import replace

        from loam.passes.apply_options import declared_tensors

        declared = set().union(*declared_tensors(ir).values())
        assert table is not None  # `draft` says there is one
        options = replace(options, layout=(*options.layout, *table.layout_for(declared)))
    # An initializer pointing at a raw data file of its own while a checkpoint also supplies it: which
    # one the graph meant is not for Loam to guess.
    check_external_data_sources(
        ir, None if isinstance(model, onnx.ModelProto) else model, {n: p for n, (p, _) in headers.items()}
    )
    attach_options(ir, options)
    if backend == "wgsl" and options.device_limits:
        from loam.backends.wgsl_limits import DeviceLimits

        contract.DEVICE_LIMITS.set(ir, DeviceLimits.from_mapping(options.device_limits).raised())
    # Initializers in raw ONNX external data files: the module reads them by this table at load.
    from loam.frontends.external_data import attach_external, external_rows

    external = external_rows(ir, str(model) if not isinstance(model, onnx.ModelProto) else "model")
    attach_external(ir, external)
    # pack-quantized reads which weights the checkpoint keeps in ggml blocks from here.
    stored = {n: (e.encoding, str(p)) for n, (p, e) in headers.items() if e.encoding in PACKED_ENCODINGS}
    if stored:
        contract.STORED_ENCODINGS.set(ir, stored)
    if table is not None and table.rotary_rows:
        orders = rotary_row_orders(table.rotary_rows, headers)
        if orders:
            contract.ROW_ORDERS.set(ir, tuple(orders))
    if not options.inline_weights:
        # Weights the graph carries past a few MiB go in a safetensors file beside the module.
        from loam.backends.module_text import INLINE_LIMIT

        contract.WEIGHTS_BESIDE.set(ir, INLINE_LIMIT)
    if all_checkpoints:
        # The module reads the formats it was checked against (a GGUF build carries the GGUF reader).
        from loam.frontends.gguf import is_gguf

        formats = sorted({"gguf" if is_gguf(p) else "safetensors" for p in all_checkpoints}, reverse=True)
        contract.CHECKPOINT_FORMATS.set(ir, tuple(formats))
    if names:
        # The module renames checkpoint tensors at load time by the same rules (options' first, then
        # the architecture's), read from here by the emitter.
        contract.CHECKPOINT_NAMES.set(ir, tuple(names))
    ctx = make_context()
    dump_dir = Path(dump_ir) if dump_ir is not None else None
    if dump_dir is not None:
        dump_dir.mkdir(parents=True, exist_ok=True)
        _dump(ir, dump_dir / "00-read.mlir")
    fusion = None
    try:
        for i, p in enumerate(pipeline_passes(fuse, backend, draft, grad), start=1):
            say(f"running {p.name}")
            p.apply(ctx, ir)
            if isinstance(p, FusePass):
                fusion = p.last_report
            if dump_dir is not None:
                _dump(ir, dump_dir / f"{i:02d}-{p.name}.mlir")
    except LoamError as err:
        raise _naming_the_file(err, model) from None
    pass_notes = build_notes(ir)
    if all_checkpoints or options.inline_weights:
        say("checking the checkpoint" + (" and inlining its weights" if options.inline_weights else ""))
    own_files = {row[0] for row in external}
    notes = check_checkpoints(ir, all_checkpoints, headers, inline=options.inline_weights, external=own_files)
    notes += config_notes + pass_notes
    model_path = None if isinstance(model, onnx.ModelProto) else Path(model)
    if options.inline_weights and external:
        from loam.frontends.external_data import inline_external

        inline_external(ir, external, model_path)
    read = {spec.name for _, spec in weight_specs(ir)}
    if any(row[0] in read for row in external):
        from loam.frontends.external_data import load_note

        notes.append(load_note([row for row in external if row[0] in read], model_path))
    say(f"emitting the {backend} module")
    if backend == "wgsl":
        from loam.backends.wgsl_module import wgsl_module

        source, device, weights = wgsl_module(ir, host_fallback, beside=True)
        if fusion is not None:
            fusion.device = device
    else:
        source, weights = numpy_module(ir)
    module = import_source(source, "loam_generated", weights)
    return BuildResult(source, build_report(ir), module, ir, notes, fusion, weights)


def _naming_the_file(err: LoamError, model: str | Path | onnx.ModelProto) -> LoamError:
    """A pass's refusal names the node, tensor or axis; the build's names the model file first, as every
    reader's refusal does (a ModelProto given in memory has no file to name)."""
    if isinstance(model, (str, Path)) and str(model) not in str(err):
        err.args = (f"{model}: {err}", *err.args[1:])
    return err


def _dump(ir: ModuleOp, path: Path) -> None:
    with open(path, "w") as f:
        Printer(stream=f).print_op(ir)
        f.write("\n")


def import_source(source: str, name: str, weights: bytes | None = None) -> types.ModuleType:
    """Import generated source as a module (it is Loam's own output, never model content); `weights`
    are the bytes of the file it would find beside itself (`BuildResult.weights`)."""
    module = types.ModuleType(name)
    module.__file__ = f"<{name}>"
    sys.modules[name] = module  # NamedTuple and dataclass machinery look the module up by name
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    if weights is not None:
        module._BESIDE_DATA = weights  # type: ignore[attr-defined]  # the generated source declares this global
    return module


def weight_specs(ir: ModuleOp) -> Iterator[tuple[WeightOp, WeightSpec]]:
    """Each weight the program reads from a checkpoint (it carries no data), with what it expects."""
    from loam.dialects.kernel import WeightOp
    from loam.frontends.checkpoint import WeightSpec

    for op in ir.walk():
        if isinstance(op, WeightOp) and op.data is None:
            t = op.result.type
            assert isinstance(t, AxesTensorType)
            axes = tuple((a.name, a.extent.const_value) for a in t.axes)
            yield op, WeightSpec(op.weight_name.data, t.elem, axes)


def rotary_row_orders(
    rules: Sequence[tuple[str, str]], found: Mapping[str, tuple[Path, HeaderEntry]]
) -> list[tuple[str, int]]:
    """(checkpoint tensor, head count) for each GGUF tensor an architecture's `rotary_rows` rule
    names, the head count read from the file's metadata (CheckpointError when it lacks the key)."""
    from loam.frontends.gguf import is_gguf, read_gguf_header
    from loam.runtime.gguf import graph_name_of

    metadata: dict[Path, dict[str, object]] = {}
    orders: list[tuple[str, int]] = []
    for path, entry in sorted(found.values(), key=lambda item: item[1].name):
        if not is_gguf(path):
            continue
        for pattern, key in rules:
            if graph_name_of(entry.name, ((pattern, "\0"),)) != "\0":  # the glob does not match
                continue
            if path not in metadata:
                metadata[path] = read_gguf_header(path)[0]
            heads = metadata[path].get(key)
            if not isinstance(heads, int) or heads <= 0:
                raise CheckpointError(
                    f"checkpoint {path}: tensor '{entry.name}' has its rows interleaved for a rotary embedding, "
                    f"and the head count that undoes it, metadata '{key}', is {heads!r}"
                )
            orders.append((entry.name, heads))
            break
    return orders


def check_checkpoints(
    ir: ModuleOp,
    paths: Sequence[Path],
    found: Mapping[str, tuple[Path, HeaderEntry]],
    *,
    inline: bool,
    external: set[str] | frozenset[str] = frozenset(),
) -> list[str]:
    """Check every weight the program reads against the checkpoints' headers; inline them if asked.

    Only the headers are read, unless `inline` (the `inline_weights` option) asks for the weights
    to be written into the module: then each weight's own byte range is read too.  The weights named
    in `external` are ONNX external data in files of their own, which no checkpoint supplies.
    """
    from loam.dialects.graph import TensorDataAttr
    from loam.frontends.checkpoint import check_weights, read_tensor

    specs = [(op, spec) for op, spec in weight_specs(ir) if spec.name not in external]
    if not paths:
        if inline and specs:
            raise CheckpointError(
                f"inline_weights: the graph reads {len(specs)} weights it does not carry "
                f"(first '{specs[0][1].name}'); give the checkpoint that holds them"
            )
        return []
    notes = check_weights(paths, found, [s for _, s in specs])
    if inline:
        for op, spec in specs:
            path, entry = found[spec.name]
            value = read_tensor(path, entry).astype(spec.elem.numpy)
            op.properties["data"] = TensorDataAttr.from_numpy(value, spec.elem, name=spec.name)
    return notes


def node_kernels(ir: ModuleOp) -> dict[str, list[str]]:
    """Each ONNX node that emits code, in program order, and the kernels that compute it: a kernel's
    op name (`+epilogue` for a product the fuse pass finished with an epilogue); a kernel fused into
    another node's, as listed under a node it composed, reads `NAME (fused into NODE)`."""
    from loam.dialects.kernel import ProgramOp

    kernels: dict[str, list[str]] = {}
    for op in ir.walk():
        if isinstance(op, ProgramOp):
            continue
        node = op.properties.get("node")
        if isinstance(node, StringAttr):
            # A product finished by an epilogue the fuse pass gave it.
            name = f"{op.name}+epilogue" if op.properties.get("epilogue") is not None else op.name
            # A kernel the fuse pass composed: its producers' nodes.
            for member in contract.FUSED.get(op) or ():
                if member != node.data:
                    kernels.setdefault(member, []).append(f"{name} (fused into {node.data})")
            kernels.setdefault(node.data, []).append(name)
    return kernels


def build_report(ir: ModuleOp) -> str:
    """One line per ONNX node that emits code: the node's name and the kernels that compute it
    (`node_kernels`)."""
    kernels = node_kernels(ir)
    if not kernels:
        return ""
    width = max(len("node"), *(len(n) for n in kernels)) + 2
    lines = [f"{'node':<{width}}kernels"] + [f"{n:<{width}}{', '.join(k)}" for n, k in kernels.items()]
    return "\n".join(lines) + "\n"
