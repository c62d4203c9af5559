// RUN: loam-opt %s | loam-opt | filecheck %s
// RUN: loam-opt %s --print-op-generic | loam-opt | filecheck %s
// RUN: loam-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64, "com.example" = 1 : i64}, producer_name = "loam-lit"} {
  graph.graph "mlp" (%x: !graph.tensor<f32, [4, "N", ?]>, %flag: !graph.tensor<bool, []>) inputs ["x", "flag"] {
    %w = graph.initializer "fc1.weight" : !graph.tensor<f32, [8, 16]>
    %b = graph.initializer "fc1.bias" = #graph.data<f32, [2], "0x0000803f00000040"> : !graph.tensor<f32, [2]>
    %none = graph.none
    %y = graph.node "Gemm" "fc1" since 17 (%x, %w, %b) {transB = 1 : i64, alpha = 5.000000e-01 : f32} -> ["y"] : !graph.tensor<f32, [4, 16]>
    %c = graph.node "Clip" "clip" since 17 (%y, %none, %b) -> ["c"] : !graph.unknown
    %s, %unused = graph.node "Custom" "" domain "com.example" since 1 (%c) {ints = #graph.list<ints []>, floats = #graph.list<floats [0.5, 0x7fc00000]>, strs = #graph.list<strings ["a", "\FF"]>, t = #graph.data<"k", i64, [1], "0x0700000000000000">, ty = !graph.seq<!graph.tensor<f32>>} -> ["s", ""] : !graph.unknown, !graph.unknown
    %r = graph.node "If" "branch" since 17 (%flag) {then_branch = #graph.subgraph<0>, else_branch = #graph.subgraph<1>} -> ["r"] : !graph.unknown regions (() {
      graph.subgraph_info "then" inputs []
      graph.return %y ["y"] : !graph.unknown
    }, () {
      graph.subgraph_info "else" inputs []
      %n = graph.node "Neg" "neg" since 17 (%y) -> ["n"] : !graph.unknown
      graph.return %n ["n"] : !graph.unknown
    })
    graph.return %r, %s ["r", "s"] : !graph.tensor<f32>, !graph.opt<!graph.map<string, !graph.tensor<i64>>>
  }
}

// CHECK:      graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64, com.example = 1 : i64}, producer_name = "loam-lit"} {
// CHECK-NEXT:   graph.graph "mlp" (%x: !graph.tensor<f32, [4, "N", ?]>, %flag: !graph.tensor<bool, []>) inputs ["x", "flag"] {
// CHECK-NEXT:     %w = graph.initializer "fc1.weight" : !graph.tensor<f32, [8, 16]>
// CHECK-NEXT:     %b = graph.initializer "fc1.bias" = #graph.data<f32, [2], "0x0000803f00000040"> : !graph.tensor<f32, [2]>
// CHECK-NEXT:     %none = graph.none
// CHECK-NEXT:     %y = graph.node "Gemm" "fc1" since 17 (%x, %w, %b) {transB = 1 : i64, alpha = 5.000000e-01 : f32} -> ["y"] : !graph.tensor<f32, [4, 16]>
// CHECK-NEXT:     %c = graph.node "Clip" "clip" since 17 (%y, %none, %b) -> ["c"] : !graph.unknown
// CHECK-NEXT:     %s, %unused = graph.node "Custom" "" domain "com.example" since 1 (%c) {ints = #graph.list<ints []>, floats = #graph.list<floats [0.5, 0x7fc00000]>, strs = #graph.list<strings ["a", "\FF"]>, t = #graph.data<"k", i64, [1], "0x0700000000000000">, ty = !graph.seq<!graph.tensor<f32>>} -> ["s", ""] : !graph.unknown, !graph.unknown
// CHECK-NEXT:     %r = graph.node "If" "branch" since 17 (%flag) {then_branch = #graph.subgraph<0>, else_branch = #graph.subgraph<1>} -> ["r"] : !graph.unknown regions (() {
// CHECK-NEXT:       graph.subgraph_info "then" inputs []
// CHECK-NEXT:       graph.return %y ["y"] : !graph.unknown
// CHECK-NEXT:     }, () {
// CHECK-NEXT:       graph.subgraph_info "else" inputs []
// CHECK-NEXT:       %n = graph.node "Neg" "neg" since 17 (%y) -> ["n"] : !graph.unknown
// CHECK-NEXT:       graph.return %n ["n"] : !graph.unknown
// CHECK-NEXT:     })
// CHECK-NEXT:     graph.return %r, %s ["r", "s"] : !graph.tensor<f32>, !graph.opt<!graph.map<string, !graph.tensor<i64>>>

// GENERIC: %y = "graph.node"(%x, %w, %b) <{op_type = "Gemm", node_name = "fc1", domain = "", since = 17 : i64, attrs = {transB = 1 : i64, alpha = 5.000000e-01 : f32}, output_names = ["y"]}> : (!graph.tensor<f32, [4, "N", ?]>, !graph.tensor<f32, [8, 16]>, !graph.tensor<f32, [2]>) -> !graph.tensor<f32, [4, 16]>
// GENERIC: "graph.return"(%r, %s) <{output_names = ["r", "s"], declared_types = [!graph.tensor<f32>, !graph.opt<!graph.map<string, !graph.tensor<i64>>>]}>
