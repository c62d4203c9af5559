// RUN: loam-opt %s -p grouped-heads | filecheck %s

// Keys [B, 2, L, 8] repeated three times each (repeat_kv: Unsqueeze, Expand, Reshape) for six query heads:
// the queries regroup to [B, 2, 3*S, 8], multiply the keys' transpose once per group, and regroup back; the
// product's epilogue becomes a zip after it, and the repeat chain is erased.
// CHECK:       loam.notes = ["grouped heads: 1 attention product(s)
// CHECK-LABEL: kernel.program "forward"
// CHECK-NOT:   kernel.zip(%u)
// CHECK:       %[[QG:.*]] = kernel.regroup %q {node = "scores"} : {{.*}} -> !tensor_axes.tensor<f32, [B: b, KvHeads: 2, (Group Seq): 3*s, HeadDim: 8]>
// CHECK-NEXT:  %[[KT:.*]] = kernel.permute %k [0, 1, 3, 2] {node = "scores"} : {{.*}} -> !tensor_axes.tensor<f32, [B: b, KvHeads: 2, HeadDim: 8, Past: l]>
// CHECK-NEXT:  %[[P:.*]] = kernel.matmul %[[QG]], %[[KT]] {node = "scores"} : {{.*}} -> !tensor_axes.tensor<f32, [B: b, KvHeads: 2, (Group Seq): 3*s, Past: l]>
// CHECK-NEXT:  %[[R:.*]] = kernel.regroup %[[P]] {node = "scores"} : {{.*}} -> !tensor_axes.tensor<f32, [B: b, (KvHeads Group): 6, Seq: s, Past: l]>
// CHECK-NEXT:  %{{.*}} = kernel.zip(%[[R]], %mask) #kernel.expr<[operand 0, operand 1, add 0 1]> {fused = ["scores", "add"], node = "scores"}

kernel.program "forward" (%q : !tensor_axes.tensor<f32, [B: b, (KvHeads Group): 6, Seq: s, HeadDim: 8]>, %k : !tensor_axes.tensor<f32, [B: b, KvHeads: 2, Past: l, HeadDim: 8]>, %mask : !tensor_axes.tensor<f32, [B: b, Unit: 1, Seq: s, Past: l]>) names ["q", "k", "mask"] {
  %u = kernel.regroup %k {node = "unsqueeze"} : !tensor_axes.tensor<f32, [B: b, KvHeads: 2, Past: l, HeadDim: 8]> -> !tensor_axes.tensor<f32, [B: b, KvHeads: 2, Unit: 1, Past: l, HeadDim: 8]>
  %e = kernel.zip(%u) #kernel.expr<[operand 0]> {node = "expand"} : (!tensor_axes.tensor<f32, [B: b, KvHeads: 2, Unit: 1, Past: l, HeadDim: 8]>) -> !tensor_axes.tensor<f32, [B: b, KvHeads: 2, Group: 3, Past: l, HeadDim: 8]>
  %r = kernel.regroup %e {node = "reshape"} : !tensor_axes.tensor<f32, [B: b, KvHeads: 2, Group: 3, Past: l, HeadDim: 8]> -> !tensor_axes.tensor<f32, [B: b, (KvHeads Group): 6, Past: l, HeadDim: 8]>
  %t = kernel.permute %r [0, 1, 3, 2] {node = "transpose"} : !tensor_axes.tensor<f32, [B: b, (KvHeads Group): 6, Past: l, HeadDim: 8]> -> !tensor_axes.tensor<f32, [B: b, (KvHeads Group): 6, HeadDim: 8, Past: l]>
  %m = kernel.matmul %q, %t then #kernel.expr<[operand 0, operand 1, add 0 1]> (%mask) {fused = ["scores", "add"], node = "scores"} : (!tensor_axes.tensor<f32, [B: b, (KvHeads Group): 6, Seq: s, HeadDim: 8]>, !tensor_axes.tensor<f32, [B: b, (KvHeads Group): 6, HeadDim: 8, Past: l]>, !tensor_axes.tensor<f32, [B: b, Unit: 1, Seq: s, Past: l]>) -> !tensor_axes.tensor<f32, [B: b, (KvHeads Group): 6, Seq: s, Past: l]>
  kernel.return %m names ["scores"] : !tensor_axes.tensor<f32, [B: b, (KvHeads Group): 6, Seq: s, Past: l]>
}
