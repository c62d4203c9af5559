// RUN: loam-opt %s -p stage0 --split-input-file | filecheck %s

// Extents flow through Gemm (transB), MatMul, broadcasting Add and Relu; a dim_param is a symbol.
// CHECK-LABEL: graph.graph "g"
// CHECK-SAME:  (%x: !shape_poly.tensor<f32, [N, 8]>)
// CHECK:       %w = graph.initializer "w" {{.*}}: !shape_poly.tensor<f32, [16, 8]>
// CHECK:       %h = graph.node "Gemm" {{.*}}: !shape_poly.tensor<f32, [N, 16]>
// CHECK:       %m = graph.node "MatMul" {{.*}}: !shape_poly.tensor<f32, [N, 3]>
// CHECK:       %s = graph.node "Add" {{.*}}: !shape_poly.tensor<f32, [N, 3]>
// CHECK:       %y = graph.node "Relu" {{.*}}: !shape_poly.tensor<f32, [N, 3]>
graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {
  graph.graph "g" (%x: !graph.tensor<f32, ["N", 8]>) inputs ["x"] {
    %w = graph.initializer "w" : !graph.tensor<f32, [16, 8]>
    %v = graph.initializer "v" : !graph.tensor<f32, [16, 3]>
    %b = graph.initializer "b" : !graph.tensor<f32, [3]>
    %h = graph.node "Gemm" "gemm" since 17 (%x, %w) {transB = 1 : i64} -> ["h"] : !graph.unknown
    %m = graph.node "MatMul" "mm" since 17 (%h, %v) -> ["m"] : !graph.unknown
    %s = graph.node "Add" "add" since 17 (%m, %b) -> ["s"] : !graph.unknown
    %y = graph.node "Relu" "relu" since 17 (%s) -> ["y"] : !graph.unknown
    graph.return %y ["y"] : !graph.tensor<f32, ["N", 3]>
  }
}

// -----

// A node whose inputs the build knows is evaluated and replaced by graph.constant; a folded value
// nothing reads any more (here the Constant the Add read) is dropped.
// CHECK-LABEL: graph.graph "fold"
// CHECK-NOT:   graph.node "Constant"
// CHECK-NOT:   %c = graph.constant
// CHECK-NOT:   graph.node "Add"
// CHECK:       graph.constant #graph.data<"d", i64, [2], "0x04000000000000000600000000000000"> : !shape_poly.tensor<i64, [2]>
graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {
  graph.graph "fold" () inputs [] {
    %c = graph.node "Constant" "k" since 17 () {value = #graph.data<i64, [2], "0x02000000000000000300000000000000">} -> ["c"] : !graph.unknown
    %d = graph.node "Add" "twice" since 17 (%c, %c) -> ["d"] : !graph.unknown
    graph.return %d ["d"] : !graph.tensor<i64, [2]>
  }
}

