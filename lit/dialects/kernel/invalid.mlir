// RUN: loam-opt %s --parsing-diagnostics --verify-diagnostics --split-input-file | filecheck %s

kernel.program "forward" (%x : !tensor_axes.tensor<f32, [B: 2, K: 3]>) names ["x"] {
  // expected-error @+1 {{contraction extents disagree}}
  %0 = kernel.matmul %x, %x {node = "mm"} : (!tensor_axes.tensor<f32, [B: 2, K: 3]>, !tensor_axes.tensor<f32, [B: 2, K: 3]>) -> !tensor_axes.tensor<f32, [B: 2, K: 3]>
  kernel.return %x names ["y"] : !tensor_axes.tensor<f32, [B: 2, K: 3]>
}
// CHECK: kernel.matmul 'mm': contraction extents disagree: lhs 3, rhs 2

// -----

kernel.program "forward" (%x : !tensor_axes.tensor<f32, [B: 2, K: 3]>) names ["x"] {
  // expected-error @+1 {{is not a permutation}}
  %0 = kernel.permute %x [0, 2] {node = "p"} : !tensor_axes.tensor<f32, [B: 2, K: 3]> -> !tensor_axes.tensor<f32, [B: 2, K: 3]>
  kernel.return %x names ["y"] : !tensor_axes.tensor<f32, [B: 2, K: 3]>
}
// CHECK: kernel.permute 'p': [0, 2] is not a permutation of rank 2

// -----

kernel.program "forward" (%x : !tensor_axes.tensor<f32, [B: 2, K: 3]>) names ["x"] {
  // expected-error @+1 {{the expression reads operands}}
  %0 = kernel.zip(%x) #kernel.expr<[operand 0, operand 1, add 0 1]> {node = "z"} : (!tensor_axes.tensor<f32, [B: 2, K: 3]>) -> !tensor_axes.tensor<f32, [B: 2, K: 3]>
  kernel.return %x names ["y"] : !tensor_axes.tensor<f32, [B: 2, K: 3]>
}
// CHECK: kernel.zip 'z': 1 operands but the expression reads operands [0, 1]

// -----

// expected-error @+1 {{reads step 3, which is not an earlier step}}
%0 = "test.op"() {e = #kernel.expr<[operand 0, relu 3]>} : () -> i32
// CHECK: step 1 (relu 3) reads step 3, which is not an earlier step

// -----

kernel.program "forward" (%x : !tensor_axes.tensor<f32, [B: 2, K: 3]>) names ["x", "extra"] {
  kernel.return %x names ["y"] : !tensor_axes.tensor<f32, [B: 2, K: 3]>
}
// CHECK: kernel.program has 1 inputs but 2 input names
