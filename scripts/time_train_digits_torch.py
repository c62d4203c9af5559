"""examples/train-digits' schedule in torch, one thread: seconds per epoch and held-out accuracy, the peer
of `python examples/train-digits/train.py` (dev-time: needs torch, which CI does not install).

    /work/venvs/genai/bin/python scripts/time_train_digits_torch.py [EPOCHS]     # torch 2.13.0
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_grad_oracles as oracles

torch.set_num_threads(1)
epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 20
_, weights, example, seconds = oracles.train_digits(epochs=epochs)
_, _, x_test, y_test = example.data()  # type: ignore[attr-defined]
with torch.no_grad():
    logits, _ = oracles.digits(torch.tensor(x_test), weights)
held_out = (logits.argmax(1).numpy() == y_test).mean()
print(f"torch {torch.__version__}: {seconds / epochs:.3f} s per epoch, held-out {held_out:.2%}")
