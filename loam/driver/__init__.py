"""The build driver: options, the pipeline, front-end and target registries, passes, cache, drafting.

It runs the layers below (front ends, passes, backends) for `loam build`, `loam-opt` and `loam serve`; the
architecture tables and onnxruntime-genai folders it reads are options for a build."""
