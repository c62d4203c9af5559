// RUN: loam-opt %s -p fuse-attention | filecheck %s

// softmax(Q K^T / 8 + mask) V with keys and values [B, 2, L, 8] repeated three times each (repeat_kv) for six
// query heads: one kernel.attention reads Q, the keys and the values as they are given (no repeat, no transpose)
// and the mask; the chain and both repeats are erased, and a note names the chain's nodes.
// CHECK:       loam.notes = ["nodes 'scores', 'div', 'add', 'softmax', 'weighted': one attention kernel
// CHECK-LABEL: kernel.program "forward"
// CHECK-NEXT:  %o = kernel.attention(%q, %k, %v, %mask) {scale = 8.000000e+00 : f64, divide = 1 : i64, masked = 0 : i64, fill = 0.000000e+00 : f64, biased = 1 : i64, fused = ["scores", "div", "add", "softmax", "weighted"], node = "weighted"}
// CHECK-NEXT:  kernel.return

kernel.program "forward" (%q : !tensor_axes.tensor<f32, [B: b, (KvHeads Group): 6, Seq: s, HeadDim: 8]>, %k : !tensor_axes.tensor<f32, [B: b, KvHeads: 2, Past: l, HeadDim: 8]>, %v : !tensor_axes.tensor<f32, [B: b, KvHeads: 2, Past: l, HeadDim: 8]>, %mask : !tensor_axes.tensor<f32, [B: b, Unit: 1, Seq: s, Past: l]>) names ["q", "k", "v", "mask"] {
  %u = kernel.regroup %k {node = "unsqueeze"} : !tensor_axes.tensor<f32, [B: b, KvHeads: 2, Past: l, HeadDim: 8]> -> !tensor_axes.tensor<f32, [B: b, KvHeads: 2, Unit: 1, Past: l, HeadDim: 8]>
  %e = kernel.zip(%u) #kernel.expr<[operand 0]> {node = "expand"} : (!tensor_axes.tensor<f32, [B: b, KvHeads: 2, Unit: 1, Past: l, HeadDim: 8]>) -> !tensor_axes.tensor<f32, [B: b, KvHeads: 2, Group: 3, Past: l, HeadDim: 8]>
  %r = kernel.regroup %e {node = "reshape"} : !tensor_axes.tensor<f32, [B: b, KvHeads: 2, Group: 3, Past: l, HeadDim: 8]> -> !tensor_axes.tensor<f32, [B: b, (KvHeads Group): 6, Past: l, HeadDim: 8]>
  %t = kernel.permute %r [0, 1, 3, 2] {node = "transpose"} : !tensor_axes.tensor<f32, [B: b, (KvHeads Group): 6, Past: l, HeadDim: 8]> -> !tensor_axes.tensor<f32, [B: b, (KvHeads Group): 6, HeadDim: 8, Past: l]>
  %vu = kernel.regroup %v {node = "unsqueeze_v"} : !tensor_axes.tensor<f32, [B: b, KvHeads: 2, Past: l, HeadDim: 8]> -> !tensor_axes.tensor<f32, [B: b, KvHeads: 2, Unit: 1, Past: l, HeadDim: 8]>
  %ve = kernel.zip(%vu) #kernel.expr<[operand 0]> {node = "expand_v"} : (!tensor_axes.tensor<f32, [B: b, KvHeads: 2, Unit: 1, Past: l, HeadDim: 8]>) -> !tensor_axes.tensor<f32, [B: b, KvHeads: 2, Group: 3, Past: l, HeadDim: 8]>
  %vr = kernel.regroup %ve {node = "reshape_v"} : !tensor_axes.tensor<f32, [B: b, KvHeads: 2, Group: 3, Past: l, HeadDim: 8]> -> !tensor_axes.tensor<f32, [B: b, (KvHeads Group): 6, Past: l, HeadDim: 8]>
  %m = kernel.matmul %q, %t then #kernel.expr<[operand 0, operand 1, const 8.0 : f32, div 0 2, add 3 1]> (%mask) {fused = ["scores", "div", "add"], node = "add"} : (!tensor_axes.tensor<f32, [B: b, (KvHeads Group): 6, Seq: s, HeadDim: 8]>, !tensor_axes.tensor<f32, [B: b, (KvHeads Group): 6, HeadDim: 8, Past: l]>, !tensor_axes.tensor<f32, [B: b, Unit: 1, Seq: s, Past: l]>) -> !tensor_axes.tensor<f32, [B: b, (KvHeads Group): 6, Seq: s, Past: l]>
  %p = kernel.softmax(%m) {kind = "softmax", axes = array<i64: 3>, node = "softmax"} : (!tensor_axes.tensor<f32, [B: b, (KvHeads Group): 6, Seq: s, Past: l]>) -> !tensor_axes.tensor<f32, [B: b, (KvHeads Group): 6, Seq: s, Past: l]>
  %o = kernel.matmul %p, %vr {node = "weighted"} : (!tensor_axes.tensor<f32, [B: b, (KvHeads Group): 6, Seq: s, Past: l]>, !tensor_axes.tensor<f32, [B: b, (KvHeads Group): 6, Past: l, HeadDim: 8]>) -> !tensor_axes.tensor<f32, [B: b, (KvHeads Group): 6, Seq: s, HeadDim: 8]>
  kernel.return %o names ["y"] : !tensor_axes.tensor<f32, [B: b, (KvHeads Group): 6, Seq: s, HeadDim: 8]>
}
