"""`loam`: the one-shot driver for model deployers (`loam build MODEL -o OUT.py`).

`loam build` turns a model (`.onnx`, `.onnxtext`, JAX's StableHLO `.mlir` or graph-dialect `.mlir`)
plus a checkpoint and options into one self-contained Python module, and prints the build report (fusion decisions)
on stderr.  The options come from an optional TOML file (`--options`) with the flags applied on
top (`loam.driver.options.Options.merged`), so a flag and a TOML key always mean the same thing.  A build
is stored in the build cache (`loam.driver.cache`) under a key of the graph, the checkpoint headers and
the options, so rebuilding after a checkpoint's payload changed costs nothing.  `loam split` turns
an `.onnx` with its weights into the textual graph + safetensors pair the build reads (`loam.tools.split`).

This module only turns the command line into a call of `loam.driver.pipeline.build`; it checks what it
can without the graph (flag syntax, that the files exist) so that those mistakes are reported
before any compiling starts.  Errors follow `loam.tools._cli`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING

from loam.core.errors import CheckpointError, LoamError, ModelError, OptionsError, UsageError
from loam.driver.options import INT8_ACTIVATIONS_HELP, Options, Value, checked_value
from loam.tools._cli import EXIT_USAGE, CliParser, fail, run_guarded, wants_debug
from loam.tools.text_commands import add_memory_flags

if TYPE_CHECKING:
    from loam.core.layout import LayoutRule

__all__ = ["build_parser", "main", "options_from_args", "value_flag"]

PROG = "loam"


def _version_line() -> str:
    def of(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "unknown"

    return f"{PROG} {of('loam')} (xdsl {of('xdsl')}, onnx {of('onnx')})"


def _dims_flag(text: str) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    name, value = name.strip(), value.strip()
    if not sep or not name or not value.isdigit():
        raise argparse.ArgumentTypeError(f"expected NAME=N with N a non-negative integer, got {text!r}")
    return name, int(value)


def value_flag(text: str) -> tuple[str, Value]:
    """`--value NAME=V`: V is true or false, an integer, a float, or integers separated by commas (in
    brackets for a list of one, `[2]`, or none, `[]`)."""
    name, sep, raw = text.partition("=")
    name, raw = name.strip(), raw.strip()
    expected = (
        f"expected NAME=V with V true, false, an integer, a float or a list of integers (1,2 or [1]), got {text!r}"
    )
    if not sep or not name or not raw:
        raise argparse.ArgumentTypeError(expected)
    value: Value
    try:
        if raw.startswith("[") and raw.endswith("]"):
            inner = raw[1:-1].strip()
            value = tuple(int(v) for v in inner.split(",")) if inner else ()
        elif "," in raw:
            value = tuple(int(v) for v in raw.split(","))
        elif raw in ("true", "false"):
            value = raw == "true"
        else:
            try:
                value = int(raw)
            except ValueError:
                value = float(raw)
        return name, checked_value(name, value, "--value")
    except (ValueError, OptionsError):
        raise argparse.ArgumentTypeError(expected) from None


def _interface_flag(text: str) -> tuple[str, tuple[int | str, ...]]:
    name, sep, value = text.partition("=")
    name = name.strip()
    dims = tuple(d.strip() for d in value.split(","))
    if not sep or not name or not all(dims):
        raise argparse.ArgumentTypeError(f"expected NAME=DIM,DIM,... (dim_param names or integers), got {text!r}")
    return name, tuple(int(d) if d.isdigit() else d for d in dims)


def _outputs_flag(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(","))
    if not all(names):
        raise argparse.ArgumentTypeError(f"expected comma-separated output names, got {text!r}")
    return names


def _layout_flag(text: str) -> LayoutRule:
    from loam.core.layout import parse_layout_flag

    try:
        return parse_layout_flag(text)
    except LoamError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


_LAYOUT_HELP = """\
name the axes of the tensors whose names match GLOB, e.g.
'fc1.weight=Hidden,In' or 'encoder.*.bias=Hidden'; a merged axis
is written '(C H W)'; repeatable; tried in order, before the
options file's [[layout]] rules"""

