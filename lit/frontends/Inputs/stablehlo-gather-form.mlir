// A gather of columns rather than rows: not the embedding form.
func.func public @main(%t: tensor<4x5xf32> loc("params['table']"), %i: tensor<3x1xi32> loc("ids")) -> tensor<4x3xf32> {
  %0 = "stablehlo.gather"(%t, %i) <{dimension_numbers = #stablehlo.gather<offset_dims = [0], collapsed_slice_dims = [1], start_index_map = [1], index_vector_dim = 1>, slice_sizes = array<i64: 4, 1>}> : (tensor<4x5xf32>, tensor<3x1xi32>) -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}
