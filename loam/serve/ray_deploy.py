"""`loam serve --ray`: the same HTTP server as a Ray Serve deployment, scaled by replicas across machines.

One `loam serve` process serves from one machine.  To serve from several, Loam does not grow a cluster
manager of its own: it runs on Ray Serve, an existing distributed engine.  `LoamReplica` is a Ray Serve
deployment whose ingress is Loam's own ASGI application (`loam.serve.app`, through `@serve.ingress`):
each replica is a Ray actor process that registers the given package folders itself (one `Server`, so
one engine and one worker thread per model, per replica, built through that machine's build cache) and
serves the very routes `loam serve` does.  Ray's HTTP proxy spreads requests over the replicas; Ray's
controller replaces a replica whose process dies.  Every response carries `x-loam-replica` (Ray's id
of the replica) and `x-loam-pid` (its process), so a client can see which replica answered.

What each replica holds is its own: retained conversations (`/v1/sessions`) live on the replica that
made them, and registration over HTTP is off (it would reach one replica of many), so `--package-root`
is refused with `--ray`.  The package folders must exist at the same path on every machine that runs a
replica, with Loam installed there.

`serve_on_ray` is the command: it checks the packages and the flags before touching Ray, starts a
local Ray instance or joins a cluster (`--ray-address`), deploys, prints the proxy's address and waits
for Ctrl-C, then deletes the deployment (and stops the local instance it started).
"""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from loam.core.errors import LoamError, UsageError
from loam.serve.package import read_package

try:
    import ray
    from ray import serve
except ImportError:  # the `ray` extra is not installed: `serve_on_ray` says how to install it
    ray = None  # type: ignore[assignment]  # None stands for the module where the extra is not installed
    serve = None  # type: ignore[assignment]  # as `ray`

APP_NAME = "loam"
REPLICA_HEADER = "x-loam-replica"
PID_HEADER = "x-loam-pid"
_MISSING = "loam serve --ray needs Ray Serve: pip install 'ray[serve]==2.60.0' (Loam's `ray` extra)"


class ReplicaError(LoamError):
    """A replica could not register a package (the driver shows this message, not Ray's traceback)."""


class _ReplicaHeaders:
    """ASGI middleware adding the replica's identity to every HTTP response's headers."""

    def __init__(self, app: Any, replica: str) -> None:
        self.app = app
        self.headers = [(REPLICA_HEADER.encode(), replica.encode()), (PID_HEADER.encode(), str(os.getpid()).encode())]

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_identified(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *self.headers]}
            await send(message)

        await self.app(scope, receive, send_identified)


class Replica:
    """One replica: a `Server` with the packages registered in this process, served by Loam's ASGI app."""

    def __init__(self, packages: Sequence[str]) -> None:
        from loam.serve.server import Server

        self.replica = serve.get_replica_context().replica_id.unique_id
        where = f"{socket.gethostname()} pid {os.getpid()}"

        def progress(message: str) -> None:
            print(f"loam serve replica {self.replica} ({where}): {message}", file=sys.stderr, flush=True)

        self.server = Server((), progress)
        for folder in packages:
            try:
                self.server.register(folder)
            except LoamError as err:
                self.server.close()
                raise ReplicaError(f"replica on {where}: {err}") from None

    def __serve_build_asgi_app__(self) -> Any:
        """Ray Serve calls this once the constructor returns: the ASGI app over this replica's own server."""
        from loam.serve.app import make_app

        app = make_app(self.server)
        app.add_middleware(_ReplicaHeaders, replica=self.replica)
        return app

    def __del__(self) -> None:
        server = getattr(self, "server", None)
        if server is not None:
            server.close()


# The deployment: `Replica` behind `@serve.ingress`, the app it builds being Loam's (`__serve_build_asgi_app__`).
LoamReplica: Any = (
    serve.deployment(logging_config={"enable_access_log": False, "log_level": "WARNING"})(serve.ingress()(Replica))
    if serve is not None
    else None
)


def application(packages: Sequence[str | Path], replicas: int, replica_cpus: float = 1.0) -> Any:
    """The Ray Serve application: `replicas` copies of `LoamReplica`, each holding `replica_cpus` of Ray's CPUs
    and registering `packages` (absolute folders, the same on every machine).

    A replica takes up to twice the rows its models run at once (the packages' `resident_requests`): enough to
    fill every row of a cohort with the next requests already waiting on the replica.  Ray holds the rest and
    hands each to the first replica with room (Ray's default, 5, would cap a cohort at 5 rows)."""
    if serve is None:
        raise LoamError(_MISSING)
    folders = [str(Path(p).resolve()) for p in packages]
    rows = sum(read_package(folder).capacities.resident_requests for folder in folders)
    options = {
        "num_replicas": replicas,
        "max_ongoing_requests": 2 * rows,
        "ray_actor_options": {"num_cpus": replica_cpus},
    }
    return LoamReplica.options(**options).bind(folders)


def check(packages: Sequence[Path], replicas: int, replica_cpus: float, port: int) -> None:
    """Refuse bad flags and bad packages before Ray starts (a UsageError naming the flag, a LoamError naming the
    package)."""
    if not packages:
        raise UsageError("--ray needs at least one PACKAGE_DIR (registration over HTTP is off on replicas)")
    if replicas < 1:
        raise UsageError(f"--replicas {replicas}: give 1 or more")
    if not replica_cpus > 0:
        raise UsageError(f"--replica-cpus {replica_cpus}: give a number above 0")
    if not 0 <= port <= 65535:
        raise UsageError(f"--port {port}: give a port from 0 to 65535")
    names: dict[str, Path] = {}
    for folder in packages:
        spec = read_package(folder)
        if spec.name in names:
            raise LoamError(f"{folder} and {names[spec.name]} both serve a model named {spec.name!r}")
        names[spec.name] = folder


