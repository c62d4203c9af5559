// An op outside the reader's set (JAX's `lax.rng_bit_generator`): the error names it and its place.
func.func public @main(%x: tensor<2xui64> loc("x")) -> tensor<4xui32> {
  %s, %0 = stablehlo.rng_bit_generator %x, algorithm = DEFAULT : (tensor<2xui64>) -> (tensor<2xui64>, tensor<4xui32>)
  return %0 : tensor<4xui32>
}
