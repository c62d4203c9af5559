// RUN: loam-opt %s -p apply-options | filecheck %s

// loam.dims fixes a dim_param on the inputs and the declared outputs; loam.outputs cuts the graph
// to the outputs it names, dropping the nodes and initializers only the others read.
// CHECK:       graph.graph "g" (%x: !graph.tensor<f32, [4, 8]>)
// CHECK-NOT:   "unused"
// CHECK-NOT:   "Sigmoid"
// CHECK:       graph.node "Relu"
// CHECK:       graph.return %r ["r"] : !graph.tensor<f32, [4, 8]>
builtin.module attributes {loam.dims = {N = 4 : i64}, loam.outputs = ["r"]} {
  graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {
    graph.graph "g" (%x: !graph.tensor<f32, ["N", 8]>) inputs ["x"] {
      %u = graph.initializer "unused" : !graph.tensor<f32, [8]>
      %r = graph.node "Relu" "relu" since 17 (%x) -> ["r"] : !graph.unknown
      %a = graph.node "Add" "add" since 17 (%r, %u) -> ["a"] : !graph.unknown
      %s = graph.node "Sigmoid" "sig" since 17 (%a) -> ["s"] : !graph.unknown
      graph.return %s, %r ["s", "r"] : !graph.tensor<f32, ["N", 8]>, !graph.tensor<f32, ["N", 8]>
    }
  }
}