_EPILOG = """\
The options file (--options) holds the same settings as the flags:
  architecture = "NAME"      inline_weights = true      outputs = ["y"]
  checkpoint = "weights.safetensors"   (or a list; relative to the file)
  grad = true                grad_of = ["fc1.weight"]     int8_activations = true (or false)
  [dims]      N = 4
  [values]    sr = 16000     (a graph input's value: an integer, a float, true/false or [1, 2])
  [[layout]]  pattern = "fc1.weight"  axes = ["Hidden", "In"]  graph = "main" (optional)
Flags override the file: --outputs, --architecture, --inline-weights and --grad replace its value,
--dims and --value replace the same name, --layout rules come before the file's rules, and
--checkpoint replaces the file's checkpoint list.

Values: --value NAME=V (or [values] NAME = V) fixes graph input NAME to V, as a deployment that
always feeds it one value does (Silero VAD's sample rate: --value sr=16000).  The input leaves
forward's signature (a build note says so) and the build folds what it decides: an If whose
condition it fixes keeps only the branch taken, a Reduce's axes or a CumSum's axis input becomes
known.  V must suit the input's declaration: true/false for a bool, an integer (or a list of
integers, 0,2 or [1]) for an integer type, a number for a float; a list holds as many integers as
the input has elements.

Checkpoints: a .safetensors file (repeat --checkpoint for shards), a Hugging Face
model.safetensors.index.json (its weight_map names each tensor's shard), or a .gguf file.
The build reads only their headers.

Build cache: a build is stored under a key of the graph file's bytes, each checkpoint's
header, the options and Loam's version, in $LOAM_CACHE_DIR (default ~/.cache/loam).  A
rebuild whose only change is a checkpoint's payload is a hit ("loam: cache hit (KEY)")
unless inline_weights is on.  --no-cache neither reads nor writes it; --dump-ir and
--report always build.

Backends: --backend numpy (default) prints a module that computes with numpy; --backend wgsl
one that runs every kernel as a WebGPU compute shader through the `wgpu` package (weights
uploaded once, activations kept on the device, only inputs and outputs crossing), with the same
API.  A kernel with no WGSL form stops the build naming its node, unless --host-fallback: then it
runs in numpy on the host (operands down, results up; f64/ui32/ui64 values stay on the host) and
the report lists it with its reason.  Every kernel fits WebGPU's default limits (8 storage buffers
per shader: past them a shader reads its last operands from one packed buffer; 16 KiB of workgroup
memory, 256 invocations per workgroup, 128 MiB per binding, 256 MiB per buffer), and the module
requests exactly those of the adapter; --device-limits FILE raises them for a known device.  A
kernel that cannot fit stops the build naming the node and the limit.

Browser: --target browser -o DIR builds the WGSL module and writes it for a page: DIR/model.js
(`await Weights.load(new URL('./weights/', import.meta.url))`, `await forward(weights, ...inputs)` on
Tensor(dtype, typedArray, shape) values; ShapeError and LoadError name the input or tensor and the
axis) and DIR/weights/ (the tensors forward uploads, checked against the checkpoint at build time).
With --host-fallback the page computes the kernels that have no WGSL form yet on its own CPU, in
JavaScript (NonZero, Range, an i64 reduction or cast, a random draw: what the WGSL module computes
in numpy; another is refused naming it); forward then takes a last options object ({seed}) where the
model draws random numbers, and a seed repeats the page's draws (not numpy's).
`loam browser-run DIR --inputs IN.npz -o OUT.npz` runs it once in headless Chromium.  With --grad,
forward takes the upstream gradients grad.O after the inputs and returns grad.W after the outputs.

Gradients: --grad adds the `differentiate` pass after lowering: reverse mode over the kernel ops,
each op's grad clause written as more kernel ops (elementwise steps, products, layout changes,
casts, softmax, reductions, cumulative sums, convolutions, max pooling, gathers, top-k, slices, pads,
concatenations, splits, tiles, triangles, layer and instance norms so far; a kernel with no clause
yet stops the build naming its node),
compiled by the same passes as the forward.  forward(weights, *inputs,
*upstream_grads) then returns the outputs and grad.W for each weight (--grad-of NAMES picks them,
and may name a float input for its grad.X).

Fusion: chains of elementwise kernels and the epilogues of products are fused (the `fuse` pass;
objective memory for numpy, dispatch for wgsl) unless --no-fuse; --fuse-objective picks the
objective (dispatch: fewer launches, cheap producers computed in each reader, no i64 chains).
--report FILE writes every ONNX node's decision (folded / fused into group G / kept alone, with
a reason and the bytes fusion saves) as aligned text, or as --report-format json or dot.

Exit status: 0 built, 1 the model/checkpoint/options were refused (one message on stderr),
2 bad command line, 3 internal error (please report it; --debug shows the traceback)."""


