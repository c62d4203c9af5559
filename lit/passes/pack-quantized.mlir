// RUN: loam-opt %s -p pack-quantized | filecheck %s
// RUN: loam-opt %s -p pack-quantized > %t.mlir && %python -m loam.backends.numpy_module %t.mlir | filecheck %s --check-prefix=MODULE

// A weight the checkpoint stores in ggml blocks (`stored`, set by `loam build` from the header) stays
// packed when every reader widens as it goes: the linear layer (a product by its [1, 0] permutation),
// the product reading it as it is, and the embedding gather.  `emb` is also read by a zip as float32,
// so it keeps its kernels and Weights widens it at load; `plain` is not stored in blocks.
// CHECK-LABEL: kernel.program "forward"
// CHECK:       %w = kernel.weight "proj" {stored = "Q4_1", packed}
// CHECK:       %e = kernel.weight "emb" {stored = "Q8_0"}
// CHECK:       %p = kernel.weight "plain"
// CHECK-NOT:   kernel.permute
// CHECK:       %y = kernel.matmul_packed(%x, %w) {transposed = 1 : i64, node = "linear"}
// CHECK:       %z = kernel.matmul_packed(%y, %w) {transposed = 0 : i64, node = "again"}
// CHECK:       %g = kernel.gather(%e, %i) {axis = 0 : i64, node = "lookup"}
// CHECK:       %r = kernel.zip(%e)
// CHECK:       %q = kernel.matmul %x, %p {node = "unquantized"}

// The module keeps `proj` in its blocks and reads it through the packed kernel.
// MODULE:      _PACKED = frozenset(['proj'])
// MODULE:      kernel_matmul_packed(x, weights.proj, transposed=1)

kernel.program "forward" (%x : !tensor_axes.tensor<f32, [Batch: 2, In: 64]>, %i : !tensor_axes.tensor<i64, [Batch: 2]>) names ["x", "i"] {
  %w = kernel.weight "proj" {stored = "Q4_1"} : !tensor_axes.tensor<f32, [In: 64, In: 64]>
  %e = kernel.weight "emb" {stored = "Q8_0"} : !tensor_axes.tensor<f32, [Vocab: 10, In: 64]>
  %p = kernel.weight "plain" : !tensor_axes.tensor<f32, [In: 64, Out: 3]>
  %t = kernel.permute %w [1, 0] {node = "proj_t"} : !tensor_axes.tensor<f32, [In: 64, In: 64]> -> !tensor_axes.tensor<f32, [In: 64, In: 64]>
  %y = kernel.matmul %x, %t {node = "linear"} : (!tensor_axes.tensor<f32, [Batch: 2, In: 64]>, !tensor_axes.tensor<f32, [In: 64, In: 64]>) -> !tensor_axes.tensor<f32, [Batch: 2, In: 64]>
  %z = kernel.matmul %y, %w {node = "again"} : (!tensor_axes.tensor<f32, [Batch: 2, In: 64]>, !tensor_axes.tensor<f32, [In: 64, In: 64]>) -> !tensor_axes.tensor<f32, [Batch: 2, In: 64]>
  %g = kernel.gather(%e, %i) {node = "lookup", axis = 0 : i64} : (!tensor_axes.tensor<f32, [Vocab: 10, In: 64]>, !tensor_axes.tensor<i64, [Batch: 2]>) -> !tensor_axes.tensor<f32, [Batch: 2, In: 64]>
  %r = kernel.zip(%e) #kernel.expr<[operand 0, relu 0]> {node = "relu_of_emb"} : (!tensor_axes.tensor<f32, [Vocab: 10, In: 64]>) -> !tensor_axes.tensor<f32, [Vocab: 10, In: 64]>
  %q = kernel.matmul %x, %p {node = "unquantized"} : (!tensor_axes.tensor<f32, [Batch: 2, In: 64]>, !tensor_axes.tensor<f32, [In: 64, Out: 3]>) -> !tensor_axes.tensor<f32, [Batch: 2, Out: 3]>
  kernel.return %z, %g, %r, %q names ["z", "g", "r", "q"] : !tensor_axes.tensor<f32, [Batch: 2, In: 64]>, !tensor_axes.tensor<f32, [Batch: 2, In: 64]>, !tensor_axes.tensor<f32, [Vocab: 10, In: 64]>, !tensor_axes.tensor<f32, [Batch: 2, Out: 3]>
}
