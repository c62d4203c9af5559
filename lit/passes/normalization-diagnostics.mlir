// RUN: loam-opt %s -p stage0 --split-input-file --verify-diagnostics | filecheck %s

// Batch statistics (training) are refused, not silently replaced by the running ones.
// CHECK: BatchNormalization node 'bn': training_mode 1 (batch statistics) is not supported; export for inference
graph.model {ir_version = 8 : i64, opset_import = {"" = 15 : i64}} {
  graph.graph "g" (%x: !graph.tensor<f32, [2, 3]>) inputs ["x"] {
    %s = graph.initializer "s" : !graph.tensor<f32, [3]>
    %b = graph.node "BatchNormalization" "bn" since 15 (%x, %s, %s, %s, %s) {training_mode = 1 : i64} -> ["b"] : !graph.unknown
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
