// Hand-written StableHLO (scripts/export_jax_models.py): ops and spellings JAX 0.10 does not print
// for the models here: stablehlo.logistic, a reduce whose body is written out (its arguments
// swapped), a dot_general contracting the rhs's last dim, NE, a select in the generic form, hex
// floats (-inf, inf) in a constant, argument names in some locations only.  XLA computes the
// expected results.
module @handwritten {
  func.func public @main(%x: tensor<3x4xf32> loc("x"), %w: tensor<5x4xf32> loc("params['w']"),
                         %extra: tensor<2xf32>) -> (tensor<3x4xf32> {jax.result_info = "result['logistic']"},
                         tensor<3xf32> {jax.result_info = "result['reduce_region']"},
                         tensor<3x5xf32> {jax.result_info = "result['matmul_nk']"},
                         tensor<3x4xi1> {jax.result_info = "result['ne']"},
                         tensor<3x4xf32> {jax.result_info = "result['generic_select']"},
                         tensor<4x3xf32> {jax.result_info = "result['hex_floats']"},
                         tensor<2xf32> {jax.result_info = "result['extra']"}) {
    %0 = stablehlo.logistic %x : tensor<3x4xf32>
    %ninf = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %1 = stablehlo.reduce(%x init: %ninf) across dimensions = [1] : (tensor<3x4xf32>, tensor<f32>) -> tensor<3xf32>
     reducer(%a: tensor<f32>, %b: tensor<f32>)  {
      %m = stablehlo.maximum %b, %a : tensor<f32>
      stablehlo.return %m : tensor<f32>
    }
    %2 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [1]
           : (tensor<3x4xf32>, tensor<5x4xf32>) -> tensor<3x5xf32>
    %3 = stablehlo.compare  NE, %x, %0,  FLOAT : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xi1>
    %4 = "stablehlo.select"(%3, %x, %0) : (tensor<3x4xi1>, tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
    %5 = stablehlo.transpose %x, dims = [1, 0] : (tensor<3x4xf32>) -> tensor<4x3xf32>
    %c = stablehlo.constant dense<[[1.0, 0xFF800000, 2.0], [0x7F800000, -1.0, 0.0], [0.5, 0.25, -3.0],
                                   [4.0, -0.5, 1.5]]> : tensor<4x3xf32>
    %6 = stablehlo.minimum %5, %c : tensor<4x3xf32>
    %7 = stablehlo.abs %extra : tensor<2xf32>
    return %0, %1, %2, %3, %4, %6, %7 : tensor<3x4xf32>, tensor<3xf32>, tensor<3x5xf32>, tensor<3x4xi1>,
                                        tensor<3x4xf32>, tensor<4x3xf32>, tensor<2xf32>
  }
}
