// RUN: loam-opt %s -p apply-options | filecheck %s

// loam.dims fixes a name inside a spelled dim_param too: `past + 1` becomes 3 once past is 2, on the
// inputs and on the declared outputs; a dim_param it does not read (`seq-len`, `a+1`: one opaque
// name each) stays.  An opaque dim_param is fixed whole by its own name (`batch * seq` here, which
// no input axis yields, is one name).
// CHECK:       graph.graph "g" (%k: !graph.tensor<f32, [1, 2, 4]>, %m: !graph.tensor<f32, [1, 3]>, %s: !graph.tensor<f32, ["seq-len", "a+1"]>, %b: !graph.tensor<f32, [6]>)
// CHECK:       graph.return %m, %k ["m", "k"] : !graph.tensor<f32, [1, 3]>, !graph.tensor<f32, [1, 2, 4]>
builtin.module attributes {loam.dims = {past = 2 : i64, "batch * seq" = 6 : i64}} {
  graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {
    graph.graph "g" (%k: !graph.tensor<f32, [1, "past", 4]>, %m: !graph.tensor<f32, [1, "past + 1"]>, %s: !graph.tensor<f32, ["seq-len", "a+1"]>, %b: !graph.tensor<f32, ["batch * seq"]>) inputs ["k", "m", "s", "b"] {
      graph.return %m, %k ["m", "k"] : !graph.tensor<f32, [1, "past + 1"]>, !graph.tensor<f32, [1, "past", 4]>
    }
  }
}
