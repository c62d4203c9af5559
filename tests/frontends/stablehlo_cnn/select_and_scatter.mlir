// Hand-written stablehlo.select_and_scatter (scripts/export_jax_models.py): what JAX does not print,
// XLA computing the expected results: the spec's example (i64, a padding attribute), GT (the last
// maximum) with a non-zero init value, a compare of the arguments swapped (GE of (next, kept): the
// first minimum) with windows of padding alone, LT (the last minimum).
module @select_and_scatter {
  func.func public @main(%x: tensor<4x2xi64> loc("x"), %s: tensor<2x2xi64> loc("s"), %y: tensor<5x6xf32> loc("y"),
                         %g2: tensor<3x3xf32> loc("g2"), %g3: tensor<9x2xf32> loc("g3"), %g4: tensor<4x5xf32> loc("g4"))
      -> (tensor<4x2xi64> {jax.result_info = "result['spec']"},
          tensor<5x6xf32> {jax.result_info = "result['last_max']"},
          tensor<5x6xf32> {jax.result_info = "result['first_min']"},
          tensor<5x6xf32> {jax.result_info = "result['last_min']"}) {
    %zero = stablehlo.constant dense<0> : tensor<i64>
    %half = stablehlo.constant dense<5.000000e-01> : tensor<f32>
    %fzero = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %0 = "stablehlo.select_and_scatter"(%x, %s, %zero) <{window_dimensions = array<i64: 3, 1>, window_strides = array<i64: 2, 1>, padding = dense<[[0, 1], [0, 0]]> : tensor<2x2xi64>}> ({
    ^bb0(%a: tensor<i64>, %b: tensor<i64>):
      %p = stablehlo.compare GE, %a, %b, SIGNED : (tensor<i64>, tensor<i64>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    }, {
    ^bb0(%a: tensor<i64>, %b: tensor<i64>):
      %r = stablehlo.add %a, %b : tensor<i64>
      stablehlo.return %r : tensor<i64>
    }) : (tensor<4x2xi64>, tensor<2x2xi64>, tensor<i64>) -> tensor<4x2xi64>
    %1 = "stablehlo.select_and_scatter"(%y, %g2, %half) <{window_dimensions = array<i64: 2, 3>, window_strides = array<i64: 2, 2>, padding = dense<[[1, 1], [1, 0]]> : tensor<2x2xi64>}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %p = stablehlo.compare GT, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    }, {
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %r = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %r : tensor<f32>
    }) : (tensor<5x6xf32>, tensor<3x3xf32>, tensor<f32>) -> tensor<5x6xf32>
    %2 = "stablehlo.select_and_scatter"(%y, %g3, %fzero) <{window_dimensions = array<i64: 3, 3>, window_strides = array<i64: 1, 3>, padding = dense<[[3, 3], [0, 2]]> : tensor<2x2xi64>}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %p = stablehlo.compare GE, %b, %a, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    }, {
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %r = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %r : tensor<f32>
    }) : (tensor<5x6xf32>, tensor<9x2xf32>, tensor<f32>) -> tensor<5x6xf32>
    %3 = "stablehlo.select_and_scatter"(%y, %g4, %fzero) <{window_dimensions = array<i64: 2, 2>, window_strides = array<i64: 1, 1>}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %p = stablehlo.compare LT, %a, %b, FLOAT : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    }, {
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %r = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %r : tensor<f32>
    }) : (tensor<5x6xf32>, tensor<4x5xf32>, tensor<f32>) -> tensor<5x6xf32>
    return %0, %1, %2, %3 : tensor<4x2xi64>, tensor<5x6xf32>, tensor<5x6xf32>, tensor<5x6xf32>
  }
}
