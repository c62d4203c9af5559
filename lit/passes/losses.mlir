// RUN: loam-opt %s -p 'stage0,name-axes,lower-to-kernel' | filecheck %s

// SoftmaxCrossEntropyLoss is the log-softmax over the classes (its second output) and then the
// negative log-likelihood kernel, which takes the weight and ignore_index and reduces to a scalar.
// CHECK:      kernel.program "forward" (%x: !tensor_axes.tensor<f32, [N: 2, C: 4, D: 3]>, %t: !tensor_axes.tensor<i64, [N: 2, D: 3]>) names ["x", "t"]
// CHECK:        %log_prob = kernel.softmax(%x) {kind = "log_softmax", axes = array<i64: 1>, node = "sce"}
// CHECK-SAME:     -> !tensor_axes.tensor<f32, [N: 2, C: 4, D: 3]>
// CHECK:        %loss = kernel.nll_loss(%log_prob, %t, %w) {reduction = "mean", ignore_index = 2 : i64, ignores = 1 : i64, node = "sce"}
// CHECK-SAME:     -> !tensor_axes.tensor<f32, []>
// CHECK:        kernel.return %loss, %log_prob names ["loss", "log_prob"]
builtin.module attributes {loam.layout = #tensor_axes.layout<["x" -> [N, C, D], "t" -> [N, D], "w" -> [C]]>} {
  graph.model {ir_version = 8 : i64, opset_import = {"" = 13 : i64}} {
    graph.graph "g" (%x: !graph.tensor<f32, [2, 4, 3]>, %t: !graph.tensor<i64, [2, 3]>) inputs ["x", "t"] {
      %w = graph.initializer "w" : !graph.tensor<f32, [4]>
      %loss, %log_prob = graph.node "SoftmaxCrossEntropyLoss" "sce" since 13 (%x, %t, %w) {ignore_index = 2 : i64} -> ["loss", "log_prob"] : !graph.unknown, !graph.unknown
      graph.return %loss, %log_prob ["loss", "log_prob"] : !graph.tensor<f32, []>, !graph.tensor<f32, [2, 4, 3]>
    }
  }
}
