// RUN: loam-opt %s -p 'stage0,name-axes,lower-to-kernel' | filecheck %s

// Gather over known indices folds; Gather over run-time ids is a kernel whose output axes are the
// data's outer axes around the indices' axes (a token lookup: [Batch, Seq] ids -> [Batch, Seq, Hidden]).
// CHECK:      kernel.program "forward" (%ids: !tensor_axes.tensor<i64, [Batch: 2, Seq: 3]>) names ["ids"]
// CHECK:        %table = kernel.weight "table" : !tensor_axes.tensor<f32, [Vocab: 5, Hidden: 4]>
// CHECK:        %y = kernel.gather(%table, %ids) {axis = 0 : i64, node = "lookup"} : (!tensor_axes.tensor<f32, [Vocab: 5, Hidden: 4]>, !tensor_axes.tensor<i64, [Batch: 2, Seq: 3]>) -> !tensor_axes.tensor<f32, [Batch: 2, Seq: 3, Hidden: 4]>
// CHECK:        kernel.return %y names ["y"]
builtin.module attributes {loam.layout = #tensor_axes.layout<["ids" -> [Batch, Seq], "table" -> [Vocab, Hidden]]>} {
  graph.model {ir_version = 8 : i64, opset_import = {"" = 13 : i64}} {
    graph.graph "g" (%ids: !graph.tensor<i64, [2, 3]>) inputs ["ids"] {
      %table = graph.initializer "table" : !graph.tensor<f32, [5, 4]>
      %y = graph.node "Gather" "lookup" since 13 (%table, %ids) {axis = 0 : i64} -> ["y"] : !graph.unknown
      graph.return %y ["y"] : !graph.tensor<f32, [2, 3, 4]>
    }
  }
}
