// RUN: loam-opt %s -p stage0 --split-input-file | filecheck %s --check-prefix=FOLD
// RUN: loam-opt %s -p 'stage0,name-axes,lower-to-kernel' --split-input-file | filecheck %s

// Stage 0 folds integer Div over known values with ONNX's truncation toward zero: [-7, 7] / 2 is
// [-3, 3] (numpy's floor division would give -4).
// FOLD-LABEL: graph.graph "fold"
// FOLD:       %q = graph.constant #graph.data<"q", i64, [2], "0xfdffffffffffffff0300000000000000">
// FOLD-NOT:   graph.node "Div"
// FOLD:       graph.node "Mul"
// CHECK-LABEL: kernel.program "forward"
// CHECK-SAME:  model = "fold"
// CHECK:       %q = kernel.constant
// CHECK:       kernel.zip(%x, %q) #kernel.expr<[operand 0, operand 1, mul 0 1]> {node = "mul"}
builtin.module attributes {loam.layout = #tensor_axes.layout<["x" -> [N], "q" -> [N]]>} {
  graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {
    graph.graph "fold" (%x: !graph.tensor<i64, [2]>) inputs ["x"] {
      %a = graph.node "Constant" "ka" since 17 () {value = #graph.data<i64, [2], "0xF9FFFFFFFFFFFFFF0700000000000000">} -> ["a"] : !graph.unknown
      %b = graph.node "Constant" "kb" since 17 () {value = #graph.data<i64, [1], "0x0200000000000000">} -> ["b"] : !graph.unknown
      %q = graph.node "Div" "div" since 17 (%a, %b) -> ["q"] : !graph.unknown
      %y = graph.node "Mul" "mul" since 17 (%x, %q) -> ["y"] : !graph.unknown
      graph.return %y ["y"] : !graph.tensor<i64, [2]>
    }
  }
}

// -----

// f16 nodes compute in f32: each Expr widens its half operands and narrows its result, so every
// node rounds once, where onnxruntime does.  LeakyRelu is a `select`, Where too; Cast is a kernel.cast.
// FOLD-LABEL: graph.graph "halves"
// FOLD:       graph.node "LeakyRelu" {{.*}} : !shape_poly.tensor<f16, [2, 3, 4]>
// FOLD:       graph.node "Where" {{.*}} : !shape_poly.tensor<f16, [2, 3, 4]>
// FOLD:       graph.node "Cast" {{.*}} : !shape_poly.tensor<f32, [2, 3, 4]>
// CHECK-LABEL: kernel.program "forward"
// CHECK-SAME:  model = "halves"
// CHECK:       %s = kernel.zip(%x, %h) #kernel.expr<[operand 0, operand 1, cast 0 : f32, cast 1 : f32, add 2 3, cast 4 : f16]> {node = "add"}
// CHECK-SAME:    -> !tensor_axes.tensor<f16, [Batch: 2, C: 3, W: 4]>
// CHECK:       %l = kernel.zip(%s) #kernel.expr<[operand 0, cast 0 : f32, const 0.5 : f32, mul 1 2, max 1 3, cast 4 : f16]> {node = "leaky"}
// CHECK:       %w = kernel.zip(%c, %l, %x) #kernel.expr<[{{.*}}select 0 3 4, cast 5 : f16]> {node = "where"}
// CHECK:       %y = kernel.cast %w {node = "cast"} : !tensor_axes.tensor<f16, [Batch: 2, C: 3, W: 4]> -> !tensor_axes.tensor<f32, [Batch: 2, C: 3, W: 4]>
builtin.module attributes {loam.layout = #tensor_axes.layout<["x" -> [Batch, C, W], "h" -> [W], "c" -> [Batch, C, W]]>} {
  graph.model {ir_version = 8 : i64, opset_import = {"" = 16 : i64}} {
    graph.graph "halves" (%x: !graph.tensor<f16, [2, 3, 4]>, %h: !graph.tensor<f16, [4]>, %c: !graph.tensor<bool, [2, 3, 4]>) inputs ["x", "h", "c"] {
      %s = graph.node "Add" "add" since 16 (%x, %h) -> ["s"] : !graph.unknown
      %l = graph.node "LeakyRelu" "leaky" since 16 (%s) {alpha = 0.5 : f32} -> ["l"] : !graph.unknown
      %w = graph.node "Where" "where" since 16 (%c, %l, %x) -> ["w"] : !graph.unknown
      %y = graph.node "Cast" "cast" since 16 (%w) {to = 1 : i64} -> ["y"] : !graph.unknown
      graph.return %y ["y"] : !graph.tensor<f32, [2, 3, 4]>
    }
  }
}

// -----

// Opset 6's Add aligns B at `axis` (broadcast=1): B [C] is regrouped to [C, W: 1], then broadcast
// as numpy does.
// FOLD-LABEL: graph.graph "old"
// FOLD:       graph.node "Add" {{.*}} : !shape_poly.tensor<f32, [2, 3, 4]>
// CHECK-LABEL: kernel.program "forward"
// CHECK-SAME:  model = "old"
// CHECK:       %0 = kernel.regroup %b {node = "old_add"} : !tensor_axes.tensor<f32, [C: 3]> -> !tensor_axes.tensor<f32, [C: 3, W: 1]>
// CHECK:       %y = kernel.zip(%x, %0) #kernel.expr<[operand 0, operand 1, add 0 1]> {node = "old_add"}
builtin.module attributes {loam.layout = #tensor_axes.layout<["x" -> [Batch, C, W], "b" -> [C]]>} {
  graph.model {ir_version = 3 : i64, opset_import = {"" = 6 : i64}} {
    graph.graph "old" (%x: !graph.tensor<f32, [2, 3, 4]>, %b: !graph.tensor<f32, [3]>) inputs ["x", "b"] {
      %y = graph.node "Add" "old_add" since 6 (%x, %b) {broadcast = 1 : i64, axis = 1 : i64} -> ["y"] : !graph.unknown
      graph.return %y ["y"] : !graph.tensor<f32, [2, 3, 4]>
    }
  }
}