def serve_on_ray(
    packages: Sequence[Path], *, host: str, port: int, replicas: int, replica_cpus: float = 1.0,
    address: str | None = None,
) -> None:  # fmt: skip
    """Deploy `packages` on Ray Serve with `replicas` replicas behind Ray's HTTP proxy on `host:port`, serve until
    Ctrl-C (or SIGTERM), then delete the deployment.  `address`: a running Ray cluster (`auto`, or `HEAD:6379`);
    without it a local Ray instance is started for this command and stopped at its end."""

    def progress(message: str) -> None:
        print(f"loam serve: {message}", file=sys.stderr, flush=True)

    check(packages, replicas, replica_cpus, port)
    if ray is None or serve is None:
        raise LoamError(_MISSING)
    if port == 0:
        port = _free_port(host)
    progress(f"joining the Ray cluster at {address}" if address else "starting a local Ray instance")
    try:
        # Ray's own processes log to files (and print tracebacks of their own internals); the command says in one
        # line each what happens to the replicas instead (`_watch`).
        ray.init(
            address=address or "local", include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False
        )
    except (ConnectionError, RuntimeError, ValueError) as err:
        where = f"--ray-address {address}: cannot join a Ray cluster there" if address else "cannot start Ray"
        raise LoamError(f"{where} ({_first_line(err)})") from None
    with _sigterm_as_interrupt():  # after ray.init, which installs a SIGTERM handler of its own
        logging.getLogger("ray.serve").setLevel(logging.WARNING)  # Ray's INFO lines repeat what the command says
        deployed = False
        try:
            serve.start(http_options={"host": host, "port": port}, logging_config={"log_level": "WARNING"})
            if APP_NAME in serve.status().applications:
                raise LoamError(
                    f"this Ray cluster already serves a Loam deployment (Ray Serve application {APP_NAME!r}): stop the "
                    "command that deployed it first"
                )
            listening = _proxy_address(host, port)
            if listening != (host, port):
                progress(
                    f"Ray Serve already runs on this cluster with its HTTP proxies on {_url(*listening)}: --host and "
                    "--port do not move them (`serve shutdown` stops Serve and every application on it)"
                )
            progress(f"deploying {len(packages)} package(s) on {replicas} replica(s)")
            deployed = True
            try:
                serve.run(application(packages, replicas, replica_cpus), name=APP_NAME, route_prefix="/")
            except RuntimeError as err:
                raise LoamError(f"the deployment failed: {_replica_failure(err)}") from None
            progress(f"listening on {_url(*listening)} ({replicas} replicas on Ray; Ctrl-C stops)")
            progress(f"Ray's logs, the replicas' output among them: {_log_folder()}")
            try:
                _watch(progress)
            except KeyboardInterrupt:
                pass
            deployed = False
            serve.delete(APP_NAME)
            progress("stopped")
        finally:
            if deployed and address is not None:  # leave nothing of this command's running on the cluster
                with suppress(Exception):
                    serve.delete(APP_NAME)
            ray.shutdown()  # a local instance stops with it (replicas, proxy and all); a cluster goes on


def _watch(progress: Callable[[str], None], period: float = 1.0) -> None:
    """Report each change of the replicas' states (a replica that died, its replacement starting, running again)
    until interrupted."""
    last = ""
    while True:
        time.sleep(period)
        try:
            app = serve.status().applications.get(APP_NAME)
        except Exception:  # the controller is busy or restarting: ask again next time
            continue
        if app is None:
            continue
        now = "; ".join(
            f"{_name(d.status)}, replicas " + ", ".join(f"{n} {_name(state)}" for state, n in d.replica_states.items())
            for d in app.deployments.values()
        )
        if now != last:
            progress(f"deployment {now}")
            last = now


def _name(state: object) -> str:
    """A Ray status as its name (`HEALTHY`, `RUNNING`): Ray gives some as enums, some as plain strings."""
    return str(getattr(state, "value", state))


def _log_folder() -> str:
    try:
        return str(ray._private.worker._global_node.get_logs_dir_path())  # type: ignore[attr-defined]  # Ray declares the node None until ray.init sets it
    except Exception:  # a private attribute of Ray's: name the default place instead
        return "/tmp/ray/session_latest/logs"


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (a process manager's stop) raises KeyboardInterrupt, as Ctrl-C does: either way the deployment is
    deleted and a local Ray instance stopped, never left running without the command that started it."""

    def interrupt(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():  # only the main thread may set a handler
        yield
        return
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:  # a handler installed outside Python (Ray's) reads as None: the default then
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def _proxy_address(host: str, port: int) -> tuple[str, int]:
    """Where Serve's HTTP proxies listen: `host:port` as asked, unless Serve already ran on the cluster with others."""
    try:
        client = serve.context._get_global_client()  # Ray's own record (a private attribute)
        if client is None:
            return host, port
        return str(client.http_config.host), int(client.http_config.port)
    except Exception:
        return host, port


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, 0))
        except OSError as err:
            raise LoamError(f"--host {host}: cannot listen there ({err.strerror or err})") from None
        return int(probe.getsockname()[1])


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _replica_failure(err: RuntimeError) -> str:
    """What made the replicas fail: the ReplicaError a replica raised, found in Ray's report, else its first line."""
    texts = [str(err)]
    try:
        status = serve.status().applications.get(APP_NAME)
        if status is not None:
            texts += [status.message, *(d.message for d in status.deployments.values())]
    except Exception:  # Ray's status is a best effort here: the deployment already failed
        pass
    for text in texts:
        found = re.findall(r"ReplicaError: (.+)", text or "")
        if found:
            return found[-1].strip()
    return _first_line(err)
