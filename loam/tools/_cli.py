"""What the three command-line tools share: one error policy and an argument parser that keeps to it.

The policy (an error is part of the product): bad input prints one message,
`PROG: error: ...`, and exits 1; bad usage (an unknown flag, a malformed flag value) exits 2; no
traceback reaches the user unless `--debug` is given.  A failure that is not a `LoamError` (or one
of xDSL's parse/verify errors, which are about the input IR) is a bug in Loam: it is reported as an
internal error with exit status 3, so a test can tell a refusal from a crash.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from xdsl.utils.exceptions import DiagnosticException, ParseError

from loam.core.errors import LoamError, UsageError

__all__ = [
    "EXIT_ERROR",
    "EXIT_INTERNAL",
    "EXIT_USAGE",
    "CliParser",
    "fail",
    "run_guarded",
    "wants_debug",
]

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3


class CliParser(argparse.ArgumentParser):
    """An `ArgumentParser` whose usage errors are one line, `PROG: error: ...`, and exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def fail(prog: str, message: str, status: int) -> NoReturn:
    """Print `PROG: error: MESSAGE` on stderr and exit with `status`."""
    sys.stderr.write(f"{prog}: error: {message}\n")
    sys.stderr.flush()
    raise SystemExit(status)


def wants_debug(argv: Sequence[str]) -> bool:
    """Whether `--debug` is on the command line (looked at before parsing, so that errors raised
    while parsing can also show their traceback)."""
    return "--debug" in argv


def run_guarded(prog: str, body: Callable[[], int | None], *, debug: bool) -> int:
    """Run a tool's body under the error policy and return its exit status.

    With `debug`, errors propagate (a traceback shows) instead of being turned into one line.
    """
    try:
        status = body()
    except SystemExit:
        raise
    except KeyboardInterrupt:
        if debug:
            raise
        sys.stderr.write(f"{prog}: interrupted\n")
        return 130
    except UsageError as exc:
        if debug:
            raise
        fail(prog, str(exc), EXIT_USAGE)
    except LoamError as exc:
        if debug:
            raise
        fail(prog, str(exc), EXIT_ERROR)
    except (ParseError, DiagnosticException) as exc:
        # xDSL's own refusals of the input IR: the message already points at the culprit.
        if debug:
            raise
        fail(prog, str(exc).strip(), EXIT_ERROR)
    except OSError as exc:
        if debug:
            raise
        where = f"'{exc.filename}': " if exc.filename else ""
        fail(prog, f"{where}{exc.strerror or exc}", EXIT_ERROR)
    except Exception as exc:  # a bug in Loam, not bad input
        if debug:
            raise
        fail(
            prog,
            f"internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback, and please report it)",
            EXIT_INTERNAL,
        )
    return status or 0
