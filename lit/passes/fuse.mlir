// RUN: loam-opt %s -p 'fuse' --split-input-file 2>/dev/null | filecheck %s
// RUN: loam-opt %s -p 'fuse{objective=memory report=-}' --split-input-file 2>&1 >/dev/null | filecheck %s --check-prefix=REPORT
// RUN: loam-opt %s -p 'fuse{report=- format=json}' --split-input-file 2>&1 >/dev/null | filecheck %s --check-prefix=JSON
// RUN: loam-opt %s -p 'fuse{report=- format=dot}' --split-input-file 2>&1 >/dev/null | filecheck %s --check-prefix=DOT

// A chain Add -> Relu -> Mul whose first result is also an output: Add stays (its result is
// written anyway), Relu and Mul become one zip; the fused zip keeps Mul's node and lists both.
// CHECK-LABEL: kernel.program "chain"
// CHECK:       %a = kernel.zip(%x, %y) #kernel.expr<[operand 0, operand 1, add 0 1]> {node = "add"}
// CHECK-NEXT:  %m = kernel.zip(%y, %a) #kernel.expr<[operand 0, operand 1, relu 1, mul 2 0]> {fused = ["relu", "mul"], node = "mul"}
// CHECK-NEXT:  kernel.return %a, %m
// REPORT:      fusion report (objective memory): 3 nodes, 1 groups
// REPORT-NEXT: node  op   decision       reason               bytes saved
// REPORT-NEXT: add   zip  kept alone     result is an output  0
// REPORT-NEXT: relu  zip  fused into g1  elementwise chain    32
// REPORT-NEXT: mul   zip  fused into g1  elementwise chain    0
// REPORT-NEXT: group g1: relu, mul
// JSON:      "node": "add",
// JSON-NEXT: "op": "zip",
// JSON-NEXT: "group": null,
// JSON-NEXT: "decision": "kept alone",
// JSON-NEXT: "reason": "result is an output",
// JSON-NEXT: "bytes_saved": 0
// DOT-LABEL: digraph fusion {
// DOT:       subgraph "cluster_g1" {
// DOT:       "relu" [label="relu\nzip"];
// DOT:       "mul" [label="mul\nzip"];
// DOT:       "add" [label="add\nzip"];
// DOT:       "add" -> "relu";
// DOT:       "relu" -> "mul";
builtin.module {
  kernel.program "chain" (%x: !tensor_axes.tensor<f32, [N: 2, C: 2]>, %y: !tensor_axes.tensor<f32, [N: 2, C: 2]>) names ["x", "y"] {
    %a = kernel.zip(%x, %y) #kernel.expr<[operand 0, operand 1, add 0 1]> {node = "add"} : (!tensor_axes.tensor<f32, [N: 2, C: 2]>, !tensor_axes.tensor<f32, [N: 2, C: 2]>) -> !tensor_axes.tensor<f32, [N: 2, C: 2]>
    %r = kernel.zip(%a) #kernel.expr<[operand 0, relu 0]> {node = "relu"} : (!tensor_axes.tensor<f32, [N: 2, C: 2]>) -> !tensor_axes.tensor<f32, [N: 2, C: 2]>
    %m = kernel.zip(%r, %y) #kernel.expr<[operand 0, operand 1, mul 0 1]> {node = "mul"} : (!tensor_axes.tensor<f32, [N: 2, C: 2]>, !tensor_axes.tensor<f32, [N: 2, C: 2]>) -> !tensor_axes.tensor<f32, [N: 2, C: 2]>
    kernel.return %a, %m names ["a", "m"] : !tensor_axes.tensor<f32, [N: 2, C: 2]>, !tensor_axes.tensor<f32, [N: 2, C: 2]>
  }
}

// -----

