"""The server's models: registering a package makes a worker for it; unregistering stops that worker.

`Server` is everything `loam serve` owns apart from HTTP: the registry of served models, their workers
and the metrics; what a model's worker is, and which control it runs, is its role's (`loam.serve.roles`).
Registration runs on the caller's thread (the HTTP layer hands it to a worker thread, since a first
build takes seconds); a package is listed only once it is fully built, loaded and checked, so no
request ever reaches a half-registered model.  HTTP registration takes a server-local folder, and
only one under a `--package-root` the operator named.

Each model is active or inactive (`loam.serve.residency`): registration can ask for inactive, a model idle
for `idle_deactivate` seconds is deactivated by the server's residency thread, and the next request
reactivates it on its worker.  `memory_limit` bounds the active models' forecasts together.
"""

from __future__ import annotations

import gc
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from loam.core.errors import LoamError
from loam.serve.metrics import Metrics
from loam.serve.package import load_weights, open_package
from loam.serve.residency import Budget, Forecast, array_bytes, weight_arrays
from loam.serve.roles import ROLES
from loam.serve.scheduler import ServeError, Worker
from loam.serve.spec import Control, Package
from loam.serve.upload import Upload, stage_upload


@dataclass
class ServedModel:
    """A registered package, the worker that runs its requests, its control and the state the control settled."""

    package: Package
    worker: Worker
    control: Control
    state: object = None
    created: int = field(default_factory=lambda: int(time.time()))
    forecast: Forecast = field(default_factory=Forecast)
    active: bool = True  # its weights loaded (`loam.serve.residency`)
    uploaded: Path | None = None  # the folder under the state directory a multipart upload was written to

    @property
    def name(self) -> str:
        return self.package.spec.name

    @property
    def role(self) -> str:
        return self.package.spec.role


