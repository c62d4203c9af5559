"""Run a browser module in headless Chromium: `loam browser-run DIR --inputs IN.npz -o OUT.npz`.

The module folder `loam build --target browser` wrote is served read-only from 127.0.0.1 (a random
port, only files under the folder), Chromium runs headless with WebGPU on (its bundled SwiftShader
adapter where the machine has no GPU) and is driven through ChromeDriver's W3C WebDriver protocol over
plain HTTP.  A page on that origin imports model.js, loads the weights, runs `forward` on the inputs
and hands the outputs back; the arrays cross as base64 of their little-endian bytes, so they arrive
bit for bit.  A module error (ShapeError, LoadError) comes back as a `ModuleError` naming it, and
the command prints it.

The browser is the system's (Debian's `chromium` and `chromium-driver`, or `--chromium PATH`); nothing
is downloaded.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import http.server
import json
import os
import posixpath
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from loam.core.errors import LoamError, UsageError

CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",  # root in a container has no user namespace for Chromium's sandbox
    "--enable-unsafe-webgpu",
    "--enable-features=Vulkan",
    "--use-webgpu-adapter=swiftshader",  # a CPU adapter wherever no GPU driver is found
    "--use-angle=swiftshader",
    "--disable-gpu-sandbox",
    "--no-first-run",
    "--disable-extensions",
)

HARNESS = "/__loam__/"  # the path the harness page is served under (never a file of the folder)

PAGE = b"<!doctype html><meta charset=utf-8><title>loam browser-run</title><body>loam browser-run</body>"

# Runs in the page: import the module, load its weights, call forward, return the outputs.
RUN = """
const [modelUrl, weightsUrl, given, repeat, options] = arguments;
const done = arguments[arguments.length - 1];
const ARRAYS = {float32: Float32Array, int64: BigInt64Array, int32: Int32Array, int16: Int16Array,
  int8: Int8Array, uint8: Uint8Array, uint16: Uint16Array, bool: Uint8Array, float16: Uint16Array};
