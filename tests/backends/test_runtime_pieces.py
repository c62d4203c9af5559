"""A module carrying a runtime piece carries every piece it reads.

The printers find a piece's dependencies in its source (`piece_reads.reads`, over `symtable`).  These
tests check that from the other side, by what Python runs: for each piece, the sources a module would
declare with it (`numpy_runtime.pieces_for`, `wgsl_pieces.pieces_for`) are executed together in a fresh
namespace holding only the module's imports, and every global name their compiled code loads
(`LOAD_GLOBAL`, and a class body's `LOAD_NAME` of a name it does not bind) must then be defined there
or be a builtin.
"""

from __future__ import annotations

import builtins
import dis
import importlib
import types
from collections.abc import Iterable

import numpy as np
import pytest

from loam.backends import numpy_runtime, wgsl_pieces
from loam.backends.piece_reads import closure, reads

MODULE_DECLARES = frozenset({"INPUTS", "OUTPUTS", "DECODE_STATE", "forward"})
"""What a module declares itself and a piece reads (`DecodeState` reads these)."""


def loaded_globals(code: types.CodeType) -> set[str]:
    """The global names `code` and the code nested in it load: `LOAD_GLOBAL`, and `LOAD_NAME` of a name
    the same code does not bind (a module's or a class body's)."""
    instructions = list(dis.get_instructions(code))
    bound = {i.argval for i in instructions if i.opname in ("STORE_NAME", "DELETE_NAME")}
    if any(i.opname == "SETUP_ANNOTATIONS" for i in instructions):  # a body with annotated names
        bound.add("__annotations__")
    found = {i.argval for i in instructions if i.opname == "LOAD_GLOBAL"}
    found |= {i.argval for i in instructions if i.opname == "LOAD_NAME" and i.argval not in bound}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found |= loaded_globals(const)
    return found


def unbound(sources: Iterable[str], imports: dict[str, object]) -> set[str]:
    """The names the code of `sources`, declared together as a module would, loads and does not define
    (run in a namespace holding only `imports`; the builtins and `MODULE_DECLARES` count as defined)."""
    # As the module compiles them: without this file's `from __future__ import annotations`.
    code = compile("\n\n".join(sources), "<module>", "exec", dont_inherit=True)
    namespace: dict[str, object] = dict(imports)
    exec(code, namespace)  # a name read where a definition runs (a default, an annotation) fails here
    return loaded_globals(code) - namespace.keys() - vars(builtins).keys() - MODULE_DECLARES


NUMPY_IMPORTS: dict[str, object] = {"np": np}
WGSL_IMPORTS: dict[str, object] = {**NUMPY_IMPORTS, "wgpu": object()}  # only its name: wgpu is not called here


def imported(modules: Iterable[str]) -> dict[str, object]:
    """The standard library `modules` (`numpy_runtime.standard_imports`), as the module imports them."""
    return {name: importlib.import_module(name) for name in modules}


def feature_reads(names: Iterable[str]) -> set[str]:
    """What the pieces `names` read only for some feature (`numpy_runtime.FEATURES`)."""
    return {dep for table in numpy_runtime.FEATURES.values() for name in names for dep in table.get(name, ())}


def parameter_reads(names: Iterable[str]) -> set[str]:
    """What the kernels `names` read only where a call sets a parameter (`numpy_runtime.PARAMETER_PIECES`)."""
    return {dep for (kernel, _), deps in numpy_runtime.PARAMETER_PIECES.items() if kernel in names for dep in deps}


def test_each_numpy_piece_is_carried_with_everything_it_reads() -> None:
    missing: dict[str, set[str]] = {}
    for piece in numpy_runtime.PIECES:
        for features in (set(numpy_runtime.FEATURES), set()):
            carried = numpy_runtime.pieces_for([piece], features)
            sources = [numpy_runtime.source_of(name, features) for name in carried]
            lacking = unbound(sources, {**NUMPY_IMPORTS, **imported(numpy_runtime.standard_imports(carried))})
            if not features:  # without a feature, what a piece reads only for it is never reached
                lacking -= feature_reads(carried)
            lacking -= parameter_reads(carried)  # carried where a call sets the parameter: checked below
            if lacking:
                missing[f"{piece} ({'every feature' if features else 'no feature'})"] = lacking
    assert not missing, missing


def test_a_kernel_called_with_a_parameter_is_carried_with_what_it_reads_for_it() -> None:
    missing: dict[str, set[str]] = {}
    assert numpy_runtime.PARAMETER_PIECES
    for (kernel, parameter), deps in numpy_runtime.PARAMETER_PIECES.items():
        carried = numpy_runtime.pieces_for([kernel, *numpy_runtime.parameter_pieces(kernel, {parameter: 1})])
        assert set(deps) <= set(carried)
        sources = [numpy_runtime.source_of(name) for name in carried]
        lacking = unbound(sources, {**NUMPY_IMPORTS, **imported(numpy_runtime.standard_imports(carried))})
        if lacking:
            missing[f"{kernel} ({parameter})"] = lacking
    assert not missing, missing


