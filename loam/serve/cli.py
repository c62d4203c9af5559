"""`loam serve`: register the packages named on the command line, then serve HTTP with uvicorn until stopped.

`Listener` runs the same HTTP server on a thread of the calling process, for tests and benchmarks that
drive a real server on 127.0.0.1 with real clients.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import uvicorn

from loam.serve.app import make_app
from loam.serve.scheduler import ServeError
from loam.serve.server import Server


def _config(server: Server, host: str, port: int) -> uvicorn.Config:
    return uvicorn.Config(make_app(server), host=host, port=port, log_level="warning", lifespan="off")


def serve(
    packages: Sequence[Path], *, host: str, port: int, package_roots: Sequence[Path] = (),
    memory_limit: int | None = None, idle_deactivate: float | None = None, state_dir: Path | None = None,
) -> None:  # fmt: skip
    def progress(message: str) -> None:
        print(f"loam serve: {message}", file=sys.stderr, flush=True)

    server = Server(
        package_roots, progress, memory_limit=memory_limit, idle_deactivate=idle_deactivate, state_dir=state_dir
    )
    try:
        for folder in packages:
            server.register(folder)
        # The socket is bound and listening here, so the line below names the real port even for --port 0, and a
        # client that connects as soon as it reads the line waits in the backlog until uvicorn accepts (bound but
        # not listening, it was refused: a script's first request failed now and then).
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        listening = socket.socket(family, socket.SOCK_STREAM)
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listening.bind((host, port))
            listening.listen(2048)
        except OSError as err:
            raise ServeError(f"cannot listen on {host}:{port}: {err.strerror or err}", status=500) from None
        bound = listening.getsockname()[1]
        http = uvicorn.Server(_config(server, host, bound))
        progress(f"listening on http://{host}:{bound} ({len(server.models)} models; Ctrl-C stops)")
        try:
            http.run(sockets=[listening])
        except KeyboardInterrupt:  # uvicorn shut down gracefully, then passed the signal on: a normal stop
            pass
        progress("stopped")
    finally:
        server.close()


class Listener:
    """`server`'s HTTP API on a background thread, bound to `host` and a free port (`url`)."""

    def __init__(self, server: Server, host: str = "127.0.0.1", port: int = 0) -> None:
        self.server = server
        self.http = uvicorn.Server(_config(server, host, port))
        self.thread = threading.Thread(target=self.http.run, name="loam-serve-http", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.http.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the HTTP server did not start")
            time.sleep(0.01)
        bound = self.http.servers[0].sockets[0].getsockname()
        self.url = f"http://{host}:{bound[1]}"

    def close(self) -> None:
        self.http.should_exit = True
        self.thread.join(30)

    def __enter__(self) -> Listener:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
