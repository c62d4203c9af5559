// RUN: LOAM_ROUNDTRIP
// RUN: loam-opt %s | loam-opt | filecheck %s
// RUN: loam-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

kernel.program "forward" (%x : !tensor_axes.tensor<f32, [Batch: 4, In: 8]>) names ["x"] attributes {model = "mlp"} {
  %w = kernel.weight "fc1.weight" : !tensor_axes.tensor<f32, [In: 8, Hidden: 16]>
  %b = kernel.weight "fc1.bias" : !tensor_axes.tensor<f32, [Hidden: 16]>
  %0 = kernel.matmul %x, %w {node = "fc1"} : (!tensor_axes.tensor<f32, [Batch: 4, In: 8]>, !tensor_axes.tensor<f32, [In: 8, Hidden: 16]>) -> !tensor_axes.tensor<f32, [Batch: 4, Hidden: 16]>
  %1 = kernel.zip(%0, %b) #kernel.expr<[operand 0, operand 1, add 0 1, const -1.5e-05 : f32, max 2 3, relu 4]> {node = "fc1"} : (!tensor_axes.tensor<f32, [Batch: 4, Hidden: 16]>, !tensor_axes.tensor<f32, [Hidden: 16]>) -> !tensor_axes.tensor<f32, [Batch: 4, Hidden: 16]>
  %2 = kernel.permute %1 [1, 0] {node = "t"} : !tensor_axes.tensor<f32, [Batch: 4, Hidden: 16]> -> !tensor_axes.tensor<f32, [Hidden: 16, Batch: 4]>
  %3 = kernel.regroup %2 {node = "flat"} : !tensor_axes.tensor<f32, [Hidden: 16, Batch: 4]> -> !tensor_axes.tensor<f32, [(Hidden Batch): 64]>
  %4 = kernel.cast %3 {node = "c"} : !tensor_axes.tensor<f32, [(Hidden Batch): 64]> -> !tensor_axes.tensor<f16, [(Hidden Batch): 64]>
  kernel.return %4, %1 names ["y", "h"] : !tensor_axes.tensor<f16, [(Hidden Batch): 64]>, !tensor_axes.tensor<f32, [Batch: 4, Hidden: 16]>
}

// CHECK:      kernel.program "forward" (%x: !tensor_axes.tensor<f32, [Batch: 4, In: 8]>) names ["x"] attributes {model = "mlp"} {
// CHECK-NEXT:   %w = kernel.weight "fc1.weight" : !tensor_axes.tensor<f32, [In: 8, Hidden: 16]>
// CHECK-NEXT:   %b = kernel.weight "fc1.bias" : !tensor_axes.tensor<f32, [Hidden: 16]>
// CHECK-NEXT:   %0 = kernel.matmul %x, %w {node = "fc1"} : (!tensor_axes.tensor<f32, [Batch: 4, In: 8]>, !tensor_axes.tensor<f32, [In: 8, Hidden: 16]>) -> !tensor_axes.tensor<f32, [Batch: 4, Hidden: 16]>
// CHECK-NEXT:   %1 = kernel.zip(%0, %b) #kernel.expr<[operand 0, operand 1, add 0 1, const -1.5e-05 : f32, max 2 3, relu 4]> {node = "fc1"}
// CHECK-NEXT:   %2 = kernel.permute %1 [1, 0] {node = "t"} : !tensor_axes.tensor<f32, [Batch: 4, Hidden: 16]> -> !tensor_axes.tensor<f32, [Hidden: 16, Batch: 4]>
// CHECK-NEXT:   %3 = kernel.regroup %2 {node = "flat"}
// CHECK-NEXT:   %4 = kernel.cast %3 {node = "c"}
// CHECK-NEXT:   kernel.return %4, %1 names ["y", "h"]

// GENERIC: "kernel.program"() <{sym_name = "forward", input_names = ["x"], model = "mlp"}>
// GENERIC: "kernel.zip"(%0, %b) <{expr = #kernel.expr<[operand 0, operand 1, add 0 1, const -1.5e-05 : f32, max 2 3, relu 4]>, node = "fc1"}>
// GENERIC: "kernel.permute"(%1) <{perm = array<i64: 1, 0>, node = "t"}>
