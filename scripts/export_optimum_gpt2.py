"""Export a tiny GPT-2 with optimum's ONNX exporter as optimum 1.x wrote decoders: three files and the merged one
(dev-time; the merged decoder is committed).

Why: `decoder_model_merged.onnx` is what many published ONNX decoders are: one `If` on `use_cache_branch`
whose then-branch is the decoder with past and whose else-branch the one without, the graph's inputs
taken from the decoder without past.  So its interface declares `attention_mask` as
`[batch_size, sequence_length]` (the no-past decoder's declaration), although the with-past branch feeds
it past + new columns.  ONNX reads one dim_param as one value, so that declaration leaves the with-past
branch an empty past only; Loam says so at build time, and `--interface attention_mask=batch_size,
attention_length` re-declares it so the file runs unedited (tests/models/test_optimum_merged.py).

optimum 1.24 is the last release line with `--legacy` (the merged decoder); it calls `torch.onnx.export`
without `dynamo=`, which meant the TorchScript exporter when it was released; torch 2.13 defaults to
the dynamo exporter, whose external-data files optimum 1.24 cannot clean up.  This script restores the
default optimum was written for (`dynamo=False`) and runs the exporter as `optimum-cli export onnx
--legacy` does:

    python3 -m venv /work/venvs/optimum1
    /work/venvs/optimum1/bin/pip install torch==2.13.0 optimum==1.24.0 transformers==4.46.3 \\
        onnx==1.23.2 onnxruntime==1.32.0 onnxscript==0.7.2
    /work/venvs/optimum1/bin/python scripts/export_optimum_gpt2.py     # a few seconds

Writes tests/models/optimum/decoder_model_merged.onnx (weights inside: a few hundred KB): random weights
from a fixed seed, every LayerNorm and bias redrawn, GPT-2 with 2 layers, 4 heads, hidden 32, vocabulary 256.
"""

from __future__ import annotations

import functools
import shutil
import sys
import tempfile
from pathlib import Path

import onnx
import torch
from transformers import GPT2Config, GPT2LMHeadModel

OUT = Path(__file__).resolve().parents[1] / "tests" / "models" / "optimum"
SEED = 20261202


def main() -> int:
    torch.onnx.export = functools.partial(torch.onnx.export, dynamo=False)  # optimum 1.24's default exporter
    from optimum.exporters.onnx import main_export

    torch.manual_seed(SEED)
    model = GPT2LMHeadModel(
        GPT2Config(vocab_size=256, n_positions=64, n_embd=32, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0)
    )
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".ln_" in name or name.startswith("transformer.ln_f"):
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.1 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
    with tempfile.TemporaryDirectory() as work:
        source, target = Path(work) / "gpt2", Path(work) / "onnx"
        model.save_pretrained(source)
        main_export(str(source), output=str(target), task="text-generation-with-past", legacy=True)
        merged = onnx.load(str(target / "decoder_model_merged.onnx"))
        OUT.mkdir(parents=True, exist_ok=True)
        onnx.save(merged, str(OUT / "decoder_model_merged.onnx"))
        shutil.copy(target / "config.json", OUT / "config.json")
    print(f"optimum legacy export: wrote {OUT / 'decoder_model_merged.onnx'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
