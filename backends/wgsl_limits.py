"""The device limits a WGSL module is built against, and keeping every shader within them.

A WebGPU device enforces the limits it was requested with, and WebGPU guarantees only its defaults:
8 storage buffers per shader stage, 16 KiB of workgroup memory, 256 invocations per workgroup,
128 MiB per storage binding, 256 MiB per buffer and 65,535 workgroups per grid dimension.  Many
browsers' adapters offer little more, so a module is built against the defaults unless the deployer
names the device's own (`DeviceLimits.from_mapping`: the options' `[device_limits]` table, or
`loam build --device-limits FILE`, in WebGPU's names as `adapter.limits` spells them), and its
runtime requests exactly these from the adapter.  A shader over a limit is a build error naming the
node and the limit, never a device validation error at run time:

- storage buffers: a shader binds params, its results, its operands, and the flags buffer where it
  raises a flag or loops (llvmpipe's loop counter raises one; see `wgsl_runtime._loops_counted`).
  Past the budget, its trailing operands share one read-only buffer (`fit_bindings`): the runtime
  copies them into it, after a header of their word offsets, before each dispatch
  (`wgsl_runtime._Gpu.pack`), and the shader reads `inJ[e]` as the word at `inpk[inpk[j] + e]`,
  bitcast to `inJ`'s type.  A shader whose results alone exceed the budget cannot be fitted.
- workgroup memory and invocations: read off the shader's `var<workgroup>` arrays and
  `@workgroup_size`; the kernels are written within the defaults, so exceeding them is refused.
- binding and buffer sizes: a buffer whose size the build knows is checked here; one whose size a
  call decides is checked by the runtime against the device's limits (a `ShapeError`).
- workgroups per dimension: the runtime lays a grid out in two dimensions of at most the limit.
"""

from __future__ import annotations

import itertools
import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path

from xdsl.dialects.builtin import ModuleOp

from loam.core.errors import OptionsError
from loam.dialects import build_contract as contract
from loam.passes.split_wide_weights import WEBGPU_BINDING_SIZE, WEBGPU_BUFFER_SIZE

__all__ = [
    "DEFAULT_LIMITS",
    "DeviceLimits",
    "FittedShader",
    "device_limits",
    "fit_bindings",
    "over_limits",
    "storage_bindings",
]

_WEBGPU_NAMES = {
    "storage_buffers": "maxStorageBuffersPerShaderStage",
    "workgroup_storage": "maxComputeWorkgroupStorageSize",
    "invocations": "maxComputeInvocationsPerWorkgroup",
    "binding_size": "maxStorageBufferBindingSize",
    "buffer_size": "maxBufferSize",
    "workgroups_per_dimension": "maxComputeWorkgroupsPerDimension",
}
"""Each limit's field here -> its name in WebGPU's `GPUSupportedLimits`."""


@dataclass(frozen=True)
class DeviceLimits:
    """What one shader and one buffer may use on the target device (WebGPU's defaults unless raised)."""

    storage_buffers: int = 8
    workgroup_storage: int = 16384
    invocations: int = 256
    binding_size: int = 128 << 20
    buffer_size: int = 256 << 20
    workgroups_per_dimension: int = 65535

    @classmethod
    def from_mapping(
        cls, table: Mapping[str, object], where: str = "device_limits", *, lowered: bool = False
    ) -> DeviceLimits:
        """Limits from WebGPU's names (`maxStorageBuffersPerShaderStage = 10`), the rest at their
        defaults; an unknown name, a non-integer or (unless `lowered`) a value under WebGPU's default
        is an OptionsError."""
        by_webgpu = {webgpu: name for name, webgpu in _WEBGPU_NAMES.items()}
        kwargs: dict[str, int] = {}
        for key, value in table.items():
            name = by_webgpu.get(key)
            if name is None:
                known = ", ".join(sorted(by_webgpu))
                raise OptionsError(f"{where}: '{key}' is not a device limit Loam builds against (known: {known})")
            if not isinstance(value, int) or isinstance(value, bool):
                raise OptionsError(f"{where}: '{key}' must be an integer, got {value!r}")
            default = getattr(DEFAULT_LIMITS, name)
            if value < default and not lowered:
                raise OptionsError(
                    f"{where}: '{key}' is {value}, under WebGPU's default {default}, which every device offers"
                )
            kwargs[name] = value
        return cls(**kwargs)

    @classmethod
    def from_file(cls, path: str | Path) -> DeviceLimits:
        """Limits from a JSON file (what `JSON.stringify(adapter.limits)` gives, or some of it) or a
        TOML file of the same names."""
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as err:
            raise OptionsError(f"{p}: cannot read the device limits: {err.strerror}") from None
        try:
            table = json.loads(text) if p.suffix != ".toml" else tomllib.loads(text)
        except (ValueError, tomllib.TOMLDecodeError) as err:
            raise OptionsError(
                f"{p}: not a {'TOML' if p.suffix == '.toml' else 'JSON'} table of limits: {err}"
            ) from None
        if not isinstance(table, dict):
            raise OptionsError(f"{p}: the device limits must be a table of WebGPU limit names to integers")
        # An adapter's whole `limits` object names many more; keep the ones Loam builds against.
        return cls.from_mapping({k: v for k, v in table.items() if k in _WEBGPU_NAMES.values()}, where=str(p))

    def webgpu(self) -> dict[str, int]:
        """These limits in WebGPU's names (what a page's `requestDevice` takes)."""
        return {webgpu: getattr(self, name) for name, webgpu in _WEBGPU_NAMES.items()}

    def requested(self) -> dict[str, int]:
        """What a module built within these limits asks of the adapter, in WebGPU's names: each at least
        its default, which every device has (a limit lowered under it is the build's own bound)."""
        return {k: max(v, DEFAULT_LIMITS.webgpu()[k]) for k, v in self.webgpu().items()}

    def raised(self) -> dict[str, int]:
        """The limits above WebGPU's defaults, in WebGPU's names."""
        return {k: v for k, v in self.webgpu().items() if v != DEFAULT_LIMITS.webgpu()[k]}


