// RUN: loam-opt %s -p stage0 --split-input-file --verify-diagnostics | filecheck %s

// An element type ONNX does not define an operator on stops the build naming it: Sub on bool.
// CHECK: Sub node 'minus': computes in element type bool; Loam computes it in f32, f64, f16, bf16, i8, i16, i32, i64, ui8, ui16, ui32, ui64
graph.model {ir_version = 8 : i64, opset_import = {"" = 14 : i64}} {
  graph.graph "bool_sub" (%a: !graph.tensor<bool, [2]>, %b: !graph.tensor<bool, [2]>) inputs ["a", "b"] {
    %y = graph.node "Sub" "minus" since 14 (%a, %b) -> ["y"] : !graph.unknown
    graph.return %y ["y"] : !graph.tensor<bool, [2]>
  }
}

// -----

// Cast to a type Loam does not compute (string) is refused, naming the type.
// CHECK: Cast node 'to_string': casts to element type string
graph.model {ir_version = 9 : i64, opset_import = {"" = 19 : i64}} {
  graph.graph "cast_string" (%x: !graph.tensor<f32, [2]>) inputs ["x"] {
    %y = graph.node "Cast" "to_string" since 19 (%x) {to = 8 : i64} -> ["y"] : !graph.unknown
    graph.return %y ["y"] : !graph.tensor<string, [2]>
  }
}

// -----

// From opset 11 Clip's bounds are inputs: an old `min` attribute would be ignored, so it stops the build.
// CHECK: Clip node 'clamp': attribute 'min' is not defined for Clip at opset 13
graph.model {ir_version = 8 : i64, opset_import = {"" = 13 : i64}} {
  graph.graph "clip_attr" (%x: !graph.tensor<f32, [2]>) inputs ["x"] {
    %y = graph.node "Clip" "clamp" since 13 (%x) {min = 0.0 : f32} -> ["y"] : !graph.unknown
    graph.return %y ["y"] : !graph.tensor<f32, [2]>
  }
}

// -----

// Before opset 7 the operands of Add need equal shapes unless broadcast=1.
// CHECK: Add node 'plain': opset 6 without broadcast=1 needs equal shapes, got [2, 3] and [3]
graph.model {ir_version = 3 : i64, opset_import = {"" = 6 : i64}} {
  graph.graph "old_shapes" (%a: !graph.tensor<f32, [2, 3]>, %b: !graph.tensor<f32, [3]>) inputs ["a", "b"] {
    %y = graph.node "Add" "plain" since 6 (%a, %b) -> ["y"] : !graph.unknown
    graph.return %y ["y"] : !graph.tensor<f32, [2, 3]>
  }
}
