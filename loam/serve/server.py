"""The server's models: registering a package makes a worker for it; unregistering stops that worker.

`Server` is everything `loam serve` owns apart from HTTP: the registry of served models, their workers
and the metrics; what a model's worker is, and which control it runs, is its role's (`loam.serve.roles`).
Registration runs on the caller's thread (the HTTP layer hands it to a worker thread, since a first
build takes seconds); a package is listed only once it is fully built, loaded and checked, so no
request ever reaches a half-registered model.  HTTP registration takes a server-local folder, and
only one under a `--package-root` the operator named.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from loam.serve.metrics import Metrics
from loam.serve.package import open_package
from loam.serve.roles import ROLES
from loam.serve.scheduler import ServeError, Worker
from loam.serve.spec import Control, Package


@dataclass
class ServedModel:
    """A registered package, the worker that runs its requests, its control and the state the control settled."""

    package: Package
    worker: Worker
    control: Control
    state: object = None
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def name(self) -> str:
        return self.package.spec.name

    @property
    def role(self) -> str:
        return self.package.spec.role


class Server:
    """The registry of served models."""

    def __init__(
        self, package_roots: Sequence[str | Path] = (), progress: Callable[[str], None] = lambda _m: None
    ) -> None:
        self.package_roots = tuple(Path(p).resolve() for p in package_roots)
        self.progress = progress
        self.metrics = Metrics()
        self.models: dict[str, ServedModel] = {}
        self._lock = threading.Lock()
        self._registering: set[str] = set()

    def register(self, folder: str | Path, *, over_http: bool = False) -> ServedModel:
        """Build, load and check the package in `folder`, then serve it."""
        path = Path(folder)
        if over_http:
            if not self.package_roots:
                raise ServeError("registration over HTTP is off: start the server with --package-root DIR", status=403)
            real = path.resolve()
            if not path.is_absolute() or not any(real.is_relative_to(root) for root in self.package_roots):
                raise ServeError(
                    f"path {str(folder)!r} is not an absolute path under a --package-root of this server", status=403,
                    param="path",
                )  # fmt: skip
        package = open_package(path, self.progress)
        name = package.spec.name
        with self._lock:
            if name in self.models or name in self._registering:
                raise ServeError(f"a model named {name!r} is already registered", status=409, param="path")
            self._registering.add(name)
        try:
            served = self._serve(package)
        finally:
            with self._lock:
                self._registering.discard(name)
        with self._lock:
            self.models[name] = served
        self.progress(
            f"serving {name} ({package.spec.role}; stages built: "
            + ", ".join(f"{s} {'from the cache' if hit else 'now'}" for s, hit in package.builds.items())
            + ")"
        )
        return served

    def _serve(self, package: Package) -> ServedModel:
        """Start `package`'s worker as its role says (`loam.serve.roles`), with its own control or the role's."""
        role = ROLES[package.spec.role]
        control = package.control or role.control()
        worker = role.worker(package, control, self.metrics.model(package.spec.name))
        return ServedModel(package, worker, control, worker.state)

    def unregister(self, name: str) -> None:
        """Stop serving `name`: requests not yet run fail with 503; the running cohort finishes first."""
        with self._lock:
            served = self.models.pop(name, None)
        if served is None:
            raise ServeError(f"no model named {name!r} is registered", status=404, param="model")
        served.worker.stop()
        self.progress(f"unregistered {name}")

    def model(self, name: object, role: str | None = None) -> ServedModel:
        """The served model `name`, which must serve `role` (a 404 or 400 naming the field otherwise)."""
        if not isinstance(name, str) or not name:
            raise ServeError("'model' must be the name of a served model (see /v1/models)", param="model")
        served = self.models.get(name)
        if served is None:
            raise ServeError(
                f"the model {name!r} does not exist (see /v1/models)", status=404, param="model", kind="model_not_found"
            )
        if role is not None and served.role != role:
            raise ServeError(f"the model {name!r} is a {served.role} model, not a {role} model", param="model")
        return served

    def close(self) -> None:
        for name in list(self.models):
            self.unregister(name)
