"""The runtime: the numpy code a generated module carries and the build runs, written once.

A generated numpy module imports only numpy and the standard library, so it carries the functions it
calls as source text: its errors (`errors`), the checkpoint readers and checks behind `Weights.load`
(`weights`, `gguf`, `dequant`), the checks `forward` makes before any kernel (`prologue`), the library
kernels (`kernels`), and `set_threads` (`threads`), which bounds the BLAS under numpy's products.  The
build runs the very same functions: stage 0 folds a node with its kernel
(`kernels.conv.kernel_conv`, ...), a derived extent symbol's value is `prologue.derived_extent`, a
GGUF header is read by `gguf.parse_gguf_header`, and a checkpoint tensor's encoding is accepted by
`weights.encoding_supplies`, so the build and the module cannot disagree.  What the build or another
runtime module calls has a public name, in the runtime and so in every generated module
(`dequant.dequantized`, which `weights` reads); what only the module and the pieces beside it call
keeps an underscore (`_check_input`, `_load_weights`, `_relu`).

Each module here defines `PIECES` (name -> function or class, copied into a module by source).  A
piece reads only numpy, the builtins and other pieces, calling them by name; which others is read
from its source, so no table lists them (`backends/piece_reads.py`), and `weights.FEATURES` names
those a piece reads only for a feature some models use.  This package imports nothing but numpy,
the standard library and its own modules (tests/test_imports.py holds it to that).  Choosing the
pieces a program needs and printing them is the backend's part (`backends/numpy_runtime.py`).
"""
