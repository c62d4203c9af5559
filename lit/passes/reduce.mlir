// RUN: loam-opt %s -p 'stage0,name-axes,lower-to-kernel' --split-input-file | filecheck %s

// ReduceSum (opset 13: axes is an input, here an i64 initializer the build knows) lowers to one
// kernel.reduce with the axes resolved; the kept reduced axis is a Unit axis no layout names.
// Softmax at opset 11 normalises the whole trailing block from axis 1 on.
// CHECK-LABEL: kernel.program "forward" (%x: !tensor_axes.tensor<f32, [N: 2, C: 3, W: 4]>) names ["x"]
// CHECK:        %s = kernel.reduce(%x) {kind = "sum", axes = array<i64: 2>, keepdims = 1 : i64, node = "sum"}
// CHECK-SAME:     -> !tensor_axes.tensor<f32, [N: 2, C: 3, Unit: 1]>
// CHECK:        %p = kernel.softmax(%s) {kind = "softmax", axes = array<i64: 1, 2>, node = "sm"}
// CHECK:        %m = kernel.reduce(%p) {kind = "max", axes = array<i64: 0>, keepdims = 0 : i64, node = "max"}
// CHECK-SAME:     -> !tensor_axes.tensor<f32, [C: 3, Unit: 1]>
// CHECK:        kernel.return %m names ["m"]
builtin.module attributes {loam.layout = #tensor_axes.layout<["x" -> [N, C, W], "axes" -> [K]]>} {
  graph.model {ir_version = 8 : i64, opset_import = {"" = 13 : i64}} {
    graph.graph "g" (%x: !graph.tensor<f32, [2, 3, 4]>) inputs ["x"] {
      %axes = graph.initializer "axes" = #graph.data<i64, [1], "0xffffffffffffffff"> : !graph.tensor<i64, [1]>
      %s = graph.node "ReduceSum" "sum" since 13 (%x, %axes) -> ["s"] : !graph.unknown
      %p = graph.node "Softmax" "sm" since 11 (%s) -> ["p"] : !graph.unknown
      %m = graph.node "ReduceMax" "max" since 13 (%p) {axes = #graph.list<ints [0]>, keepdims = 0 : i64} -> ["m"] : !graph.unknown
      graph.return %m ["m"] : !graph.tensor<f32, [3, 1]>
    }
  }
}

// -----

// A reduction of a value the build knows folds in stage 0 (same kernel function as the module).
// CHECK-LABEL: kernel.program "forward" (%x: !tensor_axes.tensor<i64, [N: 2]>)
// CHECK-NOT:   kernel.reduce
// CHECK:       kernel.constant #graph.data<"r", i64, [2], "0x04000000000000000600000000000000">
builtin.module attributes {loam.layout = #tensor_axes.layout<["x" -> [N], "r" -> [N]]>} {
  graph.model {ir_version = 8 : i64, opset_import = {"" = 13 : i64}} {
    graph.graph "fold" (%x: !graph.tensor<i64, [2]>) inputs ["x"] {
      %c = graph.node "Constant" "k" since 13 () {value = #graph.data<i64, [2, 2], "0x0100000000000000020000000000000003000000000000000400000000000000">} -> ["c"] : !graph.unknown
      %r = graph.node "ReduceSum" "sum" since 11 (%c) {axes = #graph.list<ints [0]>, keepdims = 0 : i64} -> ["r"] : !graph.unknown
      %y = graph.node "Add" "add" since 13 (%x, %r) -> ["y"] : !graph.unknown
      graph.return %y ["y"] : !graph.tensor<i64, [2]>
    }
  }
}
