// A dot_general whose dims list is cut short.
func.func public @main(%x: tensor<4x8xf32> loc("x"), %w: tensor<8x2xf32> loc("params['w']")) -> tensor<4x2xf32> {
  %0 = stablehlo.dot_general %x, %w, contracting_dims = [1 x [0] : (tensor<4x8xf32>, tensor<8x2xf32>) -> tensor<4x2xf32>
  return %0 : tensor<4x2xf32>
}