def _model_arguments(
    parser: argparse.ArgumentParser,
    *,
    output: tuple[str, str],
    checkpoint: str,
    options: str,
    output_required: bool = True,
) -> None:
    """The arguments `loam build` and `loam layout` share: MODEL, -o, --checkpoint, --options, --layout."""
    parser.add_argument("model", type=Path, metavar="MODEL", help="the model file")
    parser.add_argument("-o", "--output", required=output_required, metavar=output[0], help=output[1])
    parser.add_argument("--checkpoint", action="append", type=Path, default=[], metavar="FILE", help=checkpoint)
    parser.add_argument("--options", type=Path, metavar="FILE.toml", help=options)
    parser.add_argument(
        "--layout", action="append", type=_layout_flag, default=[], metavar="GLOB=Ax1,Ax2", help=_LAYOUT_HELP
    )


def build_parser() -> CliParser:
    """The `loam` command line (exposed for tests and documentation)."""
    parser = CliParser(
        prog=PROG, description="Loam: compile an ONNX model ahead of time into a self-contained Python module."
    )
    parser.add_argument("--version", action="version", version=_version_line())
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=CliParser)
    build = commands.add_parser(
        "build",
        help="compile MODEL into a Python module",
        description="Compile MODEL (.onnx, .onnxtext, StableHLO .mlir as JAX prints it, or graph-dialect .mlir) "
        "with its checkpoint "
        "into one Python module that imports only numpy (and numba, where installed, to compile its "
        "products over packed GGUF weights), and print the build report on stderr.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _model_arguments(
        build,
        output=("OUT.py", "where to write the generated module ('-' for stdout)"),
        checkpoint="a checkpoint with the weights: .safetensors (repeat for shards), a Hugging Face "
        "model.safetensors.index.json, or .gguf",
        options="read build options from a TOML file (see below)",
        output_required=False,  # not with --print-pipeline; checked in _build
    )
    build.add_argument(
        "--dims",
        action="append",
        type=_dims_flag,
        default=[],
        metavar="NAME=N",
        help="fix the symbolic extent (dim_param) NAME to N; repeatable",
    )
    build.add_argument(
        "--value",
        action="append",
        type=value_flag,
        default=[],
        metavar="NAME=V",
        help="fix graph input NAME to the value V (true/false, an integer, a float, or integers 0,2); forward no "
        "longer takes it and the build folds what it decides (see below); repeatable",
    )
    build.add_argument(
        "--interface",
        action="append",
        type=_interface_flag,
        default=[],
        metavar="NAME=DIM,DIM,...",
        help="declare graph input or output NAME with these dims (dim_param names or integers, one per "
        "axis) instead of the model's own, for an export that declares one wrongly "
        "(optimum's merged decoder: --interface attention_mask=batch_size,attention_length); repeatable",
    )
    build.add_argument(
        "--outputs",
        type=_outputs_flag,
        metavar="a,b",
        help="cut the graph: compute only these outputs (comma-separated names)",
    )
    build.add_argument("--architecture", metavar="NAME", help="name axes from a built-in architecture table")
    build.add_argument(
        "--inline-weights",
        action="store_true",
        default=None,
        help="embed every weight in the module's source (Weights.embedded()), the checkpoint's too; without "
        "it, initializers the model file carries past 1 MiB go in OUTPUT's name with .safetensors, beside it",
    )
    build.add_argument(
        "--dump-ir", type=Path, metavar="DIR", help="write the IR after each stage into DIR (as .mlir files)"
    )
    build.add_argument(
        "--no-cache", action="store_true", help="build without reading or writing the build cache (see below)"
    )
    build.add_argument(
        "--backend",
        choices=("numpy", "wgsl"),
        default=None,
        help="what the module computes with: numpy (default) or WebGPU compute shaders through wgpu (see below)",
    )
    build.add_argument(
        "--target",
        choices=("python", "browser"),
        default="python",
        help="python (default): one Python module, -o FILE.py; browser: a folder -o DIR holding model.js (an ES "
        "module running the WGSL kernels through WebGPU) and weights/ (safetensors shards of at most 16 MiB, "
        "manifest.json with their sha256); see below",
    )
    build.add_argument(
        "--host-fallback",
        action="store_true",
        help="with --backend wgsl: compute kernels that have no WGSL form on the host (numpy) instead of refusing "
        "them; with --target browser: on the page's CPU (JavaScript), for the kernels the browser runtime has",
    )
    build.add_argument(
        "--device-limits",
        type=Path,
        metavar="FILE",
        help="with --backend wgsl or --target browser: the target device's WebGPU limits (a JSON object such as "
        "JSON.stringify(adapter.limits) gives, or a TOML table, e.g. maxStorageBuffersPerShaderStage = 10) where "
        "it offers more than WebGPU's defaults, which the kernels are otherwise built within",
    )
    build.add_argument(
        "--grad",
        action="store_true",
        help="forward also returns each float weight's gradient (output grad.W) from the upstream gradients of "
        "the outputs (inputs grad.O, after the model's own); see below",
    )
    build.add_argument(
        "--grad-of",
        metavar="NAMES",
        type=lambda text: tuple(n for n in text.split(",") if n),
        help="with --grad: only these weights, and these float inputs too (comma-separated graph names)",
    )
    build.add_argument("--no-fuse", action="store_true", help="build without the fuse pass (see below)")
    build.add_argument("--int8-activations", action=argparse.BooleanOptionalAction, help=INT8_ACTIVATIONS_HELP)
    build.add_argument(
        "--print-pipeline",
        action="store_true",
        help="print the passes this build runs as a `loam-opt -p` string and stop; `loam-opt` replays them on the "
        "IR `--dump-ir` writes first (00-read.mlir), and `-t python` / `-t wgsl` prints the same module",
    )
    build.add_argument(
        "--fuse-objective",
        choices=("memory", "dispatch"),
        default=None,
        help="what fusion minimises: passes over memory (the numpy default) or kernel launches (the wgsl default)",
    )
    build.add_argument(
        "--report", metavar="FILE", help="write the fusion decision report to FILE ('-' for stderr; see below)"
    )
    build.add_argument(
        "--report-format",
        choices=("text", "json", "dot"),
        default="text",
        help="the report's format: aligned text (default), JSON (one object per node) or Graphviz DOT",
    )
    build.add_argument("--debug", action="store_true", help="show the Python traceback of an error instead of one line")

    split = commands.add_parser(
        "split",
        help="split MODEL.onnx into a textual graph and a safetensors checkpoint",
        description="Write DIR/MODEL.onnxtext, whose float initializers carry no values (external-data "
        "entries pointing into the checkpoint), and DIR/MODEL.safetensors holding them under the "
        "graph's names; integer and bool initializers keep their values in the graph. Build the pair "
        "with `loam build DIR/MODEL.onnxtext --checkpoint DIR/MODEL.safetensors`.",
    )
    split.add_argument("model", type=Path, metavar="MODEL", help="the model (.onnx, or .onnxtext carrying values)")
    split.add_argument(
        "-o", "--output", required=True, type=Path, metavar="DIR", help="the folder to write into (created)"
    )
    split.add_argument("--debug", action="store_true", help="show the Python traceback of an error instead of one line")

    browser_run = commands.add_parser(
        "browser-run",
        help="run a browser module once in headless Chromium on the arrays of an .npz file",
        description="Serve DIR (what `loam build --target browser -o DIR` wrote) on 127.0.0.1, open it in headless "
        "Chromium with WebGPU on (SwiftShader where there is no GPU), run forward once on the arrays of IN.npz "
        "(named by input) and write the outputs, named by output, to OUT.npz. A module error (ShapeError, "
        "LoadError, DeviceError) is printed and the command exits with 1. The browser is the system's "
        "(Debian: apt-get install chromium chromium-driver); nothing is downloaded.",
    )
    browser_run.add_argument("folder", type=Path, metavar="DIR", help="the folder holding model.js and weights/")
    browser_run.add_argument(
        "--inputs", required=True, type=Path, metavar="IN.npz", help="forward's inputs, one array per input name"
    )
    browser_run.add_argument(
        "-o", "--output", required=True, type=Path, metavar="OUT.npz", help="where the outputs are written"
    )
    browser_run.add_argument(
        "--chromium", metavar="PATH", help="the Chromium executable (default: chromium on PATH; chromedriver beside it)"
    )
    browser_run.add_argument(
        "--seed",
        type=int,
        metavar="N",
        help="seed the page's random draws (a module built with --host-fallback whose model draws: forward's "
        "{seed}); the same N repeats them",
    )
    browser_run.add_argument(
        "--debug", action="store_true", help="show the Python traceback of an error instead of one line"
    )

    layout = commands.add_parser(
        "layout",
        help="draft a complete axis layout for MODEL",
        description="Draft a complete axis layout for MODEL: one [[layout]] rule per tensor that needs one, "
        "naming axes from dim_params and from the axes each tensor meets in the nodes that read it, "
        "and inventing readable names for the rest (listed on stderr; rename them freely). The "
        "draft is checked by a full build before it is written, and `loam build MODEL --options "
        "OUT.toml` accepts it unedited.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _model_arguments(
        layout,
        output=("OUT.toml", "where to write the layout ('-' for stdout)"),
        checkpoint="a checkpoint to check the drafted layout against; repeat for shards",
        options="build options whose layout rules the draft keeps",
    )
    layout.add_argument(
        "--dims", action="append", type=_dims_flag, default=[], metavar="NAME=N", help="fix dim_param NAME to N"
    )
    layout.add_argument(
        "--value",
        action="append",
        type=value_flag,
        default=[],
        metavar="NAME=V",
        help="fix graph input NAME to the value V (as loam build)",
    )
    layout.add_argument(
        "--interface",
        action="append",
        type=_interface_flag,
        default=[],
        metavar="NAME=DIM,DIM,...",
        help="declare graph input or output NAME with these dims instead of the model's own (as loam build)",
    )
    layout.add_argument(
        "--debug", action="store_true", help="show the Python traceback of an error instead of one line"
    )
    generate = commands.add_parser(
        "generate",
        help="continue a prompt with a decoder module Loam built",
        description="Continue a prompt with MODULE.py (or DIR, a text package folder Loam builds through its "
        "build cache: a model.json's, or onnxruntime-genai's as its builder wrote it), a causal language model "
        "Loam built from its export "
        "with a past (inputs input_ids, attention_mask, past_key_values.N.key/value; outputs logits, "
        "present.N.key/value). The prompt goes through in one pass, then one token per step through the "
        "past; the text streams to stdout as it is produced, and the tokens per second of the prompt and "
        "of the steps go to stderr at the end. The tokenizer comes from the GGUF checkpoint's metadata "
        "(a package's: its own) unless --tokenizer names a tokenizer.json.",
    )
    generate.add_argument(
        "module",
        type=Path,
        metavar="MODULE.py|DIR",
        help="the module `loam build` wrote, or a package folder (`loam serve`'s: a model.json, or an "
        "onnxruntime-genai folder as its builder wrote it), built through the build cache",
    )
    generate.add_argument(
        "--checkpoint",
        type=Path,
        metavar="FILE",
        help="the module's weights (a GGUF file carries the tokenizer); a package folder names its own",
    )
    generate.add_argument("--prompt", required=True, help="the text to continue (with --chat: the user's message)")
    generate.add_argument(
        "--chat", action="store_true", help="render the prompt as a user message with the model's chat template"
    )
    generate.add_argument("--system", metavar="TEXT", help="with --chat: a system message before the user's")
    generate.add_argument(
        "--max-new-tokens", type=int, default=64, metavar="N", help="stop after N new tokens (default 64)"
    )
    generate.add_argument(
        "--temperature",
        type=float,
        metavar="T",
        help="0: greedy; above 0: sample at T (default: greedy, or a package's search defaults)",
    )
    generate.add_argument("--seed", type=int, default=0, metavar="S", help="the sampling seed (default 0)")
    generate.add_argument(
        "--no-stop", action="store_true", help="go on past the end-of-text token up to --max-new-tokens"
    )
    generate.add_argument("--tokenizer", type=Path, metavar="FILE.json", help="a tokenizer.json to use instead")
    generate.add_argument(
        "--widen",
        action="store_true",
        help="widen 4/8-bit weights to float32 at load: about 4x their memory, decoding about 3x faster",
    )
    generate.add_argument(
        "--debug", action="store_true", help="show the Python traceback of an error instead of one line"
    )
    serve = commands.add_parser(
        "serve",
        help="serve packages over an OpenAI-compatible HTTP API",
        description="Serve the model packages in PACKAGE_DIR... (each a folder with a model.json, or an "
        "onnxruntime-genai folder as its model builder wrote it; see the README's Serving section) over HTTP: "
        "/v1/models, /v1/completions, /v1/chat/completions (with Server-Sent Events "
        "streaming), /v1/embeddings, /v1/score, /v1/rerank and /pooling (a sequence package: a cross-encoder's "
        "scores, an encoder's rows), /health and Prometheus /metrics. Each package is built through the build "
        "cache, its checkpoints opened once and every header checked before the server accepts a request. "
        "Requests of one model run in cohorts, oldest first, on the model's own worker thread.",
    )
    serve.add_argument("packages", nargs="*", type=Path, metavar="PACKAGE_DIR", help="package folders to serve")
    serve.add_argument("--host", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="the port to listen on (default 8000; 0: any free port)")
    serve.add_argument(
        "--package-root",
        action="append",
        type=Path,
        default=[],
        metavar="DIR",
        help="allow POST /v1/packages to register folders under DIR (repeatable); without it, HTTP registration "
        "is refused",
    )
    add_memory_flags(serve)
    ray = serve.add_argument_group(
        "on Ray Serve (several processes or machines)",
        "With --ray the same server runs as a Ray Serve deployment: each replica is a process that registers the "
        "packages itself (its own engine, through its machine's build cache); Ray's HTTP proxy on --host:--port "
        "spreads requests over the replicas, and Ray replaces one whose process dies. Needs Ray Serve (the `ray` "
        "extra); every machine must have Loam installed and the package folders at the same paths.",
    )
    ray.add_argument("--ray", action="store_true", help="serve through Ray Serve instead of one process")
    ray.add_argument(
        "--replicas", type=int, metavar="N", help="with --ray: how many replicas serve the packages (default 1)"
    )
    ray.add_argument(
        "--replica-cpus",
        type=float,
        metavar="C",
        help="with --ray: the CPUs Ray reserves for each replica (default 1); Ray places replicas where CPUs are free",
    )
    ray.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="with --ray: the Ray cluster to deploy on (HEAD:6379 as `ray start --head` printed, or auto for the one "
        "this machine belongs to); without it a local Ray instance runs for this command and stops with it",
    )
    serve.add_argument("--debug", action="store_true", help="show the Python traceback of an error instead of one line")
    return parser


