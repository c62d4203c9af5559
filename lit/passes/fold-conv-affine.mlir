// RUN: loam-opt %s -p fold-conv-affine | filecheck %s
// RUN: loam-opt %s -p fold-conv-affine > %t.mlir && %python -m loam.backends.numpy_module %t.mlir | filecheck %s --check-prefix=MODULE

// A BatchNormalization and its ReLU, fused into one zip after a bias-free Conv: the scale goes into
// the Conv's weights (a zip of the weights, regrouped BatchNormalization operands), the offset into
// a zip of its own, and the zip left computes relu(c + offset).  The second zip reads its Conv's
// result twice (a residual), so its Conv keeps its weights.
// CHECK:       loam.notes = ["nodes 'bn', 'relu': the per-channel scale folded into Conv 'conv''s weights
// CHECK-LABEL: kernel.program "forward"
// CHECK:       %[[S:.*]] = kernel.regroup %s {node = "bn"} {{.*}} -> !tensor_axes.tensor<f32, [C: 4, Unit1: 1, Unit2: 1, Unit3: 1]>
// CHECK:       %[[V:.*]] = kernel.regroup %v {node = "bn"} {{.*}} -> !tensor_axes.tensor<f32, [C: 4, Unit1: 1, Unit2: 1, Unit3: 1]>
// CHECK:       %w_folded = kernel.zip(%w, %[[S]], %[[V]]) #kernel.expr<[operand 0, operand 1, operand 2, const 1.0 : f32, const 9.999999747378752e-06 : f32, add 2 4, sqrt 5, div 3 6, mul 7 1, mul 0 8]> {node = "bn"}
// CHECK:       %bn_offset = kernel.zip(%s, %b, %m, %v) #kernel.expr<[operand 0, operand 1, operand 2, operand 3, neg 2, const 9.999999747378752e-06 : f32, add 3 5, sqrt 6, div 4 7, mul 8 0, add 9 1]> {node = "bn"}
// CHECK-SAME:  -> !tensor_axes.tensor<f32, [C: 4, Unit1: 1, Unit2: 1]>
// CHECK:       %c = kernel.conv(%x, %w_folded)
// CHECK:       %y = kernel.zip(%c, %bn_offset) #kernel.expr<[operand 0, operand 1, add 0 1, relu 2]> {fused = ["bn", "relu"], node = "bn"}
// CHECK:       %c2 = kernel.conv(%x, %w)
// CHECK:       %z = kernel.zip(%c2, %s, %c2)

// The module computes the folded weights and the offset in _prepare, once.
// MODULE:      _prepare(self)
// MODULE:      def forward(
// MODULE:      c = kernel_conv(x, weights.w_folded,
// MODULE:      def _prepare(weights: "Weights") -> None:
// MODULE:      weights.w_folded = _zip_{{[0-9]+}}(weights.w,

kernel.program "forward" (%x : !tensor_axes.tensor<f32, [N: 2, Ci: 3, H: 5, W: 5]>) names ["x"] {
  %w = kernel.weight "w" : !tensor_axes.tensor<f32, [C: 4, Ci: 3, K: 3, K: 3]>
  %s0 = kernel.weight "s" : !tensor_axes.tensor<f32, [C: 4]>
  %b0 = kernel.weight "b" : !tensor_axes.tensor<f32, [C: 4]>
  %m0 = kernel.weight "m" : !tensor_axes.tensor<f32, [C: 4]>
  %v0 = kernel.weight "v" : !tensor_axes.tensor<f32, [C: 4]>
  %c = kernel.conv(%x, %w) {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64, node = "conv"} : (!tensor_axes.tensor<f32, [N: 2, Ci: 3, H: 5, W: 5]>, !tensor_axes.tensor<f32, [C: 4, Ci: 3, K: 3, K: 3]>) -> !tensor_axes.tensor<f32, [N: 2, C: 4, H: 5, W: 5]>
  %s = kernel.regroup %s0 {node = "bn"} : !tensor_axes.tensor<f32, [C: 4]> -> !tensor_axes.tensor<f32, [C: 4, Unit: 1, Unit1: 1]>
  %b = kernel.regroup %b0 {node = "bn"} : !tensor_axes.tensor<f32, [C: 4]> -> !tensor_axes.tensor<f32, [C: 4, Unit: 1, Unit1: 1]>
  %m = kernel.regroup %m0 {node = "bn"} : !tensor_axes.tensor<f32, [C: 4]> -> !tensor_axes.tensor<f32, [C: 4, Unit: 1, Unit1: 1]>
  %v = kernel.regroup %v0 {node = "bn"} : !tensor_axes.tensor<f32, [C: 4]> -> !tensor_axes.tensor<f32, [C: 4, Unit: 1, Unit1: 1]>
  %y = kernel.zip(%c, %s, %b, %m, %v) #kernel.expr<[operand 0, operand 1, operand 2, operand 3, operand 4, sub 0 3, const 9.999999747378752e-06 : f32, add 4 6, sqrt 7, div 5 8, mul 9 1, add 10 2, relu 11]> {fused = ["bn", "relu"], node = "bn"} : (!tensor_axes.tensor<f32, [N: 2, C: 4, H: 5, W: 5]>, !tensor_axes.tensor<f32, [C: 4, Unit: 1, Unit1: 1]>, !tensor_axes.tensor<f32, [C: 4, Unit: 1, Unit1: 1]>, !tensor_axes.tensor<f32, [C: 4, Unit: 1, Unit1: 1]>, !tensor_axes.tensor<f32, [C: 4, Unit: 1, Unit1: 1]>) -> !tensor_axes.tensor<f32, [N: 2, C: 4, H: 5, W: 5]>
  %c2 = kernel.conv(%x, %w) {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64, node = "conv2"} : (!tensor_axes.tensor<f32, [N: 2, Ci: 3, H: 5, W: 5]>, !tensor_axes.tensor<f32, [C: 4, Ci: 3, K: 3, K: 3]>) -> !tensor_axes.tensor<f32, [N: 2, C: 4, H: 5, W: 5]>
  %z = kernel.zip(%c2, %s, %c2) #kernel.expr<[operand 0, operand 1, operand 2, mul 0 1, add 3 2]> {node = "residual"} : (!tensor_axes.tensor<f32, [N: 2, C: 4, H: 5, W: 5]>, !tensor_axes.tensor<f32, [C: 4, Unit: 1, Unit1: 1]>, !tensor_axes.tensor<f32, [N: 2, C: 4, H: 5, W: 5]>) -> !tensor_axes.tensor<f32, [N: 2, C: 4, H: 5, W: 5]>
  kernel.return %y, %z names ["y", "z"] : !tensor_axes.tensor<f32, [N: 2, C: 4, H: 5, W: 5]>, !tensor_axes.tensor<f32, [N: 2, C: 4, H: 5, W: 5]>
}
