// RUN: loam-opt %s -p stage0 --split-input-file --verify-diagnostics | filecheck %s

// Scales fed at run time are read by the run, but their length (how many axes they resize) must be
// known at build time.
// CHECK: Resize node 'up': scales has extents [N]; Loam needs it 1-D with its length known at build time (the length sets how many axes it resizes)
graph.model {ir_version = 8 : i64, opset_import = {"" = 19 : i64}} {
  graph.graph "runtime_scales" (%x: !graph.tensor<f32, [1, 1, 4, 4]>, %s: !graph.tensor<f32, ["N"]>) inputs ["x", "s"] {
    %none = graph.none
    %y = graph.node "Resize" "up" since 19 (%x, %none, %s) -> ["y"] : !graph.unknown
    graph.return %y ["y"] : !graph.tensor<f32, [1, 1, 8, 8]>
  }
}

// -----

// Conv's group must divide both channel counts.
// CHECK: Conv node 'conv': group 3 does not divide the 4 input and 3 output channels
graph.model {ir_version = 8 : i64, opset_import = {"" = 19 : i64}} {
  graph.graph "groups" (%x: !graph.tensor<f32, [1, 4, 5, 5]>) inputs ["x"] {
    %w = graph.initializer "w" : !graph.tensor<f32, [3, 1, 3, 3]>
    %y = graph.node "Conv" "conv" since 19 (%x, %w) {group = 3 : i64} -> ["y"] : !graph.unknown
    graph.return %y ["y"] : !graph.tensor<f32, [1, 3, 3, 3]>
  }
}

// -----

// An attribute the rule does not read stops the build rather than being ignored.
// CHECK: MaxPool node 'pool': attribute 'bogus' is not defined for MaxPool at opset 19
graph.model {ir_version = 8 : i64, opset_import = {"" = 19 : i64}} {
  graph.graph "unknown_attr" (%x: !graph.tensor<f32, [1, 1, 4, 4]>) inputs ["x"] {
    %y = graph.node "MaxPool" "pool" since 19 (%x) {kernel_shape = #graph.list<ints [2, 2]>, bogus = 1 : i64} -> ["y"] : !graph.unknown
    graph.return %y ["y"] : !graph.tensor<f32, [1, 1, 3, 3]>
  }
}

// -----

// Scales as a float initializer are a weight, whose value stage 0 never reads (the run does), but
// whose length it knows: one scale per axis of a rank-4 input, not 2.
// CHECK: Resize node 'up': scales has 2 values; it takes one value per resized axis, 4 for the 4 axes
graph.model {ir_version = 8 : i64, opset_import = {"" = 19 : i64}} {
  graph.graph "weight_scales" (%x: !graph.tensor<f32, [1, 1, 4, 4]>) inputs ["x"] {
    %s = graph.initializer "s" = #graph.data<f32, [2], "0x0000004000000040"> : !graph.tensor<f32, [2]>
    %none = graph.none
    %y = graph.node "Resize" "up" since 19 (%x, %none, %s) -> ["y"] : !graph.unknown
    graph.return %y ["y"] : !graph.tensor<f32, [1, 1, 8, 8]>
  }
}

// -----

// Without ceil_mode a window longer than the padded input leaves no output (onnxruntime's integer
// division makes one anyway; ONNX's floor does not): refused rather than an empty tensor.
// CHECK: MaxPool node 'pool': spatial axis 0: the window spans 3 but the padded input holds 2 elements
graph.model {ir_version = 8 : i64, opset_import = {"" = 19 : i64}} {
  graph.graph "short" (%x: !graph.tensor<f32, [1, 1, 2, 4]>) inputs ["x"] {
    %y = graph.node "MaxPool" "pool" since 19 (%x) {kernel_shape = #graph.list<ints [3, 1]>} -> ["y"] : !graph.unknown
    graph.return %y ["y"] : !graph.tensor<f32, [1, 1, 0, 4]>
  }
}
