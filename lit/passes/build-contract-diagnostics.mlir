// RUN: loam-opt %s -p apply-options --split-input-file --verify-diagnostics | filecheck %s

// The build contract (loam.dialects.build_contract) checks the module's loam. attributes when a pass
// reads one: a malformed value, or a name it does not register, is refused naming the attribute.

// CHECK: loam.dims is {N = "four"}, not a dictionary of dim_param names to integers
builtin.module attributes {loam.dims = {N = "four"}} {
  graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {
    graph.graph "g" (%x: !graph.tensor<f32, ["N", 8]>) inputs ["x"] {
      graph.return %x ["x"] : !graph.tensor<f32, ["N", 8]>
    }
  }
}

// -----

// CHECK: module attribute loam.dimz is not one the build contract registers
builtin.module attributes {loam.dimz = {N = 4 : i64}} {
  graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {
    graph.graph "g" (%x: !graph.tensor<f32, ["N", 8]>) inputs ["x"] {
      graph.return %x ["x"] : !graph.tensor<f32, ["N", 8]>
    }
  }
}

// -----

// A registered attribute this pass does not read is checked too.
// CHECK: loam.notes is "one note", not an array of strings
builtin.module attributes {loam.dims = {N = 4 : i64}, loam.notes = "one note"} {
  graph.model {ir_version = 8 : i64, opset_import = {"" = 17 : i64}} {
    graph.graph "g" (%x: !graph.tensor<f32, ["N", 8]>) inputs ["x"] {
      graph.return %x ["x"] : !graph.tensor<f32, ["N", 8]>
    }
  }
}
