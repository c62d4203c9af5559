// An add whose operands are declared f32 while %n is i32.
func.func public @main(%x: tensor<4xf32> loc("x"), %n: tensor<4xi32> loc("n")) -> tensor<4xf32> {
  %0 = stablehlo.add %x, %n : tensor<4xf32>
  return %0 : tensor<4xf32>
}
