// RUN: loam-opt %s -p stage0 --split-input-file --verify-diagnostics | filecheck %s

// A Range over a run-time limit has an extent only symbolic extents could state: refused, naming the node.
// CHECK: Range node 'range': start, limit and delta must be known at build time
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