def options_from_args(args: argparse.Namespace) -> Options:
    """The build options: the `--options` file (if any) with the flags applied on top."""
    base = Options.from_toml(args.options) if args.options is not None else Options()
    return base.merged(
        architecture=getattr(args, "architecture", None),
        inline_weights=getattr(args, "inline_weights", None),
        outputs=getattr(args, "outputs", None),
        dims=dict(args.dims),
        values=dict(getattr(args, "value", [])),
        interface=dict(getattr(args, "interface", [])),
        layout=args.layout,
        checkpoints=args.checkpoint,
        grad=tuple(args.grad_of or ()) if getattr(args, "grad", False) else None,
        device_limits=_device_limits(getattr(args, "device_limits", None)),
        int8_activations=getattr(args, "int8_activations", None),
    )


def _device_limits(path: Path | None) -> dict[str, int] | None:
    """`--device-limits FILE`'s limits above WebGPU's defaults (None: not given)."""
    if path is None:
        return None
    from loam.backends.wgsl_limits import DeviceLimits

    return DeviceLimits.from_file(path).raised()


def _checked_paths(args: argparse.Namespace, options: Options) -> tuple[Path, Path | None]:
    """The model and the output file (None: stdout), refused before any compiling when a file the
    build reads (the model, `options`' checkpoints) is missing or the output folder does not exist."""
    model: Path = args.model
    if not model.is_file():
        raise ModelError(f"{model}: no such model file")
    for checkpoint in options.checkpoints:
        if not checkpoint.is_file():
            raise CheckpointError(f"{checkpoint}: no such checkpoint file")
    if args.output == "-":
        return model, None
    output = Path(args.output)
    if not output.parent.is_dir():
        raise LoamError(f"-o {output}: folder '{output.parent}' does not exist")
    return model, output


