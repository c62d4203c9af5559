// RUN: loam-opt %s -p 'stage0,name-axes' --split-input-file --verify-diagnostics | filecheck %s

// A tensor no layout rule reaches stops the build naming it.
// CHECK: tensor 'w' (rank 2): no layout rule names its axes 0, 1; add a layout entry whose pattern matches it
builtin.module attributes {loam.layout = #tensor_axes.layout<["x" -> [Batch, In]]>} {
  graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {
    graph.graph "gap" (%x: !graph.tensor<f32, [2, 8]>) inputs ["x"] {
      %w = graph.initializer "w" : !graph.tensor<f32, [8, 3]>
      %y = graph.node "MatMul" "mm" since 17 (%x, %w) -> ["y"] : !graph.unknown
      graph.return %y ["y"] : !graph.tensor<f32, [2, 3]>
    }
  }
}

// -----

// Two names meeting in a contraction stop the build naming both, even where the lengths agree.
// CHECK: MatMul node 'mm': contracts axis In of the first operand with axis Feature of the second; a contraction needs one axis name on both sides
builtin.module attributes {loam.layout = #tensor_axes.layout<["x" -> [Batch, In], "w" -> [Feature, Out]]>} {
  graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {
    graph.graph "clash" (%x: !graph.tensor<f32, [2, 8]>) inputs ["x"] {
      %w = graph.initializer "w" : !graph.tensor<f32, [8, 3]>
      %y = graph.node "MatMul" "mm" since 17 (%x, %w) -> ["y"] : !graph.unknown
      graph.return %y ["y"] : !graph.tensor<f32, [2, 3]>
    }
  }
}

// -----

// Two names meeting in a broadcast stop it too.
// CHECK: Add node 'add': axis Hidden meets axis Out at output axis 1; two axes meet only where the layout gives them one name
builtin.module attributes {loam.layout = #tensor_axes.layout<["x" -> [Batch, Hidden], "b" -> [Out]]>} {
  graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {
    graph.graph "bcast" (%x: !graph.tensor<f32, [2, 3]>) inputs ["x"] {
      %b = graph.initializer "b" : !graph.tensor<f32, [3]>
      %y = graph.node "Add" "add" since 17 (%x, %b) -> ["y"] : !graph.unknown
      graph.return %y ["y"] : !graph.tensor<f32, [2, 3]>
    }
  }
}

// -----

// A rule naming the wrong number of axes.
// CHECK: tensor 'b' has rank 1, but layout rule 'b' names 2 axes (Out, Extra)
builtin.module attributes {loam.layout = #tensor_axes.layout<["x" -> [Batch, Out], "b" -> [Out, Extra]]>} {
  graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {
    graph.graph "rank" (%x: !graph.tensor<f32, [2, 3]>) inputs ["x"] {
      %b = graph.initializer "b" : !graph.tensor<f32, [3]>
      %y = graph.node "Add" "add" since 17 (%x, %b) -> ["y"] : !graph.unknown
      graph.return %y ["y"] : !graph.tensor<f32, [2, 3]>
    }
  }
}

// -----

// A rule that contradicts the names an operator gives is not silently ignored.
// CHECK: layout rule 'y' names axis 1 of tensor 'y' Cols, but Add node 'add' gives it Out
builtin.module attributes {loam.layout = #tensor_axes.layout<["x" -> [Batch, Out], "b" -> [Out], "y" -> [Batch, Cols]]>} {
  graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {
    graph.graph "agree" (%x: !graph.tensor<f32, [2, 3]>) inputs ["x"] {
      %b = graph.initializer "b" : !graph.tensor<f32, [3]>
      %y = graph.node "Add" "add" since 17 (%x, %b) -> ["y"] : !graph.unknown
      graph.return %y ["y"] : !graph.tensor<f32, [2, 3]>
    }
  }
}
