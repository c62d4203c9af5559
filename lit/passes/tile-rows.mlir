// RUN: loam-opt %s -p tile-rows | filecheck %s

// A row softmax and a LayerNorm become tile programs (tile 64 holds rows of 48); a log-softmax,
// a softmax over the first axis and one over rows no bound limits keep their library kernels.
// CHECK-LABEL: kernel.program "rows"
// CHECK:       %s = kernel.tile_program(%x) {grid = 2 : i64, numbers = array<i64: 48>, node = "sm", program = #kernel.tile_program<tile 64, [program, param 0, iota, map [operand 0, operand 1, less 0 1] (2, 1),
// CHECK-SAME:  reduce max 5
// CHECK-SAME:  store 0 4 9 3]>}
// CHECK:       %n = kernel.tile_program(%x, %g, %b) {grid = 2 : i64, numbers = array<i64: 48>, node = "ln", program = #kernel.tile_program<tile 64, [
// CHECK:       %l = kernel.softmax(%x) {kind = "log_softmax"
// CHECK:       %c = kernel.softmax(%x) {kind = "softmax", axes = array<i64: 0>
// CHECK:       %u = kernel.softmax(%v) {kind = "softmax"
builtin.module {
  kernel.program "rows" (%x: !tensor_axes.tensor<f32, [R: 2, C: 48]>, %g: !tensor_axes.tensor<f32, [C: 48]>, %b: !tensor_axes.tensor<f32, [C: 48]>, %v: !tensor_axes.tensor<f32, [R: 2, L: n]>) names ["x", "g", "b", "v"] {
    %s = kernel.softmax(%x) {kind = "softmax", axes = array<i64: 1>, node = "sm"} : (!tensor_axes.tensor<f32, [R: 2, C: 48]>) -> !tensor_axes.tensor<f32, [R: 2, C: 48]>
    %n = kernel.normalize(%x, %g, %b) {axes = array<i64: 1>, epsilon = 1.0e-05 : f64, channel_axis = -1 : i64, stash = "float32", stats = 0 : i64, node = "ln"} : (!tensor_axes.tensor<f32, [R: 2, C: 48]>, !tensor_axes.tensor<f32, [C: 48]>, !tensor_axes.tensor<f32, [C: 48]>) -> !tensor_axes.tensor<f32, [R: 2, C: 48]>
    %l = kernel.softmax(%x) {kind = "log_softmax", axes = array<i64: 1>, node = "lsm"} : (!tensor_axes.tensor<f32, [R: 2, C: 48]>) -> !tensor_axes.tensor<f32, [R: 2, C: 48]>
    %c = kernel.softmax(%x) {kind = "softmax", axes = array<i64: 0>, node = "col"} : (!tensor_axes.tensor<f32, [R: 2, C: 48]>) -> !tensor_axes.tensor<f32, [R: 2, C: 48]>
    %u = kernel.softmax(%v) {kind = "softmax", axes = array<i64: 1>, node = "long"} : (!tensor_axes.tensor<f32, [R: 2, L: n]>) -> !tensor_axes.tensor<f32, [R: 2, L: n]>
    kernel.return %s, %n, %l, %c, %u names ["s", "n", "l", "c", "u"] : !tensor_axes.tensor<f32, [R: 2, C: 48]>, !tensor_axes.tensor<f32, [R: 2, C: 48]>, !tensor_axes.tensor<f32, [R: 2, C: 48]>, !tensor_axes.tensor<f32, [R: 2, C: 48]>, !tensor_axes.tensor<f32, [R: 2, L: n]>
  }
}
