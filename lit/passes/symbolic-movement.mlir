// RUN: loam-opt %s -p 'stage0,name-axes,lower-to-kernel' | filecheck %s

// Movement, regrouping and indexing over symbolic extents.  A Slice of the last two rows of [N, 3]
// clamps its start (max(0, N - 2), a derived symbol the kernel reads as a parameter forward
// computes) and counts what is left; a reversal starts at N - 1.  Reshape [0, -1] of [B, S, 16]
// divides the element count exactly (16*S, a merge of Seq and Hidden named by its parts) and owes
// that B is not 0; [0, 0, 4, 4] splits Hidden; [-1, 3] of [R, K] rounds down and owes
// that 3 divides K*R.  Concat sums the joined axis; Split of a symbolic axis into two equal parts
// owes that they divide it.
// CHECK:      kernel.program "forward"
// CHECK-NEXT:   shape_poly.owe 1 <= B for "Reshape node 'flat'"
// CHECK-NEXT:   shape_poly.owe 3*floordiv(K*R, 3) == K*R for "Reshape node 'rows'"
// CHECK-NEXT:   shape_poly.owe 2*floordiv(K, 2) == K for "Split node 'halves'"
// CHECK-NEXT:   %tail = kernel.slice(%x) {starts = [#shape_poly.extent<max(0, N - 2)>, #shape_poly.extent<0>], counts = [#shape_poly.extent<N - max(0, N - 2)>, #shape_poly.extent<3>], steps = array<i64: 1, 1>, node = "tail"} : {{.*}} -> !tensor_axes.tensor<f32, [Tail: N - max(0, N - 2), C: 3]>
// CHECK-NEXT:   %rev = kernel.slice(%x) {starts = [#shape_poly.extent<N - 1>, #shape_poly.extent<0>], counts = [#shape_poly.extent<N>, #shape_poly.extent<3>], steps = array<i64: -1, 1>, node = "rev"} : {{.*}} -> !tensor_axes.tensor<f32, [Seq: N, C: 3]>
// CHECK-NEXT:   %flat = kernel.regroup %y {node = "flat"} : {{.*}} -> !tensor_axes.tensor<f32, [Batch: B, (Seq Hidden): 16*S]>
// CHECK-NEXT:   %split = kernel.regroup %y {node = "split"} : {{.*}} -> !tensor_axes.tensor<f32, [Batch: B, Seq: S, Head: 4, Dim: 4]>
// CHECK-NEXT:   %rows = kernel.regroup %w {node = "rows"} : {{.*}} -> !tensor_axes.tensor<f32, [Rows: floordiv(K*R, 3), Three: 3]>
// CHECK-NEXT:   %cat = kernel.concat(%x, %z) {axis = 0 : i64, node = "cat"} : {{.*}} -> !tensor_axes.tensor<f32, [Joined: M + N, C: 3]>
// CHECK-NEXT:   %half0, %half1 = kernel.split(%w) {axis = 1 : i64, sizes = [#shape_poly.extent<floordiv(K, 2)>, #shape_poly.extent<floordiv(K, 2)>], node = "halves"}
builtin.module attributes {loam.layout = #tensor_axes.layout<["x" -> [Seq, C], "z" -> [Mem, C], "y" -> [Batch, Seq, Hidden], "w" -> [Row, Col], "tail" -> [Tail, C], "rev" -> [Seq, C], "rows" -> [Rows, Three], "cat" -> [Joined, C], "half*" -> [Row, Half], "heads" -> [Dims], "split" -> [Batch, Seq, Head, Dim], "target" -> [Dims], "three" -> [Dims], "big" -> [Dims], "small" -> [Dims], "axes" -> [Dims], "steps" -> [Dims], "start" -> [Dims], "end" -> [Dims]]>} {
  graph.model {ir_version = 8 : i64, opset_import = {"" = 18 : i64}} {
    graph.graph "g" (%x: !graph.tensor<f32, ["N", 3]>, %z: !graph.tensor<f32, ["M", 3]>, %y: !graph.tensor<f32, ["B", "S", 16]>, %w: !graph.tensor<f32, ["R", "K"]>) inputs ["x", "z", "y", "w"] {
      %start = graph.node "Constant" "start" since 18 () {value = #graph.data<i64, [1], "0xfeffffffffffffff">} -> ["start"] : !graph.unknown
      %end = graph.node "Constant" "end" since 18 () {value = #graph.data<i64, [1], "0x0000000000000040">} -> ["end"] : !graph.unknown
      %tail = graph.node "Slice" "tail" since 18 (%x, %start, %end) -> ["tail"] : !graph.unknown
      %big = graph.node "Constant" "big" since 18 () {value = #graph.data<i64, [1], "0xffffffffffffff7f">} -> ["big"] : !graph.unknown
      %small = graph.node "Constant" "small" since 18 () {value = #graph.data<i64, [1], "0x0000000000000080">} -> ["small"] : !graph.unknown
      %axes = graph.node "Constant" "axes" since 18 () {value = #graph.data<i64, [1], "0x0000000000000000">} -> ["axes"] : !graph.unknown
      %steps = graph.node "Constant" "steps" since 18 () {value = #graph.data<i64, [1], "0xffffffffffffffff">} -> ["steps"] : !graph.unknown
      %rev = graph.node "Slice" "rev" since 18 (%x, %big, %small, %axes, %steps) -> ["rev"] : !graph.unknown
      %target = graph.node "Constant" "target" since 18 () {value = #graph.data<i64, [2], "0x0000000000000000ffffffffffffffff">} -> ["target"] : !graph.unknown
      %flat = graph.node "Reshape" "flat" since 18 (%y, %target) -> ["flat"] : !graph.unknown
      %heads = graph.node "Constant" "heads" since 18 () {value = #graph.data<i64, [4], "0x0000000000000000000000000000000004000000000000000400000000000000">} -> ["heads"] : !graph.unknown
      %split = graph.node "Reshape" "split" since 18 (%y, %heads) -> ["split"] : !graph.unknown
      %three = graph.node "Constant" "three" since 18 () {value = #graph.data<i64, [2], "0xffffffffffffffff0300000000000000">} -> ["three"] : !graph.unknown
      %rows = graph.node "Reshape" "rows" since 18 (%w, %three) -> ["rows"] : !graph.unknown
      %cat = graph.node "Concat" "cat" since 18 (%x, %z) {axis = 0 : i64} -> ["cat"] : !graph.unknown
      %half0, %half1 = graph.node "Split" "halves" since 17 (%w) {axis = 1 : i64} -> ["half0", "half1"] : !graph.unknown, !graph.unknown
      graph.return %tail, %rev, %flat, %split, %rows, %cat, %half0 ["tail", "rev", "flat", "split", "rows", "cat", "half0"] : !graph.unknown, !graph.unknown, !graph.unknown, !graph.unknown, !graph.unknown, !graph.unknown, !graph.unknown
    }
  }
}
