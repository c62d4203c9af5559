"""`loam serve` and `loam generate`: the commands that run text and embedding packages.

`loam serve PACKAGE...` starts the OpenAI-compatible server (`loam.serve`), here or on Ray Serve;
`loam generate` decodes one prompt from a built module and its checkpoint, or from a package folder
(an onnxruntime-genai folder included: its graph built through the build cache, its weights and
tokenizer its own).  `loam.tools.loam_main` parses the command line and calls these.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from loam.core.errors import CheckpointError, UsageError

if TYPE_CHECKING:
    from loam.text.generate import Decoder
    from loam.text.tokenizer import Tokenizer

__all__ = ["add_memory_flags", "generate_command", "serve_command"]

PROG = "loam"


def progress(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


def add_memory_flags(serve: argparse.ArgumentParser) -> None:
    """`loam serve`'s flags for the memory its models hold (`loam.serve.residency`) and for package uploads."""
    serve.add_argument(
        "--memory-limit",
        metavar="BYTES",
        help="the server's memory budget (digits with an optional K, M or G, powers of 1024: 512M, 2G): registering "
        "or reactivating a model whose forecast (weights, KV pool, largest cohort's workspace) would pass it beside "
        "the active models is refused, and so is a request that could not fit it alone (default: no limit)",
    )
    serve.add_argument(
        "--idle-deactivate",
        type=float,
        metavar="SECONDS",
        help="deactivate a model idle this long: its weights and its KV pool's unused blocks are released, its "
        "compiled modules and retained sessions kept; its next request reactivates it (default: never)",
    )
    serve.add_argument(
        "--state-dir",
        type=Path,
        metavar="DIR",
        help="where packages uploaded to POST /v1/packages as multipart/form-data are written, each in a fresh "
        "folder (default: a temporary folder removed at exit); their parameter files are named relative to the "
        "first --package-root",
    )


def serve_command(args: argparse.Namespace) -> None:
    from loam.serve.cli import serve

    if args.ray:
        from loam.serve.ray_deploy import serve_on_ray

        if args.package_root:
            raise UsageError("--package-root cannot be used with --ray: registration over HTTP would reach one replica")
        for flag, given in (("--memory-limit", args.memory_limit), ("--idle-deactivate", args.idle_deactivate),
                            ("--state-dir", args.state_dir)):  # fmt: skip
            if given is not None:
                raise UsageError(f"{flag} cannot be used with --ray: each replica is a server of its own")
        serve_on_ray(
            args.packages, host=args.host, port=args.port, address=args.ray_address,
            replicas=1 if args.replicas is None else args.replicas,
            replica_cpus=1.0 if args.replica_cpus is None else args.replica_cpus,
        )  # fmt: skip
        return
    for flag, value in (("--replicas", args.replicas), ("--replica-cpus", args.replica_cpus),
                        ("--ray-address", args.ray_address)):  # fmt: skip
        if value is not None:
            raise UsageError(f"{flag} needs --ray (it says how to serve on Ray Serve)")
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port}: give a port from 0 to 65535")
    from loam.serve.residency import parse_bytes

    try:
        limit = None if args.memory_limit is None else parse_bytes(args.memory_limit)
    except ValueError as err:
        raise UsageError(f"--memory-limit: {err}") from None
    if args.idle_deactivate is not None and not args.idle_deactivate > 0:
        raise UsageError(f"--idle-deactivate {args.idle_deactivate}: give a number of seconds above 0")
    serve(
        args.packages, host=args.host, port=args.port, package_roots=args.package_root, memory_limit=limit,
        idle_deactivate=args.idle_deactivate, state_dir=args.state_dir,
    )  # fmt: skip


def generate_command(args: argparse.Namespace) -> None:
    from loam.text.generate import Decoder, GenerateError, GenerationStats, generate
    from loam.text.tokenizer import Tokenizer

    if args.max_new_tokens < 0:
        raise UsageError(f"--max-new-tokens {args.max_new_tokens}: give 0 or more")
    if args.system is not None and not args.chat:
        raise UsageError("--system needs --chat")
    temperature = args.temperature
    decoder: Decoder | None = None
    tokenizer: Tokenizer | None = None
    if args.module.is_dir():  # a package: its graph built (cached), its weights and tokenizer its own
        if args.checkpoint is not None:
            raise UsageError(f"--checkpoint: {args.module} is a package folder, which names its own weights")
        decoder, tokenizer, defaults = _package_decoder(args.module, packed=not args.widen)
        temperature = defaults.get("temperature", 0.0) if temperature is None else temperature
    elif args.checkpoint is None:
        raise UsageError(f"{args.module} is a module: give --checkpoint FILE, its weights")
    elif not args.checkpoint.is_file():
        raise CheckpointError(f"{args.checkpoint}: no such checkpoint file")
    if args.tokenizer is not None:
        tokenizer = Tokenizer.from_file(args.tokenizer)
    elif tokenizer is None and decoder is not None:
        raise GenerateError(f"{args.module}: the package has no tokenizer; give --tokenizer")
    elif tokenizer is None:
        from loam.frontends.gguf import is_gguf

        assert args.checkpoint is not None  # a module (not a package) came with --checkpoint, as checked above
        if not is_gguf(args.checkpoint):
            raise GenerateError(f"{args.checkpoint}: not a GGUF file, so it carries no tokenizer; give --tokenizer")
        tokenizer = Tokenizer.from_gguf(args.checkpoint)
    if args.chat:
        messages = [{"role": "system", "content": args.system}] if args.system is not None else []
        prompt_ids = tokenizer.encode_chat([*messages, {"role": "user", "content": args.prompt}])
    else:
        prompt_ids = tokenizer.encode(args.prompt)
    if decoder is None:
        assert args.checkpoint is not None  # a module (not a package) came with --checkpoint, as checked above
        decoder = Decoder.load(args.module, args.checkpoint, packed=not args.widen)
    stats = GenerationStats()
    pieces = generate(
        decoder, tokenizer, prompt_ids, max_new_tokens=args.max_new_tokens, temperature=temperature or 0.0,
        seed=args.seed, stop_at_eos=not args.no_stop, stats=stats,
    )  # fmt: skip
    for piece in pieces:
        sys.stdout.write(piece)
        sys.stdout.flush()
    sys.stdout.write("\n")
    print(f"{PROG}: {stats.text()}", file=sys.stderr)


def _package_decoder(folder: Path, packed: bool) -> tuple[Decoder, Tokenizer | None, Mapping[str, float]]:
    """A text package's decoder stage (built through the build cache, its weights loaded), its tokenizer
    and its sampling defaults, for `loam generate DIR`."""
    from dataclasses import replace

    from loam.serve.package import open_package, read_package
    from loam.text.generate import Decoder, GenerateError
    from loam.text.tokenizer import Tokenizer

    spec = read_package(folder)
    if spec.role != "text" or len(spec.stages) != 1:
        raise GenerateError(f"{folder}: a {spec.role} package of {len(spec.stages)} stages; generate runs one decoder")
    if not packed:  # --widen: the stage's packed weights widened at load
        spec = replace(spec, stages={k: replace(v, packed=False) for k, v in spec.stages.items()})
    package = open_package(folder, progress, spec=spec)
    stage = next(iter(package.stages.values()))
    tokenizer = package.tokenizer
    assert tokenizer is None or isinstance(tokenizer, Tokenizer)  # a package's tokenizer is loam.text.tokenizer's
    return Decoder(stage.module, stage.weights, str(folder)), tokenizer, spec.sampling
