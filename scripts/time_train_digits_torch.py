"""examples/train-digits' schedule in torch, one thread: seconds per epoch and held-out accuracy, the peer
of `python examples/train-digits/train.py` (dev-time: needs torch, which CI does not install).

    /work/venvs/genai/bin/python scripts/time_train_digits_torch.py [EPOCHS]     # torch 2.13.0
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import make_grad_oracles as m  # noqa: E402

torch.set_num_threads(1)
spec = importlib.util.spec_from_file_location("train_digits", ROOT / "examples" / "train-digits" / "train.py")
assert spec is not None and spec.loader is not None
ex = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ex)
start = ex.initial_weights()
p = {k: torch.tensor(v, requires_grad=k in ex.TRAINED) for k, v in start.items()}
opt = torch.optim.SGD([p[k] for k in ex.TRAINED], lr=ex.LR, momentum=ex.MOMENTUM)
x_train, y_train, x_test, y_test = ex.data()
epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 20
began = time.perf_counter()
for epoch in range(epochs):
    for idx in ex.batches(epoch, len(x_train)):
        logits, _ = m.digits(torch.tensor(x_train[idx]), p)
        targets = torch.tensor(np.eye(10, dtype=np.float32)[y_train[idx]])
        loss = -(targets * torch.log_softmax(logits, dim=1)).sum(1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
seconds = time.perf_counter() - began
with torch.no_grad():
    logits, _ = m.digits(torch.tensor(x_test), p)
held_out = (logits.argmax(1).numpy() == y_test).mean()
print(f"torch {torch.__version__}: {seconds / epochs:.3f} s per epoch, held-out {held_out:.2%}")
