"""The runtime a WGSL module carries: one device, its pipelines, resident buffers, and dispatch.

Like `loam.runtime`'s pieces, each piece here is copied as source text into every generated module
that uses it (`PIECES`; `wgsl_pieces` chooses them), so a module imports only numpy, `wgpu` and the
standard library (`threading` here: the device's lock, forward calls from several threads take turns).
`_Gpu` owns the process's adapter and device for one module: it compiles every shader of the module once, keeps
the buffers a forward needs per binding of the extent symbols (`buffers`), caches each dispatch's
parameter buffer and bind group (so after the first call with a binding only inputs go up and
outputs come down), records one command encoder per forward, and counts what crosses between host
and device (`stats`).

Device element types: f32 holds f32, f16 and bf16 (a half is rounded to its precision by the
kernels and stored widened); i32 holds every integer type (an i64 value is narrowed only after the
host checked that it fits); u32 holds bool (0 or 1).  `_device_array` and `_host_array` convert.
"""

from __future__ import annotations

import threading

import numpy as np

from loam.runtime.errors import ShapeError

try:  # the generated module imports wgpu at its top; here it is optional (tests skip without it)
    import wgpu
except ImportError:  # pragma: no cover - exercised only where wgpu is missing
    wgpu = None


class DeviceError(Exception):
    """No WebGPU adapter, or the device refused a shader or a buffer."""


def _device_dtype(dtype: str) -> np.dtype:
    """The dtype a value of host dtype `dtype` has on the device."""
    if dtype in ("float32", "float16", "bfloat16") or dtype.startswith(("float8", "float4")):
        return np.dtype(np.float32)  # a narrow float's value is exact in f32
    if dtype == "bool":
        return np.dtype(np.uint32)
    return np.dtype(np.int32)


def _device_array(name: str, value: np.ndarray) -> np.ndarray:
    """`value` in its device dtype, refusing an integer that i32 cannot hold (never a silent wrap)."""
    value = np.asarray(value)
    want = _device_dtype(value.dtype.name)
    if value.dtype.kind in "iu" and value.dtype.itemsize >= 4 and value.size:
        low, high = int(value.min()), int(value.max())
        if low < -(2**31) or high >= 2**31:
            raise ShapeError(
                f"'{name}' holds {low if low < -(2**31) else high}, outside the i32 range WGSL computes in "
                "(values must lie in [-2^31, 2^31))"
            )
    return np.ascontiguousarray(value.astype(want, copy=False))


