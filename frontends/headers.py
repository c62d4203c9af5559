"""One tensor as a checkpoint's header describes it, whichever format the header is.

`loam.frontends.checkpoint` reads safetensors headers and Hugging Face indexes, `loam.frontends.gguf` GGUF headers; both
describe each tensor as a `HeaderEntry`, which the build checks against the graph
(`loam.frontends.checkpoint.check_weights`) and reads when it embeds a weight (`loam.frontends.checkpoint.read_tensor`).
"""

from __future__ import annotations

from dataclasses import dataclass

from loam.core import dtypes


@dataclass(frozen=True)
class HeaderEntry:
    """One tensor of a checkpoint header."""

    name: str
    elem: dtypes.ElementType
    shape: tuple[int, ...]
    begin: int  # byte range within the payload
    end: int
    payload_start: int = 0  # file offset of the payload (8 + header length; 0 for GGUF's absolute offsets)
    encoding: str = ""  # GGUF: the ggml type ("F16", "Q8_0", ...); `elem` is what the graph reads it as
