// The generic form spells the operand types out, so the add itself is ill-typed.
"func.func"() <{function_type = (tensor<4xf32>, tensor<4xi32>) -> tensor<4xf32>, sym_name = "main"}> ({
^bb0(%x: tensor<4xf32>, %n: tensor<4xi32>):
  %0 = "stablehlo.add"(%x, %n) : (tensor<4xf32>, tensor<4xi32>) -> tensor<4xf32>
  "func.return"(%0) : (tensor<4xf32>) -> ()
}) : () -> ()
