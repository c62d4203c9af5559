// RUN: loam-opt %s -p stage0 --split-input-file --verify-diagnostics | filecheck %s

// A Reshape target only the run gives is read at run time, but its length (the result's rank) the build
// must know: one of symbolic length is refused, naming the node.
// CHECK: Reshape node 'reshape': the shape input is computed at run time, and its extents [N] must be
graph.model {ir_version = 8 : i64, opset_import = {"" = 18 : i64}} {
  graph.graph "runtime_shape" (%x: !graph.tensor<f32, [2, 3]>, %s: !graph.tensor<i64, ["N"]>) inputs ["x", "s"] {
    %y = graph.node "Reshape" "reshape" since 18 (%x, %s) -> ["y"] : !graph.unknown
    graph.return %y ["y"] : !graph.tensor<f32, [6]>
  }
}

// -----

// CHECK: Pad node 'pad': mode 'mirror' is not supported
graph.model {ir_version = 8 : i64, opset_import = {"" = 10 : i64}} {
  graph.graph "bad_mode" (%x: !graph.tensor<f32, [2, 3]>) inputs ["x"] {
    %y = graph.node "Pad" "pad" since 10 (%x) {mode = "mirror", pads = #graph.list<ints [0, 1, 0, 1]>} -> ["y"] : !graph.unknown
    graph.return %y ["y"] : !graph.tensor<f32, [2, 5]>
  }
}