class Server:
    """The registry of served models."""

    def __init__(
        self,
        package_roots: Sequence[str | Path] = (),
        progress: Callable[[str], None] = lambda _m: None,
        *,
        memory_limit: int | None = None,
        idle_deactivate: float | None = None,
        state_dir: str | Path | None = None,
    ) -> None:
        self.package_roots = tuple(Path(p).resolve() for p in package_roots)
        self.progress = progress
        self.metrics = Metrics()
        self.models: dict[str, ServedModel] = {}
        self._lock = threading.Lock()
        self._registering: set[str] = set()
        self.state_dir = Path(state_dir).resolve() if state_dir is not None else None
        self._own_state_dir = False  # made here (a temporary folder), so removed at close
        self.budget = Budget(memory_limit)
        self.idle_deactivate = idle_deactivate
        self._reserved: dict[str, Forecast] = {}  # models being registered or reactivated, counted in the budget
        self.metrics.watch_memory(self._memory_rows, memory_limit)
        self._closing = threading.Event()
        if idle_deactivate is not None:
            threading.Thread(target=self._deactivate_idle, name="loam-serve-residency", daemon=True).start()

    def register(self, folder: str | Path, *, over_http: bool = False, active: bool = True) -> ServedModel:
        """Build, load and check the package in `folder`, then serve it (`active` false: its weights released
        until its first request)."""
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
            try:
                self._admit(served, f"registering {name!r}", counted=served.forecast if active else self._idle(served))
            except ServeError:
                served.worker.stop()
                raise
            if not active:
                self._release(served)
        except BaseException:
            with self._lock:
                self._registering.discard(name)
                self._reserved.pop(name, None)
            raise
        with self._lock:  # listed as its reservation ends, so the budget never misses it
            self._registering.discard(name)
            self._reserved.pop(name, None)
            self.models[name] = served
        self.progress(
            f"serving {name} ({package.spec.role}; stages built: "
            + ", ".join(f"{s} {'from the cache' if hit else 'now'}" for s, hit in package.builds.items())
            + ")"
        )
        return served

    def register_upload(self, upload: Upload) -> ServedModel:
        """Register a multipart upload (`loam.serve.upload`): checked, written to a fresh folder under the state
        directory, and registered from there; its parameter files are named relative to the first package root.
        A failure leaves the state directory as it was."""
        if not self.package_roots:
            raise ServeError(
                "multipart registration is off: start the server with --package-root DIR (an upload's parameter "
                "files are named relative to it)", status=403, param="files",
            )  # fmt: skip
        with self._lock:
            if self.state_dir is None:
                self.state_dir = Path(tempfile.mkdtemp(prefix="loam-serve-state-")).resolve()
                self._own_state_dir = True
        folder = stage_upload(upload, self.package_roots[0], self.state_dir)
        try:
            served = self.register(folder, active=upload.active)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        served.uploaded = folder
        return served

    def _serve(self, package: Package) -> ServedModel:
        """Start `package`'s worker as its role says (`loam.serve.roles`), with its own control or the role's."""
        role = ROLES[package.spec.role]
        control = package.control or role.control()
        worker = role.worker(package, control, self.metrics.model(package.spec.name))
        weights = array_bytes(value for stage in package.stages.values() for value in weight_arrays(stage.weights))
        forecast = Forecast(weights, worker.kv_bytes(), worker.workspace_bytes())
        served = ServedModel(package, worker, control, worker.state, forecast=forecast)
        worker.before_step = lambda: self._activate(served)
        worker.fits = lambda need, param: self.admit_request(served, need, param)
        return served

    # -- residency ------------------------------------------------------------------------------------------------

    @staticmethod
    def _idle(served: ServedModel) -> Forecast:
        """What an inactive model counts against the budget: its KV pool, which its retained sessions hold."""
        return Forecast(kv=served.forecast.kv)

    def _counted(self, exclude: str) -> int:
        """The bytes the models but `exclude` count against the budget (an inactive one: its KV pool alone)."""
        held = {name: (m.forecast if m.active else self._idle(m)) for name, m in self.models.items()}
        held.update(self._reserved)
        return sum(f.total for name, f in held.items() if name != exclude)

    def _admit(self, served: ServedModel, what: str, counted: Forecast) -> None:
        """Refuse `what` unless `served`, counting `counted`, fits the budget beside the other models; reserve it."""
        with self._lock:
            self.budget.admit(what, counted, self._counted(served.name))
            self._reserved[served.name] = counted

    def _release(self, served: ServedModel) -> None:
        """Deactivate `served` (its worker's lock held, the worker idle): drop its weights (the arrays and the
        checkpoint maps they view, so their pages go) and trim its KV pool and workspace."""
        for stage in served.package.stages.values():
            stage.weights = None
        served.worker.trim()
        served.active = False
        gc.collect()  # a cycle holding a map would keep its pages until the next collection

    def deactivate(self, name: str) -> bool:
        """Deactivate the model `name` if it is active and idle; whether it was."""
        served = self.model(name)
        with served.worker.lock:
            if not served.active or not served.worker.idle():
                return False
            self._release(served)
        self.progress(f"deactivated {name}: its weights released, its KV pool's unused blocks trimmed")
        return True

    def _activate(self, served: ServedModel) -> None:
        """Reactivate `served` before its worker's next step (on that worker, under its lock): admitted by the
        budget, its weights loaded and checked again as registration does."""
        if served.active:
            return
        self._admit(served, f"reactivating {served.name!r}", served.forecast)
        try:
            load_weights(served.package.spec, served.package.stages, self.progress)
            served.active = True
        except LoamError as err:  # a checkpoint changed or gone since registration: the server's fault
            for stage in served.package.stages.values():
                stage.weights = None
            raise ServeError(f"model {served.name!r} cannot be reactivated: {err}", status=503) from None
        finally:
            with self._lock:
                self._reserved.pop(served.name, None)
        self.progress(f"reactivated {served.name}")

    def _deactivate_idle(self) -> None:
        """The residency thread: deactivate each model idle for `idle_deactivate` seconds."""
        assert self.idle_deactivate is not None
        while not self._closing.wait(min(1.0, self.idle_deactivate / 4)):
            now = time.monotonic()
            for served in list(self.models.values()):
                if served.active and now - served.worker.last_active >= self.idle_deactivate:
                    try:
                        self.deactivate(served.name)
                    except ServeError:  # unregistered meanwhile
                        continue

    def admit_request(self, served: ServedModel, need: int, param: str) -> None:
        """Refuse a request of `served` needing `need` bytes besides the weights that could not fit the budget even
        alone (a 413 naming the budget, before any work)."""
        self.budget.admit_request(served.name, served.forecast.weights, need, param)

    def _memory_rows(self) -> Iterator[tuple[str, str, int]]:
        """Each model's resident bytes by kind (weights, kv, workspace), for /metrics."""
        for served in list(self.models.values()):
            yield served.name, "weights", served.forecast.weights if served.active else 0
            for kind, count in served.worker.resident_bytes().items():
                yield served.name, kind, count

    def unregister(self, name: str) -> None:
        """Stop serving `name`: requests not yet run fail with 503; the running cohort finishes first."""
        with self._lock:
            served = self.models.pop(name, None)
        if served is None:
            raise ServeError(f"no model named {name!r} is registered", status=404, param="model")
        served.worker.stop()
        if served.uploaded is not None:
            shutil.rmtree(served.uploaded, ignore_errors=True)
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
        self._closing.set()
        for name in list(self.models):
            self.unregister(name)
        if self._own_state_dir and self.state_dir is not None:
            shutil.rmtree(self.state_dir, ignore_errors=True)
