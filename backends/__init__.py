"""Printers that turn a kernel-dialect program into a self-contained module: numpy, or WGSL through wgpu."""
