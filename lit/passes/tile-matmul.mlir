// RUN: loam-opt %s -p tile-matmul | filecheck %s
// RUN: loam-opt %s -p tile-matmul > %t.mlir && %python -m loam.backends.wgsl_module %t.mlir | filecheck %s --check-prefix=WGSL

// f32 products become the matmul_tiles tile program: a 2-D one with its fused bias + ReLU epilogue
// (the bias read through strides 0 along rows, 1 along columns), a batched one whose rhs is a
// permutation (read from the permutation's source through permuted strides: the permute goes), a
// matrix-vector product (N = 1, B's column stride 0).  An f16 product keeps the library kernel.
// Numbers: M, N, K, A's row and contraction strides, B's contraction and column strides, then the
// batch extents, A's and B's batch strides, then each extra's strides; grid: blocks along N and M
// (BM and BN the powers of two holding M and N), then the batch count.
// CHECK-LABEL: kernel.program "products"
// CHECK:       %y = kernel.tile_program(%x, %w, %b) {grid = array<i64: 1, 1>, numbers = array<i64: 4, 16, 8, 8, 1, 16, 1, 0, 1>, fused = ["fc", "relu"], node = "fc", program = #kernel.tile_program<tile 256, [program, program 1, param 0,
// CHECK-SAME:  iota [4, 1] 0,
// CHECK-SAME:  fill 0.0 [4, 16] : f32, loop 4 by 16, carry 17,
// CHECK-SAME:  load 0 20 21 0.0 : f32,
// CHECK-SAME:  load 1 23 24 0.0 : f32, dot 22 25, map [operand 0, operand 1, add 0 1] (19, 26), end (27),
// CHECK-SAME:  load 2 32 29 0.0 : f32, map [operand 0, operand 1, add 0 1, relu 2] (19, 33),
// CHECK-SAME:  store 0 35 34 29]>}
// CHECK-NOT:   kernel.permute
// CHECK:       %s = kernel.tile_program(%q, %k) {grid = array<i64: 1, 1, 6>, numbers = array<i64: 5, 7, 8, 8, 1, 1, 8, 2, 3, 120, 40, 168, 56>, node = "scores", program = #kernel.tile_program<tile 128, [
// CHECK-SAME:  program 2,
// CHECK-SAME:  fill 0.0 [8, 8] : f32, loop 4 by 16,
// CHECK:       %u = kernel.tile_program(%x, %v) {grid = array<i64: 1, 1>, numbers = array<i64: 4, 1, 8, 8, 1, 1, 0>, node = "gemv", program = #kernel.tile_program<tile 64, [
// CHECK-SAME:  fill 0.0 [4, 1] : f32
// CHECK:       %z = kernel.matmul %h, %wh {node = "half"}

// forward dispatches both products as tile programs; the printed shader of the first: the loaded A
// and B tiles go to workgroup memory between barriers, and each invocation accumulates its elements
// of the [4, 16] block from there.
// WGSL:        g.dispatch('tile_0', (_b[{{[0-9]+}}], _b[0], _w[0], _w[1]), *_p_tile_program((1, 1), (4, 16, 8, 8, 1, 16, 1, 0, 1)))  # fc
// WGSL-NEXT:   g.dispatch('tile_1', (_b[{{[0-9]+}}], _b[1], _b[2]), *_p_tile_program((1, 1, 6), (5, 7, 8, 8, 1, 1, 8, 2, 3, 120, 40, 168, 56)))  # scores
// WGSL:        'tile_0': '
// WGSL-SAME:   var<workgroup> w22: array<f32, 64>;\nvar<workgroup> w25: array<f32, 256>;
// WGSL-SAME:   var t19: array<f32, 1> = t17;\n  for (var t18: i32 = 0; t18 < t4; t18 = t18 + 16) {
// WGSL-SAME:   t22[j] = in0[u32(t20[j])];
// WGSL-SAME:   workgroupBarrier();\n  for (var j: u32 = 0u; j < 1u; j = j + 1u) { if (lid + 64u * j < 64u) { w22[lid + 64u * j] = t22[j]; } }\n  workgroupBarrier();
// WGSL-SAME:   total = total + w22[r * 16u + q] * w25[q * 16u + c];
// WGSL-SAME:   { let next0 = t27; t19 = next0; }\n  }
// WGSL-SAME:   out0[u32(t35[j])] = t34[j];
// WGSL:        'matmul_3': '
builtin.module {
  kernel.program "products" (%x: !tensor_axes.tensor<f32, [Batch: 4, In: 8]>, %q: !tensor_axes.tensor<f32, [B: 2, H: 3, S: 5, D: 8]>, %k: !tensor_axes.tensor<f32, [B: 2, H: 3, T: 7, D: 8]>, %v: !tensor_axes.tensor<f32, [In: 8]>, %h: !tensor_axes.tensor<f16, [Batch: 4, In: 8]>) names ["x", "q", "k", "v", "h"] {
    %w = kernel.weight "fc.weight" : !tensor_axes.tensor<f32, [In: 8, Hidden: 16]>
    %b = kernel.weight "fc.bias" : !tensor_axes.tensor<f32, [Hidden: 16]>
    %wh = kernel.weight "half.weight" : !tensor_axes.tensor<f16, [In: 8, Hidden: 16]>
    %y = kernel.matmul %x, %w then #kernel.expr<[operand 0, operand 1, add 0 1, relu 2]> (%b) {node = "fc", fused = ["fc", "relu"]} : (!tensor_axes.tensor<f32, [Batch: 4, In: 8]>, !tensor_axes.tensor<f32, [In: 8, Hidden: 16]>, !tensor_axes.tensor<f32, [Hidden: 16]>) -> !tensor_axes.tensor<f32, [Batch: 4, Hidden: 16]>
    %kt = kernel.permute %k [0, 1, 3, 2] {node = "kt"} : !tensor_axes.tensor<f32, [B: 2, H: 3, T: 7, D: 8]> -> !tensor_axes.tensor<f32, [B: 2, H: 3, D: 8, T: 7]>
    %s = kernel.matmul %q, %kt {node = "scores"} : (!tensor_axes.tensor<f32, [B: 2, H: 3, S: 5, D: 8]>, !tensor_axes.tensor<f32, [B: 2, H: 3, D: 8, T: 7]>) -> !tensor_axes.tensor<f32, [B: 2, H: 3, S: 5, T: 7]>
    %u = kernel.matmul %x, %v {node = "gemv"} : (!tensor_axes.tensor<f32, [Batch: 4, In: 8]>, !tensor_axes.tensor<f32, [In: 8]>) -> !tensor_axes.tensor<f32, [Batch: 4]>
    %z = kernel.matmul %h, %wh {node = "half"} : (!tensor_axes.tensor<f16, [Batch: 4, In: 8]>, !tensor_axes.tensor<f16, [In: 8, Hidden: 16]>) -> !tensor_axes.tensor<f16, [Batch: 4, Hidden: 16]>
    kernel.return %y, %s, %u, %z names ["y", "s", "u", "z"] : !tensor_axes.tensor<f32, [Batch: 4, Hidden: 16]>, !tensor_axes.tensor<f32, [B: 2, H: 3, S: 5, T: 7]>, !tensor_axes.tensor<f32, [Batch: 4]>, !tensor_axes.tensor<f16, [Batch: 4, Hidden: 16]>
  }
}