DEFAULT_LIMITS = DeviceLimits()
for _f in fields(DeviceLimits):
    assert _f.name in _WEBGPU_NAMES, _f.name
# `split-wide-weights` reads the same defaults without the backends (a pass sits below them).
assert (DEFAULT_LIMITS.binding_size, DEFAULT_LIMITS.buffer_size) == (WEBGPU_BINDING_SIZE, WEBGPU_BUFFER_SIZE)


def device_limits(module: ModuleOp) -> DeviceLimits:
    """The limits the build was given (`loam.device_limits`), WebGPU's defaults where it gave none.  The
    options raise limits only; IR written by hand may lower one, to see a bound hold at a small size
    (what the module asks of the device stays at least the defaults: `DeviceLimits.requested`)."""
    given = contract.DEVICE_LIMITS.get(module)
    if given is None:
        return DEFAULT_LIMITS
    return DeviceLimits.from_mapping(given, where=contract.DEVICE_LIMITS.name, lowered=True)


_BINDING = re.compile(r"@group\((\d+)\) @binding\((\d+)\) var<storage, (read|read_write)> (\w+): array<(\w+)>;\n?")
_LOOPS = ("for (", "loop {", "while (")


def storage_bindings(source: str) -> int:
    """How many storage buffers `source` binds on any adapter: those it declares, and the flags
    buffer the runtime binds to a shader that loops (llvmpipe's loop counter) where it is not declared."""
    declared = source.count("var<storage")
    if "var<storage, read_write> _loam_flags" not in source and any(k in source for k in _LOOPS):
        declared += 1
    return declared


@dataclass(frozen=True)
class FittedShader:
    """A shader within the storage-buffer budget: its source, and how many of its trailing operands
    share one buffer (0: none)."""

    source: str
    packed: int


def fit_bindings(source: str, budget: int) -> FittedShader | None:
    """`source` within `budget` storage buffers, its trailing operands packed into one (see the module
    docstring); None where its params, results and flags alone leave no room for one operand buffer."""
    count = storage_bindings(source)
    if count <= budget:
        return FittedShader(source, 0)
    operands = [m for m in _BINDING.finditer(source) if m.group(3) == "read" and re.fullmatch(r"in\d+", m.group(4))]
    k = count - budget + 1
    if k > len(operands) or k < 2:
        return None
    packed = operands[-k:]
    first = packed[0]
    out = source[: first.start()] + (
        f"@group(0) @binding({first.group(2)}) var<storage, read> inpk: array<u32>;\n"
        + "".join(source[a.end() : b.start()] for a, b in itertools.pairwise(packed))
        + source[packed[-1].end() :]
    )
    for j, m in enumerate(packed):
        out = _reads_packed(out, m.group(4), m.group(5), j)
        if re.search(rf"\b{m.group(4)}\b", out):  # read other than by index (`arrayLength(&in3)`)
            return None
    return FittedShader(out, k)


def _reads_packed(source: str, name: str, elem: str, j: int) -> str:
    """`source` with each `name[e]` read as the word at `inpk[inpk[j] + u32(e)]`, as an `elem`."""
    pattern = re.compile(rf"\b{name}\[")
    parts: list[str] = []
    done = 0
    while (m := pattern.search(source, done)) is not None:
        depth, k = 1, m.end()
        while depth:
            depth += {"[": 1, "]": -1}.get(source[k], 0)
            k += 1
        index = _reads_packed(source[m.end() : k - 1], name, elem, j)  # an index may read the same operand
        parts.append(source[done : m.start()] + f"bitcast<{elem}>(inpk[inpk[{j}u] + u32({index})])")
        done = k
    return "".join(parts) + source[done:]


_WORKGROUP_ARRAY = re.compile(r"var<workgroup>\s+\w+\s*:\s*array<(\w+)(?:<\w+>)?,\s*(\d+)u?>")
_WORKGROUP_SIZE = re.compile(r"@workgroup_size\((\d+)u?(?:,\s*(\d+)u?)?(?:,\s*(\d+)u?)?\)")


def workgroup_storage(source: str) -> int:
    """The bytes of workgroup memory `source` declares (every device scalar is 4 bytes)."""
    return sum(4 * int(count) for _, count in _WORKGROUP_ARRAY.findall(source))


def invocations(source: str) -> int:
    """The invocations of one workgroup of `source`'s entry point."""
    m = _WORKGROUP_SIZE.search(source)
    if m is None:
        return 1
    return int(m.group(1)) * int(m.group(2) or 1) * int(m.group(3) or 1)


def over_limits(source: str, limits: DeviceLimits) -> str | None:
    """What of `limits` the (fitted) shader `source` exceeds, in words; None where it fits."""
    count = storage_bindings(source)
    if count > limits.storage_buffers:
        return f"it binds {count} storage buffers, over maxStorageBuffersPerShaderStage {limits.storage_buffers}"
    shared = workgroup_storage(source)
    if shared > limits.workgroup_storage:
        return (
            f"it uses {shared} bytes of workgroup memory, over maxComputeWorkgroupStorageSize "
            f"{limits.workgroup_storage}"
        )
    n = invocations(source)
    if n > limits.invocations:
        return f"its workgroups have {n} invocations, over maxComputeInvocationsPerWorkgroup {limits.invocations}"
    return None