def _layout(args: argparse.Namespace) -> None:
    options = options_from_args(args)
    model, output = _checked_paths(args, options)

    from loam.driver.draft import draft_layout
    from loam.driver.pipeline import build

    print(f"{PROG}: drafting the layout of {model}", file=sys.stderr, flush=True)
    draft = draft_layout(model, options=options)
    print(f"{PROG}: checking the draft with a full build", file=sys.stderr, flush=True)
    build(model, options=draft.options(options))
    text = draft.toml()
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text, encoding="utf-8")
    invented = ", ".join(draft.invented) if draft.invented else "none"
    print(f"{PROG}: invented axis names (rename them in the layout): {invented}", file=sys.stderr)
    if output is not None:
        print(f"{PROG}: wrote {output} ({len(draft.given) + len(draft.rules)} rules)", file=sys.stderr)


def _build(args: argparse.Namespace) -> None:
    if args.target == "browser" and args.backend == "numpy":
        raise UsageError("--target browser runs the WGSL kernels: it takes no --backend numpy")
    args.backend = args.backend or ("wgsl" if args.target == "browser" else "numpy")
    objective = args.fuse_objective or ("dispatch" if args.backend == "wgsl" else "memory")
    fuse = None if args.no_fuse else objective
    if args.grad_of and not args.grad:
        raise UsageError("--grad-of names the weights --grad differentiates: give --grad too")
    options = options_from_args(args)
    grad = options.grad  # the flags', else the options file's
    if args.print_pipeline:
        from loam.driver.architectures import architecture
        from loam.driver.pipeline import pipeline_text

        chosen = options.architecture
        draft = chosen is not None and bool(architecture(chosen).layout)
        print(pipeline_text(fuse, args.backend, draft=draft, grad=grad))
        return
    if args.output is None:
        # As argparse says it for a missing argument (the flag is optional only for --print-pipeline).
        fail(
            f"{PROG} build",
            f"the following arguments are required: -o/--output (see '{PROG} build --help')",
            EXIT_USAGE,
        )
    if args.no_fuse and args.report is not None:
        raise UsageError("--report describes the fuse pass's decisions; it cannot be given with --no-fuse")
    if args.target == "browser":
        _build_browser(args, fuse, options)
        return
    model, output = _checked_paths(args, options)

    from loam.driver import cache

    # --dump-ir and --report ask for the IR of a real build, so they bypass the cache.
    real = args.no_cache or args.dump_ir is not None or args.report is not None
    if args.host_fallback and args.backend != "wgsl":
        raise UsageError("--host-fallback needs --backend wgsl (the numpy backend computes everything on the host)")
    if args.device_limits is not None and args.backend != "wgsl":
        raise UsageError("--device-limits describes a WebGPU device: it needs --backend wgsl or --target browser")
    extra = {"fuse": fuse, "backend": args.backend, "host_fallback": args.host_fallback, "grad": grad}
    from loam.driver.genai import config_digest

    if (digest := config_digest(model)) is not None:  # it fixes extents (loam.driver.genai): a new one is a new build
        extra["genai_config"] = digest

    def make() -> cache.CachedBuild:
        from loam.driver.pipeline import build

        # The checkpoints travel inside `options` (already merged: flags replace the file's list).
        result = build(
            model, checkpoints=(), options=options, dump_ir=args.dump_ir, progress=_progress, fuse=fuse,
            backend=args.backend, host_fallback=args.host_fallback, grad=grad,
        )  # fmt: skip
        if args.report is not None and result.fusion is not None:
            from loam.passes.fuse import write_report

            write_report(result.fusion, args.report, args.report_format)
            if args.report != "-":
                _progress(f"wrote the fusion report to {args.report}")
        return cache.CachedBuild(result.source, result.report, tuple(result.notes), result.weights)

    from loam.driver.pipeline import beside_path, write_module

    if output is not None:
        _not_an_input(beside_path(output), model, options, args)
    built = make() if real else cache.cached(model, options, extra, make, _progress)[0]
    for note in built.notes:
        _progress(f"note: {note}")
    if output is None and built.weights is not None:
        raise UsageError(
            f"{model} carries {len(built.weights) / 2**20:.1f} MiB of weights, which the module keeps in a "
            "safetensors file beside itself: give -o FILE.py to write both, or --inline-weights to print "
            "them into the source"
        )
    written = [] if output is None else write_module(output, built.source, built.weights)
    if output is None:
        sys.stdout.write(built.source)
        sys.stdout.flush()
    if built.report:
        sys.stderr.write(_node_report_text(built.report))
    if written:
        sys.stderr.write(f"{PROG}: wrote {' and its weights '.join(map(str, written))}\n")


