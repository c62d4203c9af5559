// An op outside the reader's set: the error names it and its place.
func.func public @main(%x: tensor<4xf32> loc("x")) -> tensor<4xf32> {
  %0 = stablehlo.cosine %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}
