// RUN: loam-opt %s -p 'stage0,name-axes' | filecheck %s
// RUN: loam-opt %s -p 'stage0,name-axes{layout="x=Batch,In;w=Hidden,In;v=Hidden,Out;b=Out"}' | filecheck %s --check-prefix=FLAG

// The layout names inputs and initializers; the operators carry the names through: Gemm's
// transB reads w as [Hidden, In], MatMul contracts Hidden, Add stretches b over Batch.
// CHECK:      graph.graph "g" (%x: !tensor_axes.tensor<f32, [Batch: N, Feature: 8]>)
// CHECK:      %w = graph.initializer "w" : !tensor_axes.tensor<f32, [Hidden: 16, Feature: 8]>
// CHECK:      %v = graph.initializer "v" : !tensor_axes.tensor<f32, [Hidden: 16, Out: 3]>
// CHECK:      %b = graph.initializer "b" : !tensor_axes.tensor<f32, [Out: 3]>
// CHECK:      %h = graph.node "Gemm" {{.*}}: !tensor_axes.tensor<f32, [Batch: N, Hidden: 16]>
// CHECK:      %m = graph.node "MatMul" {{.*}}: !tensor_axes.tensor<f32, [Batch: N, Out: 3]>
// CHECK:      %y = graph.node "Add" {{.*}}: !tensor_axes.tensor<f32, [Batch: N, Out: 3]>

// The pass option's rules come before the module's: here they name In as In, not Feature.
// FLAG:       graph.graph "g" (%x: !tensor_axes.tensor<f32, [Batch: N, In: 8]>)
// FLAG:       %y = graph.node "Add" {{.*}}: !tensor_axes.tensor<f32, [Batch: N, Out: 3]>
builtin.module attributes {loam.layout = #tensor_axes.layout<["x" -> [Batch, Feature], "w" -> [Hidden, Feature], "v" -> [Hidden, Out], "b" -> [Out]]>} {
  graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {
    graph.graph "g" (%x: !graph.tensor<f32, ["N", 8]>) inputs ["x"] {
      %w = graph.initializer "w" : !graph.tensor<f32, [16, 8]>
      %v = graph.initializer "v" : !graph.tensor<f32, [16, 3]>
      %b = graph.initializer "b" : !graph.tensor<f32, [3]>
      %h = graph.node "Gemm" "gemm" since 17 (%x, %w) {transB = 1 : i64} -> ["h"] : !graph.unknown
      %m = graph.node "MatMul" "mm" since 17 (%h, %v) -> ["m"] : !graph.unknown
      %y = graph.node "Add" "add" since 17 (%m, %b) -> ["y"] : !graph.unknown
      graph.return %y ["y"] : !graph.tensor<f32, ["N", 3]>
    }
  }
}