def _progress(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


def _build_browser(args: argparse.Namespace, fuse: str | None, options: Options) -> None:
    """`loam build --target browser -o DIR`: the WGSL module written as DIR/model.js and DIR/weights/."""
    if args.output == "-":
        raise UsageError("--target browser writes a folder: give -o DIR")
    model, output = _checked_paths(args, options)
    assert output is not None
    if output.exists() and not output.is_dir():
        raise UsageError(f"-o {output}: --target browser writes a folder, and {output} is a file")
    if any(p.is_relative_to(output.resolve()) for p in _build_inputs(model, options, args)):
        raise UsageError(f"-o {output}: the folder holds one of this build's inputs; write the module somewhere else")

    from loam.backends.browser_module import write_browser_module
    from loam.driver.pipeline import build

    result = build(
        model, checkpoints=(), options=options, dump_ir=args.dump_ir, progress=_progress, fuse=fuse, backend="wgsl",
        host_fallback=args.host_fallback,
    )  # fmt: skip
    if args.report is not None and result.fusion is not None:
        from loam.passes.fuse import write_report

        write_report(result.fusion, args.report, args.report_format)
    for note in result.notes:
        _progress(f"note: {note}")
    _progress("writing the browser module and its weight shards")
    # A model whose initializers are ONNX external data: its data files are checkpoints here (`_read_external`).
    outside = sorted({row[1] for row in getattr(result.module.Weights, "_EXTERNAL", ())})
    sources = [*options.checkpoints, *(model.parent / location for location in outside)]
    written = write_browser_module(output, result.source, result.module, sources, model.stem)
    if result.report:
        sys.stderr.write(_node_report_text(result.report))
    shards = [p for p in written if p.suffix == ".safetensors"]
    size = sum(p.stat().st_size for p in shards)
    sys.stderr.write(f"{PROG}: wrote {written[0]} and {len(shards)} weight shard(s) ({size / 2**20:.1f} MiB)\n")


def _build_inputs(model: Path, options: Options, args: argparse.Namespace) -> set[Path]:
    """The files a build reads (resolved): the model, its checkpoints, its options file."""
    return {p.resolve() for p in (model, *options.checkpoints, *([args.options] if args.options else []))}


def _not_an_input(weights: Path, model: Path, options: Options, args: argparse.Namespace) -> None:
    """Refuse a module path, or the weights path beside it, that names one of the build's inputs
    (writing there would lose it)."""
    inputs = _build_inputs(model, options, args)
    if Path(args.output).resolve() in inputs:
        raise UsageError(f"-o {args.output} is one of this build's inputs; write the module somewhere else")
    if weights.resolve() in inputs:
        raise UsageError(
            f"-o {args.output}: its weights would be written to {weights}, one of this build's inputs; "
            "write the module somewhere else, or under another name"
        )


_REPORT_LINES = 100
"""Nodes up to which `loam build` lists every node's kernels on stderr; a larger graph gets a count per kernel."""


def _node_report_text(report: str) -> str:
    """The build's node report as stderr shows it: whole for a small graph, counted for a large one."""
    lines = report.rstrip("\n").splitlines()
    if len(lines) <= _REPORT_LINES + 1:
        return "\n".join(lines) + "\n"
    counts: dict[str, int] = {}
    column = lines[0].find("kernels")  # the node column may hold spaces ("relabel attention_mask")
    for line in lines[1:]:
        listed_kernels = line[column:].strip() if column > 0 else line.split(None, 1)[-1]
        for kernel in listed_kernels.split(" (")[0].split(", ") if listed_kernels else []:
            counts[kernel] = counts.get(kernel, 0) + 1
    listed = ", ".join(f"{n} {k}" for k, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])))
    return f"{len(lines) - 1} nodes emit code: {listed} (--dump-ir DIR shows the kernel of each)\n"


