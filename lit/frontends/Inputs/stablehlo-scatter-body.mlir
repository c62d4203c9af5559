// A scatter whose body subtracts the update: no ONNX ScatterND reduction does that.
func.func public @main(%x: tensor<4x5xf32> loc("x"), %i: tensor<3x1xi32> loc("ids"), %u: tensor<3x5xf32> loc("u")) -> tensor<4x5xf32> {
  %0 = "stablehlo.scatter"(%x, %i, %u) <{scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.subtract %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }) : (tensor<4x5xf32>, tensor<3x1xi32>, tensor<3x5xf32>) -> tensor<4x5xf32>
  return %0 : tensor<4x5xf32>
}
