// RUN: loam-opt %s -p tile-attention | filecheck %s
// RUN: loam-opt %s -p tile-attention > %t.mlir && %python -m loam.backends.numpy_module %t.mlir | filecheck %s --check-prefix=MODULE

// Attention over two heads: the scores' product (its scale fused in as an epilogue), a mask added
// by a zip, the row softmax and the product with V become one tile program reading K through the
// permutation's strides; the permutation goes with them.  The second chain returns its softmax too,
// so its kernels stay.
// CHECK:       loam.notes = ["nodes 'scores', 'scale', 'mask', 'softmax', 'context': one attention kernel, a tile program per query row over blocks of keys (the scores are never stored)"]
// CHECK-LABEL: kernel.program "forward"
// CHECK-NOT:   kernel.permute %k
// CHECK:       %o = kernel.tile_program(%q, %k, %v, %mask) {grid = array<i64: 3, 2>, numbers = array<i64: 3, 5, 8, 8, 1, 1, 8, 4, 1, 2, 24, 40, 20, 0, 1, 0, 4>, fused = ["scores", "scale", "mask", "softmax", "context"], node = "context"
// CHECK-SAME:  -> !tensor_axes.tensor<f32, [H: 2, S: 3, E: 4]>
// CHECK:       kernel.matmul %q, %kt2
// CHECK:       kernel.softmax
// CHECK:       kernel.matmul %p2, %v

// The numbers: Sq 3, Sk 5, D 8; Q's strides 8, 1; K^T's 1, 8 (K read through the permutation); V's
// 4, 1; the batch extent 2 and Q's, K's, V's batch strides 24, 40, 20; the mask's 0, 1 and batch 0;
// Dv 4.  The module runs the program's numpy form over the grid (3 rows, 2 heads).
// MODULE:      def forward(
// MODULE:      o = np.empty((2, 3, 4), np.float32)  # context
// MODULE-NEXT: _tile_{{[0-9]+}}((3, 2), (3, 5, 8, 8, 1, 1, 8, 4, 1, 2, 24, 40, 20, 0, 1, 0, 4), q, k, v, mask, o)

kernel.program "forward" (%q : !tensor_axes.tensor<f32, [H: 2, S: 3, D: 8]>, %k : !tensor_axes.tensor<f32, [H: 2, T: 5, D: 8]>, %v : !tensor_axes.tensor<f32, [H: 2, T: 5, E: 4]>, %mask : !tensor_axes.tensor<f32, [One: 1, One1: 1, T: 5]>) names ["q", "k", "v", "mask"] {
  %kt = kernel.permute %k [0, 2, 1] {node = "kt"} : !tensor_axes.tensor<f32, [H: 2, T: 5, D: 8]> -> !tensor_axes.tensor<f32, [H: 2, D: 8, T: 5]>
  %s = kernel.matmul %q, %kt then #kernel.expr<[operand 0, const 0.25 : f32, mul 0 1]>() {fused = ["scores", "scale"], node = "scale"} : (!tensor_axes.tensor<f32, [H: 2, S: 3, D: 8]>, !tensor_axes.tensor<f32, [H: 2, D: 8, T: 5]>) -> !tensor_axes.tensor<f32, [H: 2, S: 3, T: 5]>
  %t = kernel.zip(%mask, %s) #kernel.expr<[operand 0, operand 1, add 1 0]> {node = "mask"} : (!tensor_axes.tensor<f32, [One: 1, One1: 1, T: 5]>, !tensor_axes.tensor<f32, [H: 2, S: 3, T: 5]>) -> !tensor_axes.tensor<f32, [H: 2, S: 3, T: 5]>
  %p = kernel.softmax(%t) {kind = "softmax", axes = array<i64: 2>, node = "softmax"} : (!tensor_axes.tensor<f32, [H: 2, S: 3, T: 5]>) -> !tensor_axes.tensor<f32, [H: 2, S: 3, T: 5]>
  %o = kernel.matmul %p, %v {node = "context"} : (!tensor_axes.tensor<f32, [H: 2, S: 3, T: 5]>, !tensor_axes.tensor<f32, [H: 2, T: 5, E: 4]>) -> !tensor_axes.tensor<f32, [H: 2, S: 3, E: 4]>
  %kt2 = kernel.permute %k [0, 2, 1] {node = "kt2"} : !tensor_axes.tensor<f32, [H: 2, T: 5, D: 8]> -> !tensor_axes.tensor<f32, [H: 2, D: 8, T: 5]>
  %s2 = kernel.matmul %q, %kt2 {node = "scores2"} : (!tensor_axes.tensor<f32, [H: 2, S: 3, D: 8]>, !tensor_axes.tensor<f32, [H: 2, D: 8, T: 5]>) -> !tensor_axes.tensor<f32, [H: 2, S: 3, T: 5]>
  %p2 = kernel.softmax(%s2) {kind = "softmax", axes = array<i64: 2>, node = "softmax2"} : (!tensor_axes.tensor<f32, [H: 2, S: 3, T: 5]>) -> !tensor_axes.tensor<f32, [H: 2, S: 3, T: 5]>
  %o2 = kernel.matmul %p2, %v {node = "context2"} : (!tensor_axes.tensor<f32, [H: 2, S: 3, T: 5]>, !tensor_axes.tensor<f32, [H: 2, T: 5, E: 4]>) -> !tensor_axes.tensor<f32, [H: 2, S: 3, E: 4]>
  kernel.return %o, %o2, %p2 names ["o", "o2", "p2"] : !tensor_axes.tensor<f32, [H: 2, S: 3, E: 4]>, !tensor_axes.tensor<f32, [H: 2, S: 3, E: 4]>, !tensor_axes.tensor<f32, [H: 2, S: 3, T: 5]>
}
