"""How a benchmark hands over its report: printed, and written to its results file unless it was a quick run."""

from __future__ import annotations

import argparse
from pathlib import Path


def publish(text: str, args: argparse.Namespace, default: Path) -> None:
    """Print `text`; write it to `args.output`, or to `default` unless `args.quick` (a smoke test writes nothing)."""
    print(text)
    output = args.output if args.output is not None else (None if args.quick else default)
    if output is not None:
        output.write_text(text, encoding="utf-8")
