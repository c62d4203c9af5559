"""Readers that turn a model file into graph-dialect IR: ONNX protobuf and text, StableHLO text; and the ONNX export."""
