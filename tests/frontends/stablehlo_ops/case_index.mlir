// stablehlo.case with an index JAX never gives (lax.switch clamps it): out of range, the last branch
// runs.  XLA computes the expected results.
module @case_index {
  func.func public @main(%i: tensor<i32> loc("i"), %x: tensor<2xf32> loc("x"))
      -> (tensor<2xf32> {jax.result_info = "result"}) {
    %0 = "stablehlo.case"(%i) ({
      %a = stablehlo.negate %x : tensor<2xf32>
      stablehlo.return %a : tensor<2xf32>
    }, {
      %b = stablehlo.add %x, %x : tensor<2xf32>
      stablehlo.return %b : tensor<2xf32>
    }, {
      %c = stablehlo.multiply %x, %x : tensor<2xf32>
      stablehlo.return %c : tensor<2xf32>
    }) : (tensor<i32>) -> tensor<2xf32>
    return %0 : tensor<2xf32>
  }
}