function decode(t) {
  const raw = Uint8Array.from(atob(t.b64), (c) => c.charCodeAt(0));
  return {dtype: t.dtype, data: new ARRAYS[t.dtype](raw.buffer), shape: t.shape};
}
function encode(t) {
  const bytes = new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength);
  let text = "";
  for (let k = 0; k < bytes.length; k += 8192) text += String.fromCharCode(...bytes.subarray(k, k + 8192));
  return {dtype: t.dtype, shape: t.shape, b64: btoa(text)};
}
(async () => {
  const m = await import(modelUrl);
  const weights = await m.Weights.load(weightsUrl);
  const inputs = given.map(decode);
  let out;
  const ms = [];
  for (let k = 0; k < repeat; k++) {
    const start = performance.now();
    out = await (options === null ? m.forward(weights, ...inputs) : m.forward(weights, ...inputs, options));
    ms.push(performance.now() - start);
  }
  const named = m.OUTPUTS.length === 1 ? {[m.OUTPUTS[0]]: out} : out;
  const outputs = {};
  for (const name of m.OUTPUTS) outputs[name] = encode(named[name]);
  return {ok: true, outputs, ms};
})().then(done, (e) => done({ok: false, name: e?.name ?? "Error", message: String(e?.message ?? e)}));
"""


class BrowserError(LoamError):
    """Chromium or ChromeDriver is missing, would not start, or the page could not run."""


class ModuleError(LoamError):
    """The browser module refused the run: its ShapeError, LoadError or DeviceError, by name."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name
        self.message = message


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_TYPES = {
    ".js": "text/javascript",  # a module script needs a JavaScript type
    ".json": "application/json",
}
"""The types the handler gives beside http.server's."""


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Files under the served folder, the harness page, nothing else; no directory listings."""

    def guess_type(self, path: str | os.PathLike[str]) -> str:
        kind = _TYPES.get(posixpath.splitext(os.fspath(path))[1].lower())
        return kind if kind is not None else super().guess_type(path)

    def do_GET(self) -> None:
        if self.path.split("?")[0] == HARNESS + "index.html":
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(PAGE)))
            self.end_headers()
            self.wfile.write(PAGE)
            return
        if self.path.endswith("/"):
            self.send_error(404, "no listings")
            return
        super().do_GET()

    def log_message(self, format: str, *args: object) -> None:
        return


@contextlib.contextmanager
def serve_folder(folder: Path) -> Iterator[str]:
    """Serve `folder` on 127.0.0.1 (a free port) while the block runs; yields its base URL."""
    handler = functools.partial(_Handler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def find_chromium(given: str | None = None) -> tuple[str, str]:
    """(chromium, chromedriver) executables: `given` or the system's."""
    chromium = given or next(
        (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None
    )
    if chromium is None or not Path(chromium).exists():
        raise BrowserError(
            f"no Chromium {'at ' + given if given else 'on PATH'}: install Debian's chromium and chromium-driver "
            "(apt-get install chromium chromium-driver) or give --chromium PATH"
        )
    beside = Path(chromium).with_name("chromedriver")
    driver = str(beside) if beside.exists() else shutil.which("chromedriver")
    if driver is None:
        raise BrowserError(
            "no chromedriver on PATH: install Debian's chromium-driver (apt-get install chromium-driver)"
        )
    return chromium, driver


class Browser:
    """One headless Chromium, driven through ChromeDriver, serving one folder on 127.0.0.1."""

    def __init__(self, folder: Path, chromium: str | None = None, timeout: float = 600.0) -> None:
        self.folder = folder
        self.chromium, self.driver_path = find_chromium(chromium)
        self.timeout = timeout
        self._stack = contextlib.ExitStack()
        self.session: str | None = None

    def __enter__(self) -> Browser:
        try:
            self.base = self._stack.enter_context(serve_folder(self.folder))
            port = _free_port()
            self.driver = subprocess.Popen(
                [self.driver_path, f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            self._stack.callback(self._stop_driver)
            self.url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 30
            while True:
                try:
                    if self._call("GET", "/status", timeout=2)["value"].get("ready"):
                        break
                except (OSError, urllib.error.URLError):
                    pass
                if time.monotonic() > deadline or self.driver.poll() is not None:
                    raise BrowserError(f"{self.driver_path} did not start")
                time.sleep(0.1)
            options = {"binary": self.chromium, "args": list(CHROMIUM_FLAGS)}
            made = self._call("POST", "/session", {"capabilities": {"alwaysMatch": {"goog:chromeOptions": options}}})
            self.session = made["value"]["sessionId"]
            self._stack.callback(self._end_session)
            ms = int(self.timeout * 1000)
            self._call("POST", f"/session/{self.session}/timeouts", {"script": ms, "pageLoad": ms})
            self._call("POST", f"/session/{self.session}/url", {"url": self.base.rstrip("/") + HARNESS + "index.html"})
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self._stack.close()

    def _stop_driver(self) -> None:
        self.driver.terminate()
        try:
            self.driver.wait(10)
        except subprocess.TimeoutExpired:
            self.driver.kill()

    def _end_session(self) -> None:
        with contextlib.suppress(OSError, urllib.error.URLError, BrowserError):
            self._call("DELETE", f"/session/{self.session}", timeout=20)

    def _call(self, method: str, path: str, body: object = None, timeout: float | None = None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout or self.timeout + 30) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as e:
            detail = json.loads(e.read() or b"{}").get("value", {})
            raise BrowserError(
                f"ChromeDriver: {detail.get('error', e.code)}: {detail.get('message', '')[:500]}"
            ) from None

    def script(self, source: str, *args: object) -> object:
        """Run `source` (an async WebDriver script: it calls its last argument) in the page."""
        return self._call("POST", f"/session/{self.session}/execute/async", {"script": source, "args": list(args)})[
            "value"
        ]

    def screenshot(self) -> bytes:
        """The page as a PNG."""
        return base64.b64decode(self._call("GET", f"/session/{self.session}/screenshot")["value"])

    def open(self, path: str, width: int = 1000, height: int = 800) -> None:
        """Navigate to `path` under the served folder in a window of `width` x `height`."""
        self._call("POST", f"/session/{self.session}/window/rect", {"width": width, "height": height})
        self._call("POST", f"/session/{self.session}/url", {"url": self.base + path})

    def evaluate(self, source: str, *args: object) -> object:
        """Run `source` (a synchronous WebDriver script: its `return` is the value) in the page."""
        return self._call("POST", f"/session/{self.session}/execute/sync", {"script": source, "args": list(args)})[
            "value"
        ]

    def type_into(self, css: str, text: str) -> None:
        """Clear the element `css` selects and type `text` into it, as a user would."""
        element = self._element(css)
        self._call("POST", f"/session/{self.session}/element/{element}/clear", {})
        self._call("POST", f"/session/{self.session}/element/{element}/value", {"text": text})

    def click(self, css: str) -> None:
        self._call("POST", f"/session/{self.session}/element/{self._element(css)}/click", {})

    def _element(self, css: str) -> str:
        found = self._call("POST", f"/session/{self.session}/element", {"using": "css selector", "value": css})
        return str(next(iter(found["value"].values())))

    def forward(
        self,
        inputs: Mapping[str, np.ndarray] | list[np.ndarray],
        module: str = "model.js",
        weights: str = "weights/",
        repeat: int = 1,
        options: Mapping[str, object] | None = None,
    ) -> tuple[dict[str, np.ndarray], float]:
        """Run the module at `module` (a path under the folder) on `inputs`, `repeat` times: its outputs
        by ONNX name, and forward's time in the page (ms): the first call's (its shaders compiled, its
        weights uploaded), or with `repeat` > 1 the median of the later calls.  `options` is forward's
        last argument where given (`{"seed": 7}`).  A module error raises `ModuleError`."""
        given = list(inputs.values()) if isinstance(inputs, Mapping) else list(inputs)
        encoded = [_encode(a) for a in given]
        result = self.script(RUN, self.base + module, self.base + weights, encoded, max(1, repeat), options)
        if not isinstance(result, dict):
            raise BrowserError(f"the page gave back {result!r}")
        if not result.get("ok"):
            raise ModuleError(str(result.get("name")), str(result.get("message")))
        times = [float(t) for t in result["ms"]]
        ms = times[0] if len(times) == 1 else float(np.median(times[1:]))
        return {name: _decode(t) for name, t in result["outputs"].items()}, ms


def _encode(array: np.ndarray) -> dict[str, object]:
    a = np.ascontiguousarray(array).reshape(np.shape(array))  # ascontiguousarray makes a scalar 1-D
    dtype = "bool" if a.dtype == np.bool_ else a.dtype.name
    return {
        "dtype": dtype,
        "shape": list(a.shape),
        "b64": base64.b64encode(a.astype(a.dtype.newbyteorder("<")).tobytes()).decode(),
    }


def _decode(t: dict[str, Any]) -> np.ndarray:
    dtype = np.dtype(np.bool_) if t["dtype"] == "bool" else np.dtype(t["dtype"]).newbyteorder("<")
    raw = base64.b64decode(t["b64"])
    return np.frombuffer(raw, dtype=dtype).reshape(t["shape"]).astype(dtype.newbyteorder("="))


def browser_run(
    folder: Path, inputs_npz: Path, output: Path, chromium: str | None = None, seed: int | None = None
) -> tuple[list[str], float]:
    """`loam browser-run`: forward once on the arrays of `inputs_npz` (by input name), its draws seeded
    by `seed` where given; writes the outputs by output name to `output`; the names written and
    forward's time in the page (ms)."""
    if not (folder / "model.js").is_file():
        raise UsageError(f"{folder} holds no model.js: give the folder `loam build --target browser -o` wrote")
    if seed is not None and "{ seed = null } = {}) {" not in (folder / "model.js").read_text(encoding="utf-8"):
        raise UsageError(f"--seed {seed}: {folder}/model.js draws no random numbers, so its forward takes no seed")
    with np.load(inputs_npz, allow_pickle=False) as npz:
        given = {name: npz[name] for name in npz.files}
    names = _input_names(folder / "model.js")
    missing = [n for n in names if n not in given]
    if missing:
        raise UsageError(
            f"{inputs_npz} has no array for input(s) {', '.join(missing)} (it holds {', '.join(given) or 'none'})"
        )
    extra = sorted(set(given) - set(names))
    if extra:
        raise UsageError(f"{inputs_npz}: array(s) {', '.join(extra)} name no input of the module ({', '.join(names)})")
    with Browser(folder, chromium) as browser:
        outputs, ms = browser.forward([given[n] for n in names], options=None if seed is None else {"seed": seed})
    tmp = output.with_name(output.name + f".{os.getpid()}.tmp.npz")
    np.savez(tmp, **outputs)  # type: ignore[arg-type]  # numpy's stub reads the arrays as perhaps allow_pickle
    tmp.replace(output)
    return list(outputs), ms


def _input_names(model_js: Path) -> list[str]:
    """The ONNX input names model.js declares (its `INPUTS` line)."""
    for line in model_js.read_text(encoding="utf-8").splitlines():
        if line.startswith("export const INPUTS = "):
            return [entry[0] for entry in json.loads(line[len("export const INPUTS = ") : -1])]
    raise UsageError(f"{model_js} declares no INPUTS: is it a module `loam build --target browser` wrote?")
