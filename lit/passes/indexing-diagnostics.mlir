// RUN: loam-opt %s -p stage0 --split-input-file --verify-diagnostics | filecheck %s

// A Range over a run-time limit has a length only the run knows, r[0]; the declared output's 3 is owed
// of it (forward checks it once the Range ran and bound r[0]).
// CHECK: shape_poly.owe "r[0]" == 3 for "graph output 'r'"
// CHECK: graph.node "Range" "range" since 13 (%zero, %n, %one) -> ["r"] : !shape_poly.tensor<i64, ["r[0]"]>
graph.model {ir_version = 8 : i64, opset_import = {"" = 13 : i64}} {
  graph.graph "runtime_range" (%n: !graph.tensor<i64, []>) inputs ["n"] {
    %zero = graph.node "Constant" "zero" since 13 () {value = #graph.data<i64, [], "0x0000000000000000">} -> ["zero"] : !graph.unknown
    %one = graph.node "Constant" "one" since 13 () {value = #graph.data<i64, [], "0x0100000000000000">} -> ["one"] : !graph.unknown
    %r = graph.node "Range" "range" since 13 (%zero, %n, %one) -> ["r"] : !graph.unknown
    graph.return %r ["r"] : !graph.tensor<i64, [3]>
  }
}

// -----

// CHECK: Gather node 'g': index 7 is outside [-5, 4]
graph.model {ir_version = 8 : i64, opset_import = {"" = 13 : i64}} {
  graph.graph "out_of_range" (%x: !graph.tensor<f32, [5]>) inputs ["x"] {
    %i = graph.node "Constant" "i" since 13 () {value = #graph.data<i64, [1], "0x0700000000000000">} -> ["i"] : !graph.unknown
    %y = graph.node "Gather" "g" since 13 (%x, %i) -> ["y"] : !graph.unknown
    graph.return %y ["y"] : !graph.tensor<f32, [1]>
  }
}

// -----

// ScatterND updates must be the indices' extents but the last, then the data's after k: [2] + [4] here.
// CHECK: ScatterND node 'put': updates axis 1 against data axis 1: extents 5 and 4 differ
graph.model {ir_version = 8 : i64, opset_import = {"" = 18 : i64}} {
  graph.graph "updates_mismatch" (%x: !graph.tensor<f32, [3, 4]>, %i: !graph.tensor<i64, [2, 1]>, %u: !graph.tensor<f32, [2, 5]>) inputs ["x", "i", "u"] {
    %y = graph.node "ScatterND" "put" since 18 (%x, %i, %u) -> ["y"] : !graph.unknown
    graph.return %y ["y"] : !graph.tensor<f32, [3, 4]>
  }
}

// -----

// The indices' last extent says how many data axes a tuple addresses: a symbol there is refused.
// CHECK: ScatterND node 'put': the indices' last extent is K
graph.model {ir_version = 8 : i64, opset_import = {"" = 18 : i64}} {
  graph.graph "symbolic_depth" (%x: !graph.tensor<f32, [3, 4]>, %i: !graph.tensor<i64, [2, "K"]>, %u: !graph.tensor<f32, [2]>) inputs ["x", "i", "u"] {
    %y = graph.node "ScatterND" "put" since 18 (%x, %i, %u) -> ["y"] : !graph.unknown
    graph.return %y ["y"] : !graph.tensor<f32, [3, 4]>
  }
}
