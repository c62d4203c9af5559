// RUN: loam-opt %s -p 'stage0,name-axes,lower-to-kernel' | filecheck %s

// ScatterND over symbolic extents: tuples of k = 1 entry (the indices' last extent, a number) pick
// rows of the [B, S] data, so the updates must be [N, S]; given as [N, T], the build cannot prove
// T == S and owes it (forward checks it before any kernel).  The result carries the data's axes.
// CHECK:      kernel.program "forward"
// CHECK-NEXT:   shape_poly.owe S == T for "ScatterND node 'put'"
// CHECK-NEXT:   %y = kernel.scatter_nd(%x, %i, %u) {reduction = "add", node = "put"} : (!tensor_axes.tensor<f32, [Batch: B, Seq: S]>, !tensor_axes.tensor<i64, [Tuple: N, K: 1]>, !tensor_axes.tensor<f32, [Tuple: N, Width: T]>) -> !tensor_axes.tensor<f32, [Batch: B, Seq: S]>
// CHECK-NEXT:   kernel.return %y names ["y"]
builtin.module attributes {loam.layout = #tensor_axes.layout<["x" -> [Batch, Seq], "i" -> [Tuple, K], "u" -> [Tuple, Width]]>} {
  graph.model {ir_version = 8 : i64, opset_import = {"" = 18 : i64}} {
    graph.graph "g" (%x: !graph.tensor<f32, ["B", "S"]>, %i: !graph.tensor<i64, ["N", 1]>, %u: !graph.tensor<f32, ["N", "T"]>) inputs ["x", "i", "u"] {
      %y = graph.node "ScatterND" "put" since 18 (%x, %i, %u) {reduction = "add"} -> ["y"] : !graph.unknown
      graph.return %y ["y"] : !graph.unknown
    }
  }
}
