// RUN: loam-opt %s -p stage0 --split-input-file | filecheck %s

// Shape arithmetic folds over polynomials: integer Div truncates (a floor where the dividend is not
// negative), Max names a derived symbol, a Cast to int32 wraps only what may leave int32, and a Cast
// to a float stays a node (the run computes it from the symbols).
// CHECK-LABEL: graph.graph "arith"
// CHECK:       %half = shape_poly.values "half" [floordiv(N, 2), 2] : !shape_poly.tensor<i64, [2]>
// CHECK-NEXT:  %q = shape_poly.values "q" [-floordiv(N, 2), -2] : !shape_poly.tensor<i64, [2]>
// CHECK-NEXT:  %big = shape_poly.values "big" [max(M, N), 4] : !shape_poly.tensor<i64, [2]>
// CHECK-NEXT:  %n32 = shape_poly.values "n32" [max(M, N), 4] : !shape_poly.tensor<i32, [2]>
// CHECK-NEXT:  %p32 = shape_poly.values "p32" [wrap32(M*N), 16] : !shape_poly.tensor<i32, [2]>
// CHECK-NEXT:  %f = graph.node "Cast" "f" since 17 (%sx) {to = 1 : i64} -> ["f"] : !shape_poly.tensor<f32, [2]>
graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {
  graph.graph "arith" (%x: !graph.tensor<f32, ["N", 4]>, %y: !graph.tensor<f32, ["M", 4]>) inputs ["x", "y"] {
    %two = graph.constant #graph.data<"two", i64, [], "0x0200000000000000"> : !graph.tensor<i64, []>
    %sx = graph.node "Shape" "sx" since 17 (%x) -> ["sx"] : !graph.unknown
    %sy = graph.node "Shape" "sy" since 17 (%y) -> ["sy"] : !graph.unknown
    %half = graph.node "Div" "half" since 17 (%sx, %two) -> ["half"] : !graph.unknown
    %neg = graph.node "Neg" "neg" since 17 (%sx) -> ["neg"] : !graph.unknown
    %q = graph.node "Div" "q" since 17 (%neg, %two) -> ["q"] : !graph.unknown
    %big = graph.node "Max" "big" since 17 (%sx, %sy) -> ["big"] : !graph.unknown
    %n32 = graph.node "Cast" "n32" since 17 (%big) {to = 6 : i64} -> ["n32"] : !graph.unknown
    %prod = graph.node "Mul" "prod" since 17 (%sx, %sy) -> ["prod"] : !graph.unknown
    %p32 = graph.node "Cast" "p32" since 17 (%prod) {to = 6 : i64} -> ["p32"] : !graph.unknown
    %f = graph.node "Cast" "f" since 17 (%sx) {to = 1 : i64} -> ["f"] : !graph.unknown
    graph.return %half, %q, %big, %n32, %p32, %f ["half", "q", "big", "n32", "p32", "f"] : !graph.tensor<i64, [2]>, !graph.tensor<i64, [2]>, !graph.tensor<i64, [2]>, !graph.tensor<i32, [2]>, !graph.tensor<i32, [2]>, !graph.tensor<f32, [2]>
  }
}

// -----

// Symbolic extents through the compute rules: a contraction of two symbols and a broadcast of two
// symbols are owed equal (checked by forward before any kernel), and Softmax keeps the extents.
// CHECK-LABEL: graph.graph "owed"
// CHECK-NEXT:  shape_poly.owe J == K for "MatMul node 'mm'"
// CHECK-NEXT:  shape_poly.owe M == N for "Add node 'add'"
// CHECK-NEXT:  %m = graph.node "MatMul" "mm" {{.*}} : !shape_poly.tensor<f32, [N, 3]>
// CHECK-NEXT:  %s = graph.node "Add" "add" {{.*}} : !shape_poly.tensor<f32, [N, 3]>
// CHECK-NEXT:  %y = graph.node "Softmax" "soft" {{.*}} : !shape_poly.tensor<f32, [N, 3]>
graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {
  graph.graph "owed" (%a: !graph.tensor<f32, ["N", "K"]>, %b: !graph.tensor<f32, ["J", 3]>, %c: !graph.tensor<f32, ["M", 3]>) inputs ["a", "b", "c"] {
    %m = graph.node "MatMul" "mm" since 17 (%a, %b) -> ["m"] : !graph.unknown
    %s = graph.node "Add" "add" since 17 (%m, %c) -> ["s"] : !graph.unknown
    %y = graph.node "Softmax" "soft" since 17 (%s) {axis = 0 : i64} -> ["y"] : !graph.unknown
    graph.return %y ["y"] : !graph.tensor<f32, ["N", 3]>
  }
}

// -----

// A Conv over a symbolic batch: the window geometry reads only the channel and spatial extents.  An
// ArgMax along the batch owes it one element at least.
// CHECK-LABEL: graph.graph "conv"
// CHECK-NEXT:  shape_poly.owe 1 <= N for "ArgMax node 'arg'"
// CHECK:       graph.node "Conv" "conv" {{.*}} : !shape_poly.tensor<f32, [N, 4, 6, 6]>
// CHECK:       graph.node "ArgMax" "arg" {{.*}} : !shape_poly.tensor<i64, [4, 6, 6]>
graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {
  graph.graph "conv" (%x: !graph.tensor<f32, ["N", 3, 8, 8]>) inputs ["x"] {
    %w = graph.initializer "w" : !graph.tensor<f32, [4, 3, 3, 3]>
    %y = graph.node "Conv" "conv" since 17 (%x, %w) -> ["y"] : !graph.unknown
    %z = graph.node "ArgMax" "arg" since 17 (%y) {axis = 0 : i64, keepdims = 0 : i64} -> ["z"] : !graph.unknown
    graph.return %z ["z"] : !graph.tensor<i64, [4, 6, 6]>
  }
}
