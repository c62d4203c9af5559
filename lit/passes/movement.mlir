// RUN: loam-opt %s -p 'stage0,name-axes,lower-to-kernel' | filecheck %s

// Stage 0 folds the Shape -> Slice -> Concat chain into the Reshape target; the Reshape regroups
// [Batch, C, H] into [Batch, (C H)] (a merge named by its parts), Transpose permutes, Slice and
// Concat (INT64_MIN end, step -2) become library kernels whose resized axes the layout names.
// CHECK:      kernel.program "forward" (%x: !tensor_axes.tensor<f32, [Batch: 2, C: 3, H: 4]>) names ["x"]
// CHECK-NOT:    graph.
// CHECK:        %flat = kernel.regroup %x {node = "reshape"} : !tensor_axes.tensor<f32, [Batch: 2, C: 3, H: 4]> -> !tensor_axes.tensor<f32, [Batch: 2, (C H): 12]>
// CHECK:        %t = kernel.permute %flat [1, 0] {node = "transpose"} : {{.*}} -> !tensor_axes.tensor<f32, [(C H): 12, Batch: 2]>
// CHECK:        %s = kernel.slice(%t) {starts = array<i64: 11, 0>, counts = array<i64: 6, 2>, steps = array<i64: -2, 1>, node = "slice"} : (!tensor_axes.tensor<f32, [(C H): 12, Batch: 2]>) -> !tensor_axes.tensor<f32, [Part: 6, Batch: 2]>
// CHECK:        %y = kernel.concat(%s, %s) {axis = 0 : i64, node = "cat"} : ({{.*}}) -> !tensor_axes.tensor<f32, [Joined: 12, Batch: 2]>
// CHECK:        kernel.return %y names ["y"]
builtin.module attributes {loam.layout = #tensor_axes.layout<["x" -> [Batch, C, H], "s" -> [Part, Batch], "y" -> [Joined, Batch], "target" -> [Dims]]>} {
  graph.model {ir_version = 8 : i64, opset_import = {"" = 18 : i64}} {
    graph.graph "g" (%x: !graph.tensor<f32, [2, 3, 4]>) inputs ["x"] {
      %shape = graph.node "Shape" "shape" since 18 (%x) -> ["shape"] : !graph.unknown
      %zero = graph.node "Constant" "zero" since 18 () {value = #graph.data<i64, [1], "0x0000000000000000">} -> ["zero"] : !graph.unknown
      %one = graph.node "Constant" "one" since 18 () {value = #graph.data<i64, [1], "0x0100000000000000">} -> ["one"] : !graph.unknown
      %minus = graph.node "Constant" "minus" since 18 () {value = #graph.data<i64, [1], "0xffffffffffffffff">} -> ["minus"] : !graph.unknown
      %lead = graph.node "Slice" "lead" since 18 (%shape, %zero, %one) -> ["lead"] : !graph.unknown
      %target = graph.node "Concat" "target" since 18 (%lead, %minus) {axis = 0 : i64} -> ["target"] : !graph.unknown
      %flat = graph.node "Reshape" "reshape" since 18 (%x, %target) -> ["flat"] : !graph.unknown
      %t = graph.node "Transpose" "transpose" since 18 (%flat) -> ["t"] : !graph.unknown
      %start = graph.node "Constant" "start" since 18 () {value = #graph.data<i64, [1], "0xffffffffffffffff">} -> ["start"] : !graph.unknown
      %end = graph.node "Constant" "end" since 18 () {value = #graph.data<i64, [1], "0x0000000000000080">} -> ["end"] : !graph.unknown
      %axes = graph.node "Constant" "axes" since 18 () {value = #graph.data<i64, [1], "0x0000000000000000">} -> ["axes"] : !graph.unknown
      %steps = graph.node "Constant" "steps" since 18 () {value = #graph.data<i64, [1], "0xfeffffffffffffff">} -> ["steps"] : !graph.unknown
      %s = graph.node "Slice" "slice" since 18 (%t, %start, %end, %axes, %steps) -> ["s"] : !graph.unknown
      %y = graph.node "Concat" "cat" since 18 (%s, %s) {axis = 0 : i64} -> ["y"] : !graph.unknown
      graph.return %y ["y"] : !graph.tensor<f32, [12, 2]>
    }
  }
}
