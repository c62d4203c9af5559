"""Write the training split of the digits data for this example (dev-time: needs scikit-learn).

    python examples/train-digits/make_data.py      # scikit-learn 1.9.1

scikit-learn's bundled 8x8 handwritten digits (`sklearn.datasets.load_digits`: 1797 images, a copy of
the UCI "Optical Recognition of Handwritten Digits" test set), split as examples/digits split it
(`train_test_split(test_size=0.25, random_state=0)`): the 1347 training images go to
`train_pixels.npy` (uint8 [1347, 8, 8], pixels 0..16) and `train_labels.npy` (int64 [1347]); the 450
held-out ones are examples/digits' `test_images.npy` (pixels / 16) and `test_labels.npy`, which this
script checks it reproduces.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

HERE = Path(__file__).resolve().parent
DIGITS = HERE.parent / "digits"


def main() -> None:
    data = load_digits()
    x_train, x_test, y_train, y_test = train_test_split(data.images, data.target, test_size=0.25, random_state=0)
    held_out = np.load(DIGITS / "test_images.npy")
    assert np.array_equal((x_test / 16).astype(np.float32).reshape(held_out.shape), held_out)
    assert np.array_equal(y_test, np.load(DIGITS / "test_labels.npy"))
    np.save(HERE / "train_pixels.npy", x_train.astype(np.uint8))
    np.save(HERE / "train_labels.npy", y_train.astype(np.int64))
    print(f"wrote {len(x_train)} training images to {HERE}")


if __name__ == "__main__":
    main()
