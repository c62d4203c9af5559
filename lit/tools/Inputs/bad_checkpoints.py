"""Write hand-made bad checkpoints and models into the folder argv[1], for loam-build-refusals.test.

Each file is wrong in one way the build must refuse with one line naming the culprit.  They are
built byte by byte here (not by Loam), against the MLP example's tensors (examples/mlp).
"""

import json
import struct
import sys
from pathlib import Path

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)


def safetensors(name: str, header: dict[str, object], payload: bytes) -> None:
    raw = json.dumps(header).encode()
    (out / name).write_bytes(struct.pack("<Q", len(raw)) + raw + payload)


# A length prefix past the end of the file.
(out / "length.safetensors").write_bytes(struct.pack("<Q", 4096) + b"{}")
# A header that is not JSON.
raw = b'{"fc1.weight": {"dtype": "F32",'
(out / "json.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw)
# Two tensors sharing bytes.
safetensors(
    "overlap.safetensors",
    {
        "fc3.bias": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]},
        "fc2.bias": {"dtype": "F32", "shape": [3], "data_offsets": [8, 20]},
    },
    bytes(20),
)
# A shape whose byte length is not the span of its offsets.
safetensors("shape.safetensors", {"fc3.bias": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}}, bytes(16))
# A dtype safetensors does not define.
safetensors("dtype.safetensors", {"fc3.bias": {"dtype": "F31", "shape": [3], "data_offsets": [0, 12]}}, bytes(12))
# An index naming a shard that is not there.
(out / "model.safetensors.index.json").write_text(
    json.dumps({"metadata": {}, "weight_map": {"fc3.bias": "model-00002-of-00002.safetensors"}})
)
# A model whose initializer's external data climbs out of its folder.
(out / "traversal").mkdir(exist_ok=True)
(out / "traversal" / "m.onnxtext").write_text(
    '<ir_version: 8, opset_import: ["" : 17]>\n'
    'g (float[4] x) => (float[4] y) <float[4] w = ["location": "../../w.bin", "offset": "0", "length": "16"]>\n'
    "{ y = Add (x, w) }\n"
)