def _split(args: argparse.Namespace) -> None:
    from loam.tools.split import main_split

    main_split(args.model, args.output, prog=PROG)


def _browser_run(args: argparse.Namespace) -> None:
    from loam.tools.browser_run import browser_run

    if not args.inputs.is_file():
        raise UsageError(f"--inputs {args.inputs}: no such file")
    if not args.output.parent.is_dir():
        raise UsageError(f"-o {args.output}: folder '{args.output.parent}' does not exist")
    _progress(f"running {args.folder / 'model.js'} in headless Chromium")
    names, ms = browser_run(args.folder, args.inputs, args.output, args.chromium, args.seed)
    print(f"{PROG}: forward took {ms:.1f} ms in the page; wrote {', '.join(names)} to {args.output}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the `loam` console script."""
    arguments = list(sys.argv[1:] if argv is None else argv)

    def body() -> None:
        args = build_parser().parse_args(arguments)
        if args.command == "build":
            _build(args)
        elif args.command == "layout":
            _layout(args)
        elif args.command == "split":
            _split(args)
        elif args.command == "generate":
            from loam.tools.text_commands import generate_command

            generate_command(args)
        elif args.command == "serve":
            from loam.tools.text_commands import serve_command

            serve_command(args)
        elif args.command == "browser-run":
            _browser_run(args)

    raise SystemExit(run_guarded(PROG, body, debug=wants_debug(arguments)))


if __name__ == "__main__":
    main()
