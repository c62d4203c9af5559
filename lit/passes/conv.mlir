// RUN: loam-opt %s -p 'stage0,name-axes,lower-to-kernel' --split-input-file | filecheck %s

// A SAME-padded Conv settles its pads at build time and keeps X's spatial axes (its output grid is
// its input's); the output channel axis is W's first.  MaxPool's ceil_mode output extents and
// Resize's scales (a Constant) settle too; the new spatial axes take the layout's names.
// CHECK-LABEL: kernel.program "forward" (%x: !tensor_axes.tensor<f32, [N: 1, C: 3, H: 8, W: 8]>) names ["x"]
// CHECK:        %c = kernel.conv(%x, %w, %b) {strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, group = 1 : i64, node = "conv"}
// CHECK-SAME:     -> !tensor_axes.tensor<f32, [N: 1, O: 4, H: 8, W: 8]>
// CHECK:        %p = kernel.pool(%c) {mode = "max", kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, dilations = array<i64: 1, 1>, out_shape = array<i64: 4, 4>, node = "pool"}
// CHECK-SAME:     -> !tensor_axes.tensor<f32, [N: 1, O: 4, H2: 4, W2: 4]>
// CHECK:        %r = kernel.resize(%p) {mode = "nearest", coordinate_mode = "half_pixel", nearest_mode = "round_prefer_floor", scales = array<f64: 1.000000e+00, 1.000000e+00, 2.000000e+00, 2.000000e+00>, sizes = array<i64: 1, 4, 8, 8>, node = "up"}
// CHECK-SAME:     -> !tensor_axes.tensor<f32, [N: 1, O: 4, H4: 8, W4: 8]>
// CHECK-NOT:    kernel.constant
// CHECK:        kernel.return %r names ["r"]
builtin.module attributes {loam.layout = #tensor_axes.layout<["x" -> [N, C, H, W], "w" -> [O, C, KH, KW], "b" -> [O], "p" -> [N, O, H2, W2], "s" -> [Four], "r" -> [N, O, H4, W4]]>} {
  graph.model {ir_version = 8 : i64, opset_import = {"" = 19 : i64}} {
    graph.graph "g" (%x: !graph.tensor<f32, [1, 3, 8, 8]>) inputs ["x"] {
      %w = graph.initializer "w" : !graph.tensor<f32, [4, 3, 3, 3]>
      %b = graph.initializer "b" : !graph.tensor<f32, [4]>
      %c = graph.node "Conv" "conv" since 19 (%x, %w, %b) {auto_pad = "SAME_UPPER", kernel_shape = #graph.list<ints [3, 3]>} -> ["c"] : !graph.unknown
      %p = graph.node "MaxPool" "pool" since 19 (%c) {kernel_shape = #graph.list<ints [2, 2]>, strides = #graph.list<ints [2, 2]>, ceil_mode = 1 : i64} -> ["p"] : !graph.unknown
      %s = graph.node "Constant" "k" since 19 () {value = #graph.data<f32, [4], "0x0000803f0000803f0000004000000040">} -> ["s"] : !graph.unknown
      %none = graph.none
      %r = graph.node "Resize" "up" since 19 (%p, %none, %s) {mode = "nearest"} -> ["r"] : !graph.unknown
      graph.return %r ["r"] : !graph.tensor<f32, [1, 4, 8, 8]>
    }
  }
}

// -----

// An AveragePool over a value the build knows folds in stage 0 (the module's own kernel computes
// it): the mean of 1, 2, 3, 4 is 2.5, a one-element constant the Add's Expr carries.
// CHECK-LABEL: kernel.program "forward" (%x: !tensor_axes.tensor<f32, [N: 1, C: 1, H: 1, W: 1]>)
// CHECK-NOT:   kernel.pool
// CHECK:       kernel.zip(%x) #kernel.expr<[operand 0, const 2.5 : f32, add 0 1]>
builtin.module attributes {loam.layout = #tensor_axes.layout<["x" -> [N, C, H, W], "a" -> [N, C, H, W]]>} {
  graph.model {ir_version = 8 : i64, opset_import = {"" = 19 : i64}} {
    graph.graph "fold" (%x: !graph.tensor<f32, [1, 1, 1, 1]>) inputs ["x"] {
      %k = graph.node "Constant" "k" since 19 () {value = #graph.data<f32, [1, 1, 2, 2], "0x0000803f000000400000404000008040">} -> ["k"] : !graph.unknown
      %a = graph.node "AveragePool" "avg" since 19 (%k) {kernel_shape = #graph.list<ints [2, 2]>} -> ["a"] : !graph.unknown
      %y = graph.node "Add" "add" since 19 (%x, %a) -> ["y"] : !graph.unknown
      graph.return %y ["y"] : !graph.tensor<f32, [1, 1, 1, 1]>
    }
  }
}

// -----

// Resize's sizes as an i64 initializer (roi and scales absent), as exporters write them: stage 0
// knows the value and the lowering reads the weight's data, so the extents and scales settle.
// MaxPool with its Indices output scans as onnxruntime does (nan_rule "first").
// CHECK-LABEL: kernel.program "forward" (%x: !tensor_axes.tensor<f32, [N: 1, C: 2, H: 4, W: 4]>)
// CHECK:       %r = kernel.resize(%x) {mode = "nearest", coordinate_mode = "half_pixel", nearest_mode = "round_prefer_floor", scales = array<f64: 1.000000e+00, 1.000000e+00, 1.500000e+00, 1.250000e+00>, sizes = array<i64: 1, 2, 6, 5>, node = "up"}
// CHECK-SAME:    -> !tensor_axes.tensor<f32, [N: 1, C: 2, H6: 6, W5: 5]>
// CHECK:       %p, %i = kernel.pool(%r) {mode = "max", {{.*}}, nan_rule = "first", storage_order = 0 : i64, indices = 1 : i64, node = "pool"}
builtin.module attributes {loam.layout = #tensor_axes.layout<["x" -> [N, C, H, W], "sizes" -> [Four], "r" -> [N, C, H6, W5], "p" -> [N, C, H3, W2], "i" -> [N, C, H3, W2]]>} {
  graph.model {ir_version = 8 : i64, opset_import = {"" = 19 : i64}} {
    graph.graph "sizes" (%x: !graph.tensor<f32, [1, 2, 4, 4]>) inputs ["x"] {
      %sizes = graph.initializer "sizes" = #graph.data<i64, [4], "0x0100000000000000020000000000000006000000000000000500000000000000"> : !graph.tensor<i64, [4]>
      %none = graph.none
      %r = graph.node "Resize" "up" since 19 (%x, %none, %none, %sizes) {mode = "nearest"} -> ["r"] : !graph.unknown
      %p, %i = graph.node "MaxPool" "pool" since 19 (%r) {kernel_shape = #graph.list<ints [2, 2]>, strides = #graph.list<ints [2, 2]>} -> ["p", "i"] : !graph.unknown, !graph.unknown
      graph.return %p, %i ["p", "i"] : !graph.tensor<f32, [1, 2, 3, 2]>, !graph.tensor<i64, [1, 2, 3, 2]>
    }
  }
}

// -----

// Resize's sizes fed at run time: the node lowers to kernel.resize_to, which reads them (present bit
// 2: sizes) over the axes attribute; the extents of the axes it resizes are lengths only the run
// knows (r[2], r[3]), and what follows keeps them symbolic.
// CHECK-LABEL: kernel.program "forward" (%x: !tensor_axes.tensor<f32, [N: 1, C: 2, H: 4, W: 4]>, %sizes: !tensor_axes.tensor<i64, [Two: 2]>)
// CHECK:       %r = kernel.resize_to(%x, %sizes) {axes = array<i64: 3, 2>, keep_aspect_ratio_policy = "stretch", present = 4 : i64, mode = "linear", coordinate_mode = "half_pixel", nearest_mode = "round_prefer_floor", node = "up"}
// CHECK-SAME:    -> !tensor_axes.tensor<f32, [N: 1, C: 2, Hr: "r[2]", Wr: "r[3]"]>
// CHECK:       %y = kernel.zip(%r)
// CHECK-SAME:    -> !tensor_axes.tensor<f32, [N: 1, C: 2, Hr: "r[2]", Wr: "r[3]"]>
builtin.module attributes {loam.layout = #tensor_axes.layout<["x" -> [N, C, H, W], "sizes" -> [Two], "r" -> [N, C, Hr, Wr]]>} {
  graph.model {ir_version = 8 : i64, opset_import = {"" = 19 : i64}} {
    graph.graph "runtime_sizes" (%x: !graph.tensor<f32, [1, 2, 4, 4]>, %sizes: !graph.tensor<i64, [2]>) inputs ["x", "sizes"] {
      %none = graph.none
      %r = graph.node "Resize" "up" since 19 (%x, %none, %none, %sizes) {mode = "linear", axes = #graph.list<ints [3, 2]>} -> ["r"] : !graph.unknown
      %y = graph.node "Relu" "relu" since 19 (%r) -> ["y"] : !graph.unknown
      graph.return %y ["y"] : !graph.tensor<f32, [1, 2, ?, ?]>
    }
  }
}
