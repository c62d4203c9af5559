"""The domain of onnxruntime's contrib operators, which every rule in `loam.ops.microsoft` sets."""

DOMAIN = "com.microsoft"
