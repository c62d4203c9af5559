// RUN: loam-opt %s -p 'stage0,name-axes,lower-to-kernel' --split-input-file | filecheck %s

// BatchNormalization at inference is each parameter regrouped to [C, 1] and one zip;
// LayerNormalization is one kernel.normalize over the axes from `axis` on.
// CHECK:      kernel.program "forward" (%x: !tensor_axes.tensor<f32, [N: 2, C: 3, W: 4]>) names ["x"]
// CHECK:        %0 = kernel.regroup %scale {node = "bn"} : !tensor_axes.tensor<f32, [C: 3]> -> !tensor_axes.tensor<f32, [C: 3, Unit: 1]>
// CHECK-COUNT-3: kernel.regroup
// CHECK:        %b = kernel.zip(%x, %0, %1, %2, %3) #kernel.expr<[operand 0, operand 1, operand 2, operand 3, operand 4, sub 0 3, const {{.*}} : f32, add 4 6, sqrt 7, div 5 8, mul 9 1, add 10 2]> {node = "bn"}
// CHECK:        %l = kernel.normalize(%b, %g) {axes = array<i64: 1, 2>, epsilon = 1.000000e-05 : f64, channel_axis = -1 : i64, stash = "float32", stats = 0 : i64, node = "ln"}
// CHECK-SAME:     -> !tensor_axes.tensor<f32, [N: 2, C: 3, W: 4]>
// CHECK:        kernel.return %l names ["l"]
builtin.module attributes {loam.layout = #tensor_axes.layout<["x" -> [N, C, W], "scale" -> [C], "bias" -> [C], "mean" -> [C], "var" -> [C], "g" -> [C, W]]>} {
  graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {
    graph.graph "g" (%x: !graph.tensor<f32, [2, 3, 4]>) inputs ["x"] {
      %scale = graph.initializer "scale" : !graph.tensor<f32, [3]>
      %bias = graph.initializer "bias" : !graph.tensor<f32, [3]>
      %mean = graph.initializer "mean" : !graph.tensor<f32, [3]>
      %var = graph.initializer "var" : !graph.tensor<f32, [3]>
      %g = graph.initializer "g" : !graph.tensor<f32, [3, 4]>
      %b = graph.node "BatchNormalization" "bn" since 15 (%x, %scale, %bias, %mean, %var) {epsilon = 1.000000e-03 : f32} -> ["b"] : !graph.unknown
      %l = graph.node "LayerNormalization" "ln" since 17 (%b, %g) {axis = 1 : i64} -> ["l"] : !graph.unknown
      graph.return %l ["l"] : !graph.tensor<f32, [2, 3, 4]>
    }
  }
}

// -----

// RMSNormalization is composed as ONNX's function body composes it: the squares (in f32 for an f16
// X), their mean over the axes from `axis` on, then X / sqrt(mean + epsilon) rounded to f16 and
// times the scale.
// CHECK:      kernel.program "forward" (%x: !tensor_axes.tensor<f16, [N: 2, C: 3, W: 4]>) names ["x"]
// CHECK:        %0 = kernel.zip(%x) #kernel.expr<[operand 0, cast 0 : f32, mul 1 1]> {node = "rms"} : (!tensor_axes.tensor<f16, [N: 2, C: 3, W: 4]>) -> !tensor_axes.tensor<f32, [N: 2, C: 3, W: 4]>
// CHECK:        %1 = kernel.reduce(%0) {kind = "mean", axes = array<i64: 1, 2>, keepdims = 1 : i64, node = "rms"} : (!tensor_axes.tensor<f32, [N: 2, C: 3, W: 4]>) -> !tensor_axes.tensor<f32, [N: 2, Unit: 1, Unit1: 1]>
// CHECK:        %r = kernel.zip(%x, %1, %g) #kernel.expr<[operand 0, cast 0 : f32, operand 1, operand 2, cast 3 : f32, const 1.0e-05 : f32, add 2 5, sqrt 6, div 1 7, cast 8 : f16, cast 9 : f32, mul 10 4, cast 11 : f16]> {node = "rms"}
// CHECK-SAME:     -> !tensor_axes.tensor<f16, [N: 2, C: 3, W: 4]>
// CHECK:        kernel.return %r names ["r"]
builtin.module attributes {loam.layout = #tensor_axes.layout<["x" -> [N, C, W], "g" -> [W]]>} {
  graph.model {ir_version = 10 : i64, opset_import = {"" = 23 : i64}} {
    graph.graph "g" (%x: !graph.tensor<f16, [2, 3, 4]>) inputs ["x"] {
      %g = graph.initializer "g" : !graph.tensor<f16, [4]>
      %r = graph.node "RMSNormalization" "rms" since 23 (%x, %g) {axis = 1 : i64} -> ["r"] : !graph.unknown
      graph.return %r ["r"] : !graph.tensor<f16, [2, 3, 4]>
    }
  }
}
