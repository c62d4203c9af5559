// RUN: loam-opt %s -p stage0 --split-input-file --verify-diagnostics | filecheck %s

// The axes input of a reduction must be known at build time.
// CHECK: ReduceSum node 'sum': the axes input must be known at build time
graph.model {ir_version = 8 : i64, opset_import = {"" = 13 : i64}} {
  graph.graph "g" (%x: !graph.tensor<f32, [2, 3]>, %axes: !graph.tensor<i64, [1]>) inputs ["x", "axes"] {
    %s = graph.node "ReduceSum" "sum" since 13 (%x, %axes) -> ["s"] : !graph.unknown
    graph.return %s ["s"] : !graph.tensor<f32, [2, 1]>
  }
}

// -----

// noop_with_empty_axes did not exist while axes was an attribute.
// CHECK: ReduceMean node 'mean': attribute 'noop_with_empty_axes' is not defined for ReduceMean at opset 13
graph.model {ir_version = 8 : i64, opset_import = {"" = 13 : i64}} {
  graph.graph "g" (%x: !graph.tensor<f32, [2, 3]>) inputs ["x"] {
    %s = graph.node "ReduceMean" "mean" since 13 (%x) {noop_with_empty_axes = 1 : i64} -> ["s"] : !graph.unknown
    graph.return %s ["s"] : !graph.tensor<f32, [1, 1]>
  }
}