def test_each_device_piece_is_carried_with_everything_it_reads() -> None:
    missing: dict[str, set[str]] = {}
    for piece in wgsl_pieces.pieces():
        carried = wgsl_pieces.pieces_for([piece])
        host = numpy_runtime.pieces_for(wgsl_pieces.numpy_pieces_read(carried))
        sources = [*map(numpy_runtime.source_of, host), *map(wgsl_pieces.source_of, carried)]
        standard = {*numpy_runtime.standard_imports(host), *wgsl_pieces.standard_imports(carried)}
        lacking = unbound(sources, {**WGSL_IMPORTS, **imported(standard)})
        if lacking:
            missing[piece] = lacking
    assert not missing, missing


def test_a_piece_carried_without_what_it_reads_is_caught() -> None:
    """The check fails where a dependency is left out: `_check_weight` without `encoding_supplies`."""
    carried = [n for n in numpy_runtime.pieces_for(["_check_weight"]) if n != "encoding_supplies"]
    sources = [numpy_runtime.source_of(name) for name in carried]
    assert unbound(sources, NUMPY_IMPORTS) == {"encoding_supplies"}
    synthetic = "def a(x):\n    return b(x) + np.sum(x)\n"
    assert unbound([synthetic], NUMPY_IMPORTS) == {"b"}
    assert reads(synthetic) == {"b", "np"}


def test_a_piece_read_where_its_definition_runs_is_caught() -> None:
    """An annotation or default value naming a piece left out stops the module at its definition."""
    with pytest.raises(NameError, match="DecodeState"):
        unbound(["def step(state: DecodeState) -> None:\n    pass\n"], NUMPY_IMPORTS)


def test_reads_finds_names_as_python_resolves_them() -> None:
    source = (
        "@decorated\n"
        "def f(x: Annotated = default, *, y=other) -> Result:\n"
        "    local = helper(x)\n"
        "    def inner():\n"
        "        return local + outer_only\n"
        "    return [g(v) for v in local] + inner()\n"
        "\n"
        "class C(Base):\n"
        "    attr = np.zeros\n"
        "    copy = attr\n"
        "    def m(self):\n"
        "        return attr_seen_globally + f(self)\n"
    )
    assert reads(source) == {
        "decorated", "Annotated", "default", "other", "Result", "helper", "outer_only", "g", "Base", "np",
        "attr_seen_globally",
    }  # fmt: skip


def test_closure_follows_dependencies_through_others() -> None:
    table = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert closure(["a"], lambda name: table[name]) == {"a", "b", "c"}
    assert closure([], lambda name: table[name]) == set()


def test_each_feature_names_what_its_piece_reads() -> None:
    """A `FEATURES` entry names only pieces its piece's source reads (a stale entry would be caught)."""
    for feature, table in numpy_runtime.FEATURES.items():
        for name, deps in table.items():
            assert set(deps) <= numpy_runtime.piece_reads(name), (feature, name)


def test_a_feature_a_module_lacks_leaves_its_pieces_out() -> None:
    assert "_read_gguf" not in numpy_runtime.pieces_for(["_read_checkpoint"], ())
    assert "_read_gguf" in numpy_runtime.pieces_for(["_read_checkpoint"], ("gguf",))
    assert "_read_safetensors" in numpy_runtime.pieces_for(["_read_checkpoint"], ())


def test_the_standard_library_modules_a_piece_reads_are_imported() -> None:
    """`_strict_json` reads `json`, which its runtime module imports: a module carrying it imports `json`."""
    assert numpy_runtime.standard_imports(numpy_runtime.pieces_for(["_read_safetensors"])) == {"json"}
    assert numpy_runtime.standard_imports(numpy_runtime.pieces_for(["_check_input"])) == set()
    assert wgsl_pieces.standard_imports(wgsl_pieces.pieces_for(["_Gpu"])) == {"threading"}
    carried = numpy_runtime.pieces_for(["_read_safetensors"])
    assert unbound(map(numpy_runtime.source_of, carried), NUMPY_IMPORTS) == {"json"}  # left out: caught


def test_a_device_piece_reads_the_numpy_runtime_s_pieces() -> None:
    """`_device_array` raises the numpy runtime's ShapeError, which the module carries with that runtime."""
    assert "ShapeError" in wgsl_pieces.numpy_pieces_read(wgsl_pieces.pieces_for(["_device_array"]))
    assert {"_Gpu", "_device_array", "_host_array", "_device_dtype"} <= set(wgsl_pieces.pieces_for(["_Gpu"]))
