"""Which device-runtime pieces a generated WGSL module declares, and their source text.

Besides the numpy module's runtime (`numpy_runtime`), a WGSL module carries the device runtime
(`wgsl_runtime`: `_Gpu`, the conversions between host and device arrays) and the host functions of
the kernels it dispatches (each WGSL family's `PIECES`: `_p_NAME` computes a kernel's parameters from
the bound extents).  Like the numpy runtime's, a piece's dependencies are read from its source text
(`piece_reads.reads`); a piece may also read a numpy runtime piece (`ShapeError`), which the module
then carries with the numpy runtime (`numpy_pieces_read`).  This module only chooses and prints;
nothing in it is copied.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from functools import cache

from loam.backends import numpy_runtime, wgsl_runtime
from loam.backends.piece_reads import closure, reads, standard_modules
from loam.backends.wgsl_kernel_printer import kernel_pieces


@cache
def pieces() -> dict[str, object]:
    """Every device piece that may be copied (the runtime's, then the kernels'), in declaration order."""
    return {**wgsl_runtime.PIECES, **kernel_pieces()}


@cache
def source_of(name: str) -> str:
    """The source text the module declares for device piece `name` (a constant: its value)."""
    piece = pieces()[name]
    if callable(piece):
        return inspect.getsource(piece)
    return f"{name} = {piece!r}\n"


@cache
def _reads(name: str) -> frozenset[str]:
    """Every module-level name device piece `name`'s source reads."""
    return reads(source_of(name))


def piece_reads(name: str) -> frozenset[str]:
    """The device pieces and numpy runtime pieces device piece `name`'s source reads."""
    return _reads(name) & {*pieces(), *numpy_runtime.PIECES}


def pieces_for(names: Iterable[str]) -> list[str]:
    """The device pieces among `names` and every device piece they read, in declaration order."""
    device = pieces()
    wanted = closure(names, lambda name: piece_reads(name) & device.keys())
    return [name for name in device if name in wanted]


def numpy_pieces_read(names: Iterable[str]) -> set[str]:
    """The numpy runtime pieces the device pieces `names` read that are no device piece themselves (a
    kernel's host function may share the numpy kernel's, `cubic_taps`: the device pieces carry it)."""
    device = pieces()
    return {dep for name in names for dep in piece_reads(name) if dep in numpy_runtime.PIECES and dep not in device}


def standard_imports(names: Iterable[str]) -> set[str]:
    """The standard library modules the device pieces `names` read (`threading`), which the module imports."""
    device = pieces()
    callables = [name for name in names if callable(device[name])]  # a constant reads no name
    return {module for name in callables for module in standard_modules(device[name], _reads(name))}
