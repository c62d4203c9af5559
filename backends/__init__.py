"""Printers that turn a kernel-dialect program into a self-contained module: numpy, WGSL through wgpu,
or WGSL in a browser (model.js)."""