def _host_array(data: memoryview | bytes, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """A downloaded buffer's bytes as the host dtype `dtype`, shaped `shape`."""
    count = 1
    for e in shape:
        count *= e
    raw = np.frombuffer(data, dtype=_device_dtype(dtype), count=count).reshape(shape)
    return raw.astype(np.dtype(dtype))  # "bfloat16" is known once the module imported ml_dtypes


_CACHE_LIMIT = 4096
"""Parameter buffers, bind groups and shape-value buffers a module keeps before it starts over."""


def _after_header(code: str, at: int) -> int:
    """The index just past the `{` opening the body whose header (`for (...)`, `fn main(...)`) is at `at`."""
    depth, k = 0, code.index("(", at)
    while True:
        depth += {"(": 1, ")": -1}.get(code[k], 0)
        if depth == 0:
            return code.index("{", k) + 1
        k += 1


def _loops_counted(code: str) -> str:
    """`code` with every loop counting its iterations, raising a flag (group 1) near llvmpipe's cap.

    Mesa's llvmpipe stops an invocation's loops once they have run 65,535 iterations in all (its
    guard against hangs), silently: a kernel looping longer computes wrong numbers.  Each loop body
    here first counts into a private counter; at 65,000 the invocation sets `_loam_flags[0]`, and
    the runtime refuses the forward's results.  `main` reads the flag once, so its binding is in the
    pipeline's layout even where only helpers loop.  Code without loops comes back unchanged.
    """
    pieces: list[str] = []
    done = 0
    while True:
        starts = [k for k in (code.find("for (", done), code.find("loop {", done)) if k >= 0]
        if not starts:
            break
        at = min(starts)
        end = _after_header(code, at) if code.startswith("for (", at) else at + len("loop {")
        pieces.append(code[done:end] + " _loam_count();")
        done = end
    if not pieces:
        return code
    counted = "".join(pieces) + code[done:]
    main = counted.find("fn main(")
    if main < 0 or counted.find("fn main(", main + 1) >= 0:
        raise DeviceError("a shader without one `main` entry point cannot have its loops counted")
    brace = _after_header(counted, main)
    counted = counted[:brace] + " _ = _loam_flags[0];" + counted[brace:]
    return declare_flags(
        "var<private> _loam_iters: u32;\n"
        "fn _loam_count() {\n"
        "  _loam_iters = _loam_iters + 1u;\n"
        "  if (_loam_iters == 65000u) { _loam_flags[0] = 1u; }\n"
        "}\n" + counted
    )


_FLAGS = "@group(1) @binding(0) var<storage, read_write> _loam_flags: array<u32>;\n"
"""The flags buffer, bound as group 1 of a shader that raises one: element 0 where an invocation's
loops ran into llvmpipe's cap (`_loops_counted`), element 1 where a checked i64 step wrapped
(`wgsl_kernels.elementwise._I64_CHECKED`).  `_Gpu.end` reads it after the forward and refuses results
a raised flag says are wrong."""


def declare_flags(code: str) -> str:
    """`code` with the flags buffer declared where it raises a flag and does not declare it yet (the
    printer's shaders with checked i64 steps, llvmpipe's counted loops, or both)."""
    if "_loam_flags[" in code and "var<storage, read_write> _loam_flags" not in code:
        return _FLAGS + code
    return code


class _Gpu:
    """The device one module computes on, its pipelines, and what crossed between host and device."""

    def __init__(
        self, shaders: dict[str, str], packed: dict[str, int] | None = None, limits: dict[str, int] | None = None
    ) -> None:
        """`shaders` by name; `packed`: how many trailing operands each shader reads from one packed
        buffer (`pack`); `limits`: the device limits the module was built against, in WebGPU's names."""
        if wgpu is None:
            raise DeviceError("the wgpu package is not installed (pip install wgpu)")
        limits = limits or {}
        kebab = {k: _wgpu_limit(k) for k in limits}
        wanted = {kebab[k]: v for k, v in limits.items()}
        # One device per process, shared by every Loam module: wgpu polls each device from a thread of
        # its own, and on OpenGL backends (llvmpipe) two devices in one process crash the process.
        # One lock goes with it (dict.setdefault is atomic): it guards the device's making, and each
        # module's forward holds it from its first upload to its last download (`self.lock`).
        self.lock = wgpu.__dict__.setdefault("_loam_lock", threading.RLock())
        with self.lock:
            shared = getattr(wgpu, "_loam_shared_device", None)
            if shared is None:
                adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
                if adapter is None:
                    raise DeviceError("no WebGPU adapter: install a driver (Mesa's llvmpipe runs on any CPU)")
                short = {k: v for k, v in limits.items() if adapter.limits.get(kebab[k], 0) < v}
                if short:
                    raise DeviceError(
                        f"this module was built for a device with {_limits_text(short)}; the adapter "
                        f"'{adapter.info.get('device', '')}' offers "
                        + ", ".join(f"{k} {adapter.limits.get(kebab[k], 0)}" for k in short)
                    )
                # Exactly the module's limits, never the adapter's most: what runs here runs on any
                # device offering them.
                shared = (adapter.request_device_sync(required_limits=wanted), adapter.info.get("device", ""))
                wgpu._loam_shared_device = shared
        device = shared[0]
        short = {k: v for k, v in limits.items() if device.limits.get(kebab[k], 0) < v}
        if short:
            raise DeviceError(
                f"this module was built for a device with {_limits_text(short)}, and this process's device "
                "was made with less for a module loaded before it (one device serves a process): load the "
                "module needing the higher limits first, or build both with the same --device-limits"
            )
        self.device, self.adapter = shared
        # The most elements (4 bytes each) one buffer may hold: what the device binds.
        bound = min(self.device.limits["max-storage-buffer-binding-size"], self.device.limits["max-buffer-size"])
        self.max_elements = bound // 4
        self.usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
        # llvmpipe caps an invocation's loop iterations (`_loops_counted`): its shaders count theirs.
        self.capped = "llvmpipe" in str(self.adapter).lower()
        # The flags shaders raise (`_FLAGS`): [0] llvmpipe's loop cap, [1] an i64 wrap.
        self.flags = self.buffer(8)
        self.flagged: dict[str, object] = {}  # pipeline name -> its bind group 1 (the flags)
        self.unchecked: set[str] = set()  # flagged pipelines dispatched since the flags were last read
        self.pipelines: dict[str, wgpu.GPUComputePipeline] = {}
        self.packed = packed or {}
        self.packs: dict[tuple[int, ...], tuple[object, tuple[int, ...], tuple[object, ...]]] = {}
        for name, code in shaders.items():
            self.add(name, code)
        self.params_cache: dict[tuple[int, ...], object] = {}
        self.values_cache: dict[tuple, object] = {}
        self.groups: dict[tuple, tuple[object, tuple[object, ...]]] = {}
        self.pools: dict[tuple[int, ...], tuple[object, ...]] = {}
        self.lates: dict[str, tuple[object, int]] = {}  # tag -> (buffer, its bytes)
        self.stats = {"dispatches": 0, "bytes_up": 0, "bytes_down": 0, "forwards": 0}
        # The forward's command encoder and its compute pass, from `begin` (None between forwards).
        self.encoder: wgpu.GPUCommandEncoder = None
        self.compute: wgpu.GPUComputePassEncoder = None

    def add(self, name: str, code: str) -> None:
        """Compile shader `code` into pipeline `name` (its loops counted on llvmpipe); one that reads the
        flags gets them bound as its group 1."""
        counted = _loops_counted(code) if self.capped else code
        module = self.device.create_shader_module(code=counted)
        pipeline = self.device.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": "main"})
        self.pipelines[name] = pipeline
        if "_loam_flags" in counted:
            entries = [{"binding": 0, "resource": {"buffer": self.flags}}]
            layout = pipeline.get_bind_group_layout(1)
            self.flagged[name] = self.device.create_bind_group(layout=layout, entries=entries)

    # -- buffers --------------------------------------------------------------------------------------

    def buffer(self, nbytes: int) -> object:
        """A storage buffer of `nbytes` (at least 4: WebGPU has no empty binding)."""
        return self.device.create_buffer(size=max(4, (nbytes + 3) // 4 * 4), usage=self.usage)

    def upload(self, name: str, value: np.ndarray) -> object:
        """A new buffer holding `value` in its device dtype (weights, once)."""
        data = _device_array(name, value)
        buffer = self.buffer(data.nbytes)
        if data.nbytes:
            self.device.queue.write_buffer(buffer, 0, data)
        self.stats["bytes_up"] += data.nbytes
        return buffer

    def upload_blocks(self, name: str, blocks: np.ndarray) -> object:
        """A new buffer holding weight `name`'s ggml blocks byte for byte (the packed kernels widen them)."""
        if blocks.dtype.names is None:
            raise DeviceError(
                f"weight '{name}' was widened to float32 at load (packed=False); this module's kernels read "
                "its ggml blocks on the device: load the weights with packed=True"
            )
        data = np.ascontiguousarray(blocks).view(np.uint8).reshape(-1)
        if data.nbytes % 4:  # the device reads it as 32-bit words
            data = np.concatenate([data, np.zeros(4 - data.nbytes % 4, np.uint8)])
        buffer = self.buffer(data.nbytes)
        if data.nbytes:
            self.device.queue.write_buffer(buffer, 0, data)
        self.stats["bytes_up"] += data.nbytes
        return buffer

    def write(self, name: str, buffer: object, value: np.ndarray) -> None:
        """Copy `value` (an input) into `buffer`."""
        data = _device_array(name, value)
        if data.nbytes:
            self.device.queue.write_buffer(buffer, 0, data)
        self.stats["bytes_up"] += data.nbytes

    def read(self, buffer: object, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
        """Download `buffer` (an output) as host dtype `dtype`, shaped `shape`."""
        count = 1
        for e in shape:
            count *= e
        nbytes = count * _device_dtype(dtype).itemsize
        data = self.device.queue.read_buffer(buffer, 0, max(4, (nbytes + 3) // 4 * 4)) if nbytes else b""
        self.stats["bytes_down"] += nbytes
        return _host_array(memoryview(data)[:nbytes] if nbytes else b"", dtype, shape)

    def values(self, value: np.ndarray) -> object:
        """A buffer holding `value`, computed on the host from the bound extents: uploaded the first
        time these numbers appear, then reused."""
        data = _device_array("shape values", value)
        key = (data.dtype.str, data.shape, data.tobytes())
        found = self.values_cache.get(key)
        if found is None:
            if len(self.values_cache) >= _CACHE_LIMIT:
                self.values_cache.clear()
            found = self.upload("shape values", data)
            self.values_cache[key] = found
        return found

    def pool(self, key: tuple[int, ...], sizes: tuple[int, ...]) -> tuple[object, ...]:
        """The activation buffers of one binding of the extent symbols (`sizes` in bytes), made once."""
        found = self.pools.get(key)
        if found is None:
            found = tuple(self.buffer(n) for n in sizes)
            self.pools[key] = found
            while len(self.pools) > 4:  # the latest bindings; their bind groups go with them
                stale = self.pools.pop(next(iter(self.pools)))
                ids = {id(b) for b in stale}
                self.groups = {k: v for k, v in self.groups.items() if not ids & set(k[1])}
                self.packs = {k: v for k, v in self.packs.items() if not ids & set(k)}
        return found

    def late(self, tag: str, nbytes: int) -> object:
        """The buffer `tag` of at least `nbytes`, for a value whose size only the run knows: made the
        first time, made again larger when a call needs more, else the one the last call used."""
        if nbytes // 4 > self.max_elements:
            raise ShapeError(f"{tag}: {nbytes // 4} elements, more than one device buffer holds ({self.max_elements})")
        found = self.lates.get(tag)
        if found is None or found[1] < nbytes:
            found = (self.buffer(nbytes), nbytes)
            self.lates[tag] = found
        return found[0]

    # -- dispatch -------------------------------------------------------------------------------------

    def begin(self) -> None:
        self.encoder = self.device.create_command_encoder()
        self.compute = self.encoder.begin_compute_pass()
        self.stats["forwards"] += 1

    def dispatch(self, name: str, buffers: tuple[object, ...], params: tuple[int, ...], grid: int) -> None:
        """Record kernel `name` over `buffers` (outputs then inputs) with `params`, `grid` workgroups."""
        if grid <= 0:
            return
        if name in self.packed:
            k = self.packed[name]
            buffers = (*buffers[:-k], self.pack(buffers[-k:]))
        key = (name, tuple(id(b) for b in buffers), params)
        found = self.groups.get(key)
        # A group keeps its buffers alive, so no buffer made later (a scan output uploaded per call) can
        # take a cached one's id and be bound as the old buffer.
        group = found[0] if found is not None else None
        if group is None:
            if len(self.params_cache) >= _CACHE_LIMIT or len(self.groups) >= _CACHE_LIMIT:
                # Extents that change every call (a decode loop's past) would grow these without end:
                # start them over; the next calls rebuild what they use.
                self.params_cache.clear()
                self.groups.clear()
                self.packs.clear()
            pbuf = self.params_cache.get(params)
            if pbuf is None:
                data = np.asarray(params or (0,), dtype=np.int64).astype(np.uint32)
                pbuf = self.device.create_buffer_with_data(data=data, usage=self.usage)
                self.params_cache[params] = pbuf
                self.stats["bytes_up"] += data.nbytes
            pipeline = self.pipelines[name]
            entries = [{"binding": i, "resource": {"buffer": b}} for i, b in enumerate((pbuf, *buffers))]
            group = self.device.create_bind_group(layout=pipeline.get_bind_group_layout(0), entries=entries)
            self.groups[key] = (group, buffers)
        compute = self.compute
        compute.set_pipeline(self.pipelines[name])
        compute.set_bind_group(0, group)
        if name in self.flagged:
            compute.set_bind_group(1, self.flagged[name])
            self.unchecked.add(name)
        x = min(grid, 65535)
        if grid > 65535 * 65535:
            raise ShapeError(f"{name}: {grid} workgroups, more than one dispatch launches (65535 x 65535)")
        compute.dispatch_workgroups(x, (grid + x - 1) // x)
        self.stats["dispatches"] += 1

    def pack(self, buffers: tuple[object, ...]) -> object:
        """One buffer holding `buffers`' words after a header of their offsets, copied in now (before
        the dispatch reading it: a shader past the storage-buffer budget reads its trailing operands
        from it, `wgsl_limits.fit_bindings`); made once per set of buffers."""
        held: tuple[wgpu.GPUBuffer, ...] = buffers  # what `buffer` made
        key = tuple(id(b) for b in held)
        found = self.packs.get(key)
        if found is None:
            offsets, at = [], len(held)
            for b in held:
                offsets.append(at)
                at += b.size // 4
            if at * 4 > self.device.limits["max-storage-buffer-binding-size"]:
                raise ShapeError(f"operands packed into one buffer take {at * 4} bytes, more than one binding holds")
            packed = self.buffer(at * 4)
            self.device.queue.write_buffer(packed, 0, np.asarray(offsets, np.uint32))
            found = (packed, tuple(offsets), held)  # the buffers kept alive: their ids stay theirs
            self.packs[key] = found
        packed, starts, _ = found
        self.compute.end()
        for b, at in zip(held, starts, strict=True):
            self.encoder.copy_buffer_to_buffer(b, 0, packed, at * 4, b.size)
        self.compute = self.encoder.begin_compute_pass()
        return packed

    def copy(self, source: object, target: object, nbytes: int) -> None:
        """Record a device-side copy of `nbytes` (a value a branch yields, a regrouping kept apart)."""
        self.compute.end()
        if nbytes:
            self.encoder.copy_buffer_to_buffer(source, 0, target, 0, (nbytes + 3) // 4 * 4)
        self.compute = self.encoder.begin_compute_pass()

    def end(self) -> None:
        self.compute.end()
        self.device.queue.submit([self.encoder.finish()])
        self.encoder = self.compute = None
        if self.unchecked:
            names, self.unchecked = sorted(self.unchecked), set()
            capped, wrapped = np.frombuffer(self.device.queue.read_buffer(self.flags, 0, 8), np.uint32)
            if capped or wrapped:
                self.device.queue.write_buffer(self.flags, 0, np.zeros(2, np.uint32))
            if capped:
                raise DeviceError(
                    f"llvmpipe stops a shader invocation's loops after 65,535 iterations, and one of "
                    f"{', '.join(names)} needed more: its results would be wrong, so none are returned "
                    "(a GPU driver has no such cap; smaller extents stay under it)"
                )
            if wrapped:
                raise DeviceError(
                    f"an int64 sum, difference or product in one of {', '.join(names)} left the int32 range the "
                    "device computes integers in, where numpy's int64 keeps the value: its results would be "
                    "wrong, so none are returned (the numpy module computes these inputs)"
                )

    def host(self, buffers: tuple[tuple[object, str, tuple[int, ...]], ...]) -> list[np.ndarray]:
        """Submit what is recorded and download `buffers` (buffer, host dtype, shape) for a kernel the
        host computes; `resume` records on after it."""
        self.end()
        self.stats["host_kernels"] = self.stats.get("host_kernels", 0) + 1
        return [self.read(b, dtype, shape) for b, dtype, shape in buffers]

    def sync(self, buffers: tuple[tuple[object, str, tuple[int, ...]], ...]) -> list[np.ndarray]:
        """Submit what is recorded and download `buffers` (buffer, host dtype, shape) for the host to
        decide on (an If's condition, a Loop's, a scan output's element); `resume` records on."""
        self.end()
        self.stats["syncs"] = self.stats.get("syncs", 0) + 1
        return [self.read(b, dtype, shape) for b, dtype, shape in buffers]

    def resume(self) -> None:
        """Record the forward's next dispatches (after a kernel the host computed)."""
        self.encoder = self.device.create_command_encoder()
        self.compute = self.encoder.begin_compute_pass()


def _wgpu_limit(name: str) -> str:
    """WebGPU's limit `name` as wgpu spells it, in kebab case (maxBufferSize -> max-buffer-size)."""
    return "".join(f"-{c.lower()}" if c.isupper() else c for c in name)


def _limits_text(limits: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in limits.items())


def _grid(threads: int, size: int = 64) -> int:
    """Workgroups of `size` invocations covering `threads` (the kernels read x + y * 65535)."""
    return (threads + size - 1) // size


PIECES: dict[str, object] = {
    "_CACHE_LIMIT": _CACHE_LIMIT,
    "DeviceError": DeviceError,
    "_after_header": _after_header,
    "_loops_counted": _loops_counted,
    "_FLAGS": _FLAGS,
    "declare_flags": declare_flags,
    "_device_dtype": _device_dtype,
    "_device_array": _device_array,
    "_host_array": _host_array,
    "_Gpu": _Gpu,
    "_grid": _grid,
    "_limits_text": _limits_text,
    "_wgpu_limit": _wgpu_limit,
}
