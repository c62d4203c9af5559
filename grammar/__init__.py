"""The lark grammars the ONNX text reader parses with (package data)."""
