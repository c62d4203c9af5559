// RUN: loam-opt %s -p 'stage0,name-axes,lower-to-kernel' | filecheck %s

// Gemm is a permute (transB), a product and one zip for alpha and the bias; Relu is a zip;
// a one-element float constant folds into the Expr instead of becoming a tensor.
// CHECK:      kernel.program "forward" (%x: !tensor_axes.tensor<f32, [Batch: 2, In: 8]>) names ["x"]
// CHECK:        %w = kernel.weight "w" : !tensor_axes.tensor<f32, [Hidden: 16, In: 8]>
// CHECK:        %b = kernel.weight "b" = #graph.data<{{.*}}> : !tensor_axes.tensor<f32, [Hidden: 16]>
// CHECK:        %w_T = kernel.permute %w [1, 0] {node = "gemm"}
// CHECK:        %gemm_product = kernel.matmul %x, %w_T {node = "gemm"}
// CHECK:        %h = kernel.zip(%gemm_product, %b) #kernel.expr<[operand 0, operand 1, const 0.5 : f32, mul 0 2, const 2.0 : f32, mul 1 4, add 3 5]> {node = "gemm"}
// CHECK:        %r = kernel.zip(%h) #kernel.expr<[operand 0, relu 0]> {node = "relu"}
// CHECK-NOT:    kernel.constant
// CHECK:        %y = kernel.zip(%r) #kernel.expr<[operand 0, const 3.0 : f32, mul 0 1]> {node = "scale"}
// CHECK:        kernel.return %y names ["y"]
// CHECK-NOT:  graph.
builtin.module attributes {loam.layout = #tensor_axes.layout<["x" -> [Batch, In], "w" -> [Hidden, In], "b" -> [Hidden]]>} {
  graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {
    graph.graph "g" (%x: !graph.tensor<f32, [2, 8]>) inputs ["x"] {
      %w = graph.initializer "w" : !graph.tensor<f32, [16, 8]>
      %b = graph.initializer "b" = #graph.data<f32, [16], "0x0000803f0000803f0000803f0000803f0000803f0000803f0000803f0000803f0000803f0000803f0000803f0000803f0000803f0000803f0000803f0000803f"> : !graph.tensor<f32, [16]>
      %h = graph.node "Gemm" "gemm" since 17 (%x, %w, %b) {transB = 1 : i64, alpha = 5.000000e-01 : f32, beta = 2.000000e+00 : f32} -> ["h"] : !graph.unknown
      %r = graph.node "Relu" "relu" since 17 (%h) -> ["r"] : !graph.unknown
      %three = graph.node "Constant" "k" since 17 () {value = #graph.data<f32, [1], "0x00004040">} -> ["three"] : !graph.unknown
      %y = graph.node "Mul" "scale" since 17 (%r, %three) -> ["y"] : !graph.unknown
      graph.return %y ["y"] : !graph.tensor<f32, [2, 16]>
    }
  }
}
