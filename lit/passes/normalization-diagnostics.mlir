// RUN: loam-opt %s -p stage0 --split-input-file --verify-diagnostics | filecheck %s

// Training before opset 14 (saved statistics as outputs) is refused, not silently replaced by inference.
// CHECK: BatchNormalization node 'bn': more than one output at opset 9 means training with its saved statistics
graph.model {ir_version = 8 : i64, opset_import = {"" = 9 : i64}} {
  graph.graph "g" (%x: !graph.tensor<f32, [2, 3]>) inputs ["x"] {
    %s = graph.initializer "s" : !graph.tensor<f32, [3]>
    %b, %m = graph.node "BatchNormalization" "bn" since 9 (%x, %s, %s, %s, %s) -> ["b", "m"] : !graph.unknown, !graph.unknown
    graph.return %b ["b"] : !graph.tensor<f32, [2, 3]>
  }
}

// -----

// Opset 7's spatial = 0 (statistics per activation) is refused.
// CHECK: BatchNormalization node 'bn': spatial 0 (per-activation statistics) is not supported
graph.model {ir_version = 8 : i64, opset_import = {"" = 7 : i64}} {
  graph.graph "g" (%x: !graph.tensor<f32, [2, 3]>) inputs ["x"] {
    %s = graph.initializer "s" : !graph.tensor<f32, [3]>
    %b = graph.node "BatchNormalization" "bn" since 7 (%x, %s, %s, %s, %s) {spatial = 0 : i64} -> ["b"] : !graph.unknown
    graph.return %b ["b"] : !graph.tensor<f32, [2, 3]>
  }
}
