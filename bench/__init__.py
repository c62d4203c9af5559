"""Loam's benchmark: the generated numpy module against onnxruntime (`python -m bench`; see bench/run.py)."""
