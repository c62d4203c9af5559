"""The `LoamError` hierarchy: every refusal of bad input is one of these.

A `LoamError` carries a message that names the culprit (file, node, tensor, axis) and says what to
change.  The command-line tools print it as one line and exit 1; no traceback reaches a user.
"""

from __future__ import annotations


class LoamError(Exception):
    """Base of every error Loam raises for bad input (never for a bug in Loam itself)."""


class UsageError(LoamError):
    """A command line or API call is malformed (exit status 2)."""


class OptionsError(LoamError):
    """The build options (TOML file, flags or `loam.Options`) name something unknown or invalid."""


class ModelError(LoamError):
    """The model file cannot be read: malformed protobuf, a path outside the model's folder, ..."""


class OnnxSyntaxError(ModelError):
    """The ONNX textual form has a syntax error; the message starts with `file:line:column`."""

    def __init__(self, filename: str, line: int, column: int, message: str) -> None:
        self.filename = filename
        self.line = line
        self.column = column
        super().__init__(f"{filename}:{line}:{column}: {message}")


class UnsupportedError(LoamError):
    """The model uses something Loam does not compile (an operator, an element type, ...)."""


class ShapeError(LoamError):
    """Two extents disagree: at build time inside the graph, or at run time at `forward`'s boundary."""


class AxisError(LoamError):
    """Axis naming failed: a tensor no layout rule reaches, or two axis names meeting in one node."""


class CheckpointError(LoamError):
    """A checkpoint's header disagrees with the graph (build time) or is malformed."""


class LoadError(CheckpointError):
    """`Weights.load` was given bytes that disagree with the graph (run time)."""


class TokenizerError(LoamError):
    """A tokenizer's description (GGUF metadata, `tokenizer.json`) is missing, malformed or unsupported, or its chat
    template fails to render."""


class PolyError(ShapeError):
    """A polynomial extent is malformed (bad text) or cannot be evaluated (a symbol has no value)."""
