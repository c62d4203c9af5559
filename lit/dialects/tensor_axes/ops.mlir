// RUN: loam-opt %s | loam-opt | filecheck %s
// RUN: loam-opt %s --print-op-generic | loam-opt | filecheck %s

// Named axes with polynomial extents; a merged axis is named by its parts, spaces normalized.

%0 = "test.op"() : () -> !tensor_axes.tensor<f32, [Batch: N, Seq: S, Hidden: 768]>
// CHECK: %0 = "test.op"() : () -> !tensor_axes.tensor<f32, [Batch: N, Seq: S, Hidden: 768]>

%1 = "test.op"() : () -> !tensor_axes.tensor<f32, [Batch: N, ( C  H W ): 784]>
// CHECK-NEXT: %1 = "test.op"() : () -> !tensor_axes.tensor<f32, [Batch: N, (C H W): 784]>

%2 = "test.op"() : () -> !tensor_axes.tensor<i64, []>
// CHECK-NEXT: %2 = "test.op"() : () -> !tensor_axes.tensor<i64, []>

%3 = "test.op"() : () -> !tensor_axes.tensor<bf16, [Total: "past len" + S, (H W): H*W]>
// CHECK-NEXT: %3 = "test.op"() : () -> !tensor_axes.tensor<bf16, [Total: S + "past len", (H W): H*W]>

"test.op"() {axis = #tensor_axes.axis<(C H): 2*N>, layout = #tensor_axes.layout<["*.weight" -> [In, Out], "mask" in "decoder" -> [Seq, (C H W)], "scale" -> []]>, none = #tensor_axes.layout<[]>} : () -> ()
// CHECK-NEXT: "test.op"() {axis = #tensor_axes.axis<(C H): 2*N>, layout = #tensor_axes.layout<["*.weight" -> [In, Out], "mask" in "decoder" -> [Seq, (C H W)], "scale" -> []]>, none = #tensor_axes.layout<[]>} : () -> ()
