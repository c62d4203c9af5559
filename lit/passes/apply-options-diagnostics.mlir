// RUN: loam-opt %s -p apply-options --split-input-file --verify-diagnostics | filecheck %s


// CHECK: dims: the graph 'g' declares no dim_param 'M'
builtin.module attributes {loam.dims = {M = 4 : i64}} {
  graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {
    graph.graph "g" (%x: !graph.tensor<f32, ["N", 8]>) inputs ["x"] {
      graph.return %x ["x"] : !graph.tensor<f32, ["N", 8]>
    }
  }
}

// -----

// CHECK: outputs: the graph declares no output 'logits' (it declares x)
builtin.module attributes {loam.outputs = ["logits"]} {
  graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {
    graph.graph "g" (%x: !graph.tensor<f32, ["N", 8]>) inputs ["x"] {
      graph.return %x ["x"] : !graph.tensor<f32, ["N", 8]>
    }
  }
}

// -----

// CHECK: layout rule 'fc9.*' reaches no tensor the model declares
builtin.module attributes {loam.layout = #tensor_axes.layout<["x" -> [Batch, In], "fc9.*" -> [In, Out]]>} {
  graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {
    graph.graph "g" (%x: !graph.tensor<f32, [2, 8]>) inputs ["x"] {
      graph.return %x ["x"] : !graph.tensor<f32, [2, 8]>
    }
  }
}

// -----

// CHECK: layout rule 'x' names graph 'decoder', which the model does not declare (it declares g)
builtin.module attributes {loam.layout = #tensor_axes.layout<["x" in "decoder" -> [Batch, In]]>} {
  graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {
    graph.graph "g" (%x: !graph.tensor<f32, [2, 8]>) inputs ["x"] {
      graph.return %x ["x"] : !graph.tensor<f32, [2, 8]>
    }
  }
}

// -----

// CHECK: dims: graph input 'mask' axis 1 is spelled 'past + seq', and dims fixes past but not seq; fix all of its names or none
builtin.module attributes {loam.dims = {past = 0 : i64}} {
  graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {
    graph.graph "g" (%k: !graph.tensor<f32, [1, "past", 4]>, %m: !graph.tensor<f32, [1, "past + seq"]>) inputs ["k", "mask"] {
      graph.return %m ["m"] : !graph.tensor<f32, [1, "past + seq"]>
    }
  }
}

// -----

// CHECK: dims: graph input 'x' axis 0 is spelled 'n - 2', which is -1 with n = 1: a negative extent
builtin.module attributes {loam.dims = {n = 1 : i64}} {
  graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {
    graph.graph "g" (%x: !graph.tensor<f32, ["n - 2"]>) inputs ["x"] {
      graph.return %x ["x"] : !graph.tensor<f32, ["n - 2"]>
    }
  }
}
