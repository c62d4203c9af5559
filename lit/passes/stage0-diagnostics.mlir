// RUN: loam-opt %s -p stage0 --split-input-file --verify-diagnostics | filecheck %s


// CHECK: node 'mystery' uses operator 'FooBar', which Loam does not compile
graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {
  graph.graph "unknown" (%x: !graph.tensor<f32, [2]>) inputs ["x"] {
    %y = graph.node "FooBar" "mystery" since 17 (%x) -> ["y"] : !graph.unknown
    graph.return %y ["y"] : !graph.tensor<f32, [2]>
  }
}

// -----

// CHECK: MatMul node 'mm': contracted extents disagree: 8 in the first operand, 7 in the second
graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {
  graph.graph "mismatch" (%x: !graph.tensor<f32, [2, 8]>) inputs ["x"] {
    %w = graph.initializer "w" : !graph.tensor<f32, [7, 3]>
    %y = graph.node "MatMul" "mm" since 17 (%x, %w) -> ["y"] : !graph.unknown
    graph.return %y ["y"] : !graph.tensor<f32, [2, 3]>
  }
}

// -----

// CHECK: graph output 'y' axis 1 is declared 4, the nodes produce 3
graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {
  graph.graph "declared" (%x: !graph.tensor<f32, [2, 3]>) inputs ["x"] {
    %y = graph.node "Relu" "r" since 17 (%x) -> ["y"] : !graph.unknown
    graph.return %y ["y"] : !graph.tensor<f32, [2, 4]>
  }
}

// -----

// CHECK: graph input 'x' axis 0 has an unknown extent; give it a dim_param or a dim_value in the model
graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {
  graph.graph "unknown_dim" (%x: !graph.tensor<f32, [?, 3]>) inputs ["x"] {
    %y = graph.node "Relu" "r" since 17 (%x) -> ["y"] : !graph.unknown
    graph.return %y ["y"] : !graph.tensor<f32, [?, 3]>
  }
}

// -----

// An attribute a rule would ignore stops the build: LeakyRelu reads only `alpha`.
// CHECK: LeakyRelu node 'leaky': attribute 'gamma' is not defined for LeakyRelu at opset 17
graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {
  graph.graph "g" (%x: !graph.tensor<f32, [2, 3]>) inputs ["x"] {
    %y = graph.node "LeakyRelu" "leaky" since 17 (%x) {alpha = 0.5 : f32, gamma = 1.0 : f32} -> ["y"] : !graph.unknown
    graph.return %y ["y"] : !graph.tensor<f32, [2, 3]>
  }
}
