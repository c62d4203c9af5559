"""Where each tensor lies inside a safetensors file, read from its header alone.

The export scripts write an ONNX graph's text whose initializers are external data in a safetensors
checkpoint: each initializer names the checkpoint, the absolute byte offset of its data and its length.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path


def safetensors_offsets(path: Path) -> dict[str, tuple[int, int]]:
    """Each tensor's (absolute byte offset, length) inside the safetensors file at `path`."""
    with path.open("rb") as file:
        (header_len,) = struct.unpack("<Q", file.read(8))
        header = json.loads(file.read(header_len))
    start = 8 + header_len
    return {
        name: (start + info["data_offsets"][0], info["data_offsets"][1] - info["data_offsets"][0])
        for name, info in header.items()
        if name != "__metadata__"
    }
