"""Printers of a kernel-dialect program as a self-contained module: numpy, WGSL through wgpu, or model.js."""
