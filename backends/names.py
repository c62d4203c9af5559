"""The identifiers a printed module uses: one set, and the names minted from ONNX names against it.

Both printers (`numpy_module`, `wgsl_module`) mint every Python identifier they derive from model
text (an input, an intermediate value, a weight attribute, an output field) or number themselves
(`_zip_0`, `_CONST_0`, `_if0_0`) through one `Names`.  A `Names` starts out holding every name the
module relies on being what Python or the module makes it:

- Python's keywords and soft keywords, and every builtin (`bool`, `len`, `range`, `float`, `print`,
  `type`, ...): forward says `if bool(...)`, a runtime piece says `len(...)`, and a local of
  forward or a module-level name spelled like a builtin would shadow it;
- the libraries the module imports (`np`, `numpy`, `ml_dtypes`, `wgpu`);
- `MODULE_NAMES`: what every numpy module declares or spells literally (`Weights`, `forward`,
  `INPUTS`, `_env`, `_buf`, the attributes of `Weights` that its weight slots must not hide, ...),
  and `WGSL_MODULE_NAMES`, what the WGSL module adds (`g`, `_w`, `_b`, `_gpu`, `_SHADERS`, ...);
- and what the printer reserves besides: its runtime pieces (`ShapeError`, `kernel_*`, `_p_*`; those
  with public names are `RUNTIME_NAMES`) and axis marker classes.

`identifier(text)` spells any text as an ASCII identifier: `fc1.weight` -> `fc1_weight`,
`1abc` -> `v_1abc`, `häuser` -> `hauser` (accents dropped), `日本` -> `u65e5_u672c`, and never two
leading underscores (Python would mangle such a name inside `class Weights`).  `Names.mint` then
appends `_` while the spelling is taken, so two texts spelled alike (`a.b`, `a_b`) get `a_b` and
`a_b_`, deterministically in the order the printer mints them.
"""

from __future__ import annotations

import builtins
import keyword
import re
import unicodedata
from collections.abc import Iterable

from loam.backends import numpy_runtime, wgsl_pieces

__all__ = [
    "LIBRARY_NAMES",
    "MARKER_RESERVED",
    "MODULE_NAMES",
    "PYTHON_NAMES",
    "RUNTIME_NAMES",
    "WGSL_MODULE_NAMES",
    "Names",
    "identifier",
]

# Keywords, soft keywords (`match`, `case`, `_`, `type`) and builtins: never a minted name.
PYTHON_NAMES = frozenset(keyword.kwlist) | frozenset(keyword.softkwlist) | frozenset(dir(builtins))

# The libraries a module imports, under the names it imports them by, and numpy's own name.
LIBRARY_NAMES = frozenset({"np", "numpy", "ml_dtypes", "wgpu"})

# What every numpy module declares or spells itself, whatever the program holds: its top-level
# names, forward's own locals, the class attributes of `Weights` (a weight attribute is one of its
# `__slots__`, which must not name a class attribute) and of `Outputs`, and the parameters of the
# methods the module writes out.
MODULE_NAMES = frozenset({
    "Weights", "Outputs", "forward", "INPUTS", "OUTPUTS", "SAFETENSORS_DTYPES", "FORMATS", "_POOL", "_WEIGHT_BYTES",
    "_BESIDE_DIGEST", "_BESIDE_DATA", "_prepare",
    "weights", "_env", "_src", "_buf", "_key",
    "_SPECS", "_CHECKPOINT_NAMES", "_PACKED", "_ROW_ORDERS", "_EXTERNAL", "_EMBEDDED", "load", "load_file", "embedded",
    "stored", "_from", "_carried", "_stored", "_source", "_fields", "_field_defaults", "_make", "_replace", "_asdict",
    "self", "cls", "data", "path", "values", "tensors",
})  # fmt: skip

# What the WGSL module declares or spells besides (its runtime pieces are reserved by the printer).
WGSL_MODULE_NAMES = frozenset(
    {
        "_SHADERS",
        "_PACKED_OPERANDS",
        "_LIMITS",
        "_GPU",
        "_gpu",
        "_resident",
        "g",
        "_w",
        "_b",
        "_sizes",
        "_step",
        "threading",
    }
)

# The runtime pieces a module may declare under a public name: its errors, the library kernels
# (`kernel_conv`), the pieces the build or another runtime module also calls (`widened`,
# `derived_extent`, ...), the WGSL module's device pieces so named (`DeviceError`, `row_block`).
RUNTIME_NAMES = frozenset(name for name in (*numpy_runtime.PIECES, *wgsl_pieces.pieces()) if not name.startswith("_"))

# What an axis marker class (a module-level class named after the axis) must not be named: a name
# either printer reserves that does not start with `_` (an axis name never does).  The layout
# drafter invents axis names clear of these; the printers refuse a layout's axis named so.
MARKER_RESERVED = PYTHON_NAMES | LIBRARY_NAMES | MODULE_NAMES | WGSL_MODULE_NAMES | RUNTIME_NAMES

_MARKS = re.compile(r"[^0-9A-Za-z_]")


def identifier(text: str) -> str:
    """`text` spelled as an ASCII Python identifier (not yet checked against any set).

    ASCII characters other than letters, digits and `_` become `_`; other characters lose their
    accents (NFKD) and the rest become `u` and their code point in hex, `_`-separated from their
    neighbours; a leading digit gets `v_`; leading underscores shrink to one; nothing left is `v`."""
    out: list[str] = []
    after_code = False  # the last character was spelled by its code point
    for ch in unicodedata.normalize("NFKD", text):
        if unicodedata.combining(ch):
            continue  # an accent of the letter before it
        if ch.isascii():
            spelled = _MARKS.sub("_", ch)
            if after_code and spelled != "_":
                out.append("_")
            out.append(spelled)
            after_code = False
        else:
            if out and not out[-1].endswith("_"):
                out.append("_")
            out.append(f"u{ord(ch):04x}")
            after_code = True
    ident = "".join(out)
    ident = re.sub(r"^__+", "_", ident)
    if ident in ("", "_"):
        return "v"
    return "v_" + ident if ident[0].isdigit() else ident


class Names:
    """One set of identifiers for a whole module: every name it relies on, and every name minted."""

    def __init__(self, reserved: Iterable[str] = ()) -> None:
        self.taken: set[str] = {*PYTHON_NAMES, *LIBRARY_NAMES, *MODULE_NAMES, *reserved}

    def reserve(self, name: str) -> None:
        self.taken.add(name)

    def __contains__(self, name: str) -> bool:
        return name in self.taken

    def mint(self, text: str) -> str:
        """A fresh identifier spelling `text` as closely as possible (`_` appended while taken)."""
        ident = identifier(text)
        while ident in self.taken:
            ident += "_"
        assert ident.isidentifier() and not keyword.iskeyword(ident), ident
        self.taken.add(ident)
        return ident
