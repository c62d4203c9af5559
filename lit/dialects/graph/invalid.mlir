// RUN: loam-opt %s --parsing-diagnostics --verify-diagnostics --split-input-file | filecheck %s

// Two values with one ONNX name in one graph.
graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {
  graph.graph "g" (%x: !graph.unknown) inputs ["x"] {
    %a = graph.node "Relu" "a" since 17 (%x) -> ["y"] : !graph.unknown
    %b = graph.node "Neg" "b" since 17 (%a) -> ["y"] : !graph.unknown
    graph.return %b ["y"] : !graph.unknown
  }
}
// CHECK: graph.graph 'g': ONNX name 'y' is defined twice

// -----

// A region that no graph attribute names.
graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {
  graph.graph "g" (%c: !graph.unknown) inputs ["c"] {
    %r = graph.node "If" "if" since 17 (%c) {then_branch = #graph.subgraph<0>} -> ["r"] : !graph.unknown regions (() {
      graph.subgraph_info "then" inputs []
      graph.return %c ["c"] : !graph.unknown
    }, () {
      graph.subgraph_info "else" inputs []
      graph.return %c ["c"] : !graph.unknown
    })
    graph.return %r ["r"] : !graph.unknown
  }
}
// CHECK: graph.node 'if' (If): 2 regions but the graph attributes refer to regions [0]

// -----

// Output names and results disagree.
graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {
  graph.graph "g" (%x: !graph.unknown) inputs ["x"] {
    %a = graph.node "Relu" "a" since 17 (%x) -> ["y", "z"] : !graph.unknown
    graph.return %a ["y"] : !graph.unknown
  }
}
// CHECK: graph.node 'a' (Relu): 1 results but 2 output names

// -----

// Tensor bytes that do not fit the shape.
%c = graph.constant #graph.data<f32, [2], "0x0000803f"> : !graph.tensor<f32, [2]>
// CHECK: #graph.data: f32 tensor of shape [2] needs 8 bytes, got 4

// -----

// An element type ONNX does not define.
%c = graph.constant #graph.data<f7, [1], "0x00"> : !graph.unknown
// CHECK: #graph.data: unknown element type 'f7'

// -----

// A value used before it is defined (ONNX graphs are topologically ordered).
graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {
  graph.graph "g" (%x: !graph.unknown) inputs ["x"] {
    %a = graph.node "Relu" "a" since 17 (%later) -> ["a"] : !graph.unknown
    %later = graph.node "Neg" "b" since 17 (%x) -> ["later"] : !graph.unknown
    graph.return %a ["a"] : !graph.unknown
  }
}
// CHECK: a graph value is used before it is defined

// -----

// A name that is not printable: a line break would end a comment in the module and run the rest as code.
graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {
  graph.graph "g" (%x: !graph.unknown) inputs ["x"] {
    %a = graph.node "Relu" "a\0Aimport os" since 17 (%x) -> ["y"] : !graph.unknown
    graph.return %a ["y"] : !graph.unknown
  }
}
// CHECK: graph.node: the name 'a\nimport os' holds a character that is not printable

// -----

// The same, in an output name.
graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {
  graph.graph "g" (%x: !graph.unknown) inputs ["x"] {
    %a = graph.node "Relu" "a" since 17 (%x) -> ["y\00"] : !graph.unknown
    graph.return %a ["y\00"] : !graph.unknown
  }
}
// CHECK: graph.return: the name 'y\x00' holds a character that is not printable