// A producer read by a zip and a reduction stays; one broadcast by its consumer stays; one feeding
// a reduction stays; a symbolic extent gives the bytes saved as a polynomial.
// CHECK-LABEL: kernel.program "refusals"
// CHECK:       %e = kernel.zip(%x) #kernel.expr<[operand 0, exp 0]> {node = "exp"}
// CHECK:       %n = kernel.zip(%e) #kernel.expr<[operand 0, sigmoid 0, neg 1]> {fused = ["sig", "neg"], node = "neg"}
// CHECK:       %h = kernel.zip(%v)
// CHECK:       %b = kernel.zip(%h, %w)
// REPORT:      fusion report (objective memory): 8 nodes, 1 groups
// REPORT-NEXT: node  op      decision       reason                    bytes saved
// REPORT-NEXT: exp   zip     kept alone     producer has 2 consumers  0
// REPORT-NEXT: sig   zip     fused into g1  elementwise chain         16*s
// REPORT-NEXT: neg   zip     fused into g1  elementwise chain         0
// REPORT-NEXT: sum   reduce  kept alone     reduction boundary        0
// REPORT-NEXT: half  zip     kept alone     broadcast changes extent  0
// REPORT-NEXT: bmul  zip     kept alone     result is an output       0
// REPORT-NEXT: sq    zip     kept alone     reduction boundary        0
// REPORT-NEXT: max   reduce  kept alone     reduction boundary        0
// REPORT-NEXT: group g1: sig, neg
builtin.module {
  kernel.program "refusals" (%x: !tensor_axes.tensor<f32, [R: 2, S: s]>, %v: !tensor_axes.tensor<f32, [C: 3]>, %w: !tensor_axes.tensor<f32, [R: 2, C: 3]>) names ["x", "v", "w"] {
    %e = kernel.zip(%x) #kernel.expr<[operand 0, exp 0]> {node = "exp"} : (!tensor_axes.tensor<f32, [R: 2, S: s]>) -> !tensor_axes.tensor<f32, [R: 2, S: s]>
    %g = kernel.zip(%e) #kernel.expr<[operand 0, sigmoid 0]> {node = "sig"} : (!tensor_axes.tensor<f32, [R: 2, S: s]>) -> !tensor_axes.tensor<f32, [R: 2, S: s]>
    %n = kernel.zip(%g) #kernel.expr<[operand 0, neg 0]> {node = "neg"} : (!tensor_axes.tensor<f32, [R: 2, S: s]>) -> !tensor_axes.tensor<f32, [R: 2, S: s]>
    %t = kernel.reduce(%e) {kind = "sum", axes = array<i64: 0>, keepdims = 0 : i64, node = "sum"} : (!tensor_axes.tensor<f32, [R: 2, S: s]>) -> !tensor_axes.tensor<f32, [S: s]>
    %h = kernel.zip(%v) #kernel.expr<[operand 0, const 0.5 : f32, mul 0 1]> {node = "half"} : (!tensor_axes.tensor<f32, [C: 3]>) -> !tensor_axes.tensor<f32, [C: 3]>
    %b = kernel.zip(%h, %w) #kernel.expr<[operand 0, operand 1, mul 0 1]> {node = "bmul"} : (!tensor_axes.tensor<f32, [C: 3]>, !tensor_axes.tensor<f32, [R: 2, C: 3]>) -> !tensor_axes.tensor<f32, [R: 2, C: 3]>
    %q = kernel.zip(%w) #kernel.expr<[operand 0, operand 0, mul 0 1]> {node = "sq"} : (!tensor_axes.tensor<f32, [R: 2, C: 3]>) -> !tensor_axes.tensor<f32, [R: 2, C: 3]>
    %m = kernel.reduce(%q) {kind = "max", axes = array<i64: 0>, keepdims = 0 : i64, node = "max"} : (!tensor_axes.tensor<f32, [R: 2, C: 3]>) -> !tensor_axes.tensor<f32, [C: 3]>
    kernel.return %n, %t, %b, %m names ["n", "t", "b", "m"] : !tensor_axes.tensor<f32, [R: 2, S: s]>, !tensor_axes.tensor<f32, [S: s]>, !tensor_axes.tensor<f32, [R: 2, C: 3]>, !tensor_axes.tensor<f32, [C: 3]>
  }
}

// -----

// Epilogues: the bias + GELU-like chain after a product becomes the product's epilogue (operand 0
// is the product, the bias an extra); a product that casts in its zip keeps the zip apart, and so
// does a product whose zip is reduced after a broadcast.
// CHECK-LABEL: kernel.program "epilogue"
// CHECK:       %t = kernel.matmul %x, %w then #kernel.expr<[operand 0, operand 1, add 0 1, tanh 2]>(%b) {fused = ["mm", "bias", "tanh"], node = "tanh"}
// CHECK:       %q = kernel.matmul %x, %w {node = "mm2"}
// CHECK-NEXT:  %c = kernel.zip(%q) #kernel.expr<[operand 0, cast 0 : f16]> {node = "cast"}
// REPORT:      fusion report (objective memory): 5 nodes, 1 groups
// REPORT-NEXT: node  op      decision       reason                         bytes saved
// REPORT-NEXT: mm    matmul  fused into g1  epilogue into product          48
// REPORT-NEXT: bias  zip     fused into g1  epilogue into product          48
// REPORT-NEXT: tanh  zip     fused into g1  epilogue into product          0
// REPORT-NEXT: mm2   matmul  kept alone     epilogue changes element type  0
// REPORT-NEXT: cast  zip     kept alone     result is an output            0
// REPORT-NEXT: group g1: mm, bias, tanh
builtin.module {
  kernel.program "epilogue" (%x: !tensor_axes.tensor<f32, [R: 2, K: 4]>, %w: !tensor_axes.tensor<f32, [K: 4, C: 3]>, %b: !tensor_axes.tensor<f32, [C: 3]>) names ["x", "w", "b"] {
    %p = kernel.matmul %x, %w {node = "mm"} : (!tensor_axes.tensor<f32, [R: 2, K: 4]>, !tensor_axes.tensor<f32, [K: 4, C: 3]>) -> !tensor_axes.tensor<f32, [R: 2, C: 3]>
    %a = kernel.zip(%p, %b) #kernel.expr<[operand 0, operand 1, add 0 1]> {node = "bias"} : (!tensor_axes.tensor<f32, [R: 2, C: 3]>, !tensor_axes.tensor<f32, [C: 3]>) -> !tensor_axes.tensor<f32, [R: 2, C: 3]>
    %t = kernel.zip(%a) #kernel.expr<[operand 0, tanh 0]> {node = "tanh"} : (!tensor_axes.tensor<f32, [R: 2, C: 3]>) -> !tensor_axes.tensor<f32, [R: 2, C: 3]>
    %q = kernel.matmul %x, %w {node = "mm2"} : (!tensor_axes.tensor<f32, [R: 2, K: 4]>, !tensor_axes.tensor<f32, [K: 4, C: 3]>) -> !tensor_axes.tensor<f32, [R: 2, C: 3]>
    %c = kernel.zip(%q) #kernel.expr<[operand 0, cast 0 : f16]> {node = "cast"} : (!tensor_axes.tensor<f32, [R: 2, C: 3]>) -> !tensor_axes.tensor<f16, [R: 2, C: 3]>
    kernel.return %t, %c names ["t", "c"] : !tensor_axes.tensor<f32, [R: 2, C: 3]>, !tensor_axes.tensor<f16, [R: 2, C: 3]>
  }
}
