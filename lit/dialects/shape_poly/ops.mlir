// RUN: loam-opt %s | loam-opt | filecheck %s
// RUN: loam-opt %s --print-op-generic | loam-opt | filecheck %s

// Extents are polynomials printed in canonical order: highest degree first, constants last,
// and symbols that are not identifiers in quotes.

%0 = "test.op"() {e = #shape_poly.extent<1 + 2*N>} : () -> !shape_poly.tensor<f32, [4, N, 1 + N*2]>
// CHECK: %0 = "test.op"() {e = #shape_poly.extent<2*N + 1>} : () -> !shape_poly.tensor<f32, [4, N, 2*N + 1]>

%1 = "test.op"() : () -> !shape_poly.tensor<i64, []>
// CHECK-NEXT: %1 = "test.op"() : () -> !shape_poly.tensor<i64, []>

%2 = "test.op"() : () -> !shape_poly.tensor<bf16, [(N + 1)*(N - 1), "seq-len" - 1, M*N - N*M]>
// CHECK-NEXT: %2 = "test.op"() : () -> !shape_poly.tensor<bf16, [N*N - 1, "seq-len" - 1, 0]>

%3 = "test.op"() {e = #shape_poly.extent<-(S) + "past len" + S*2>} : () -> !shape_poly.tensor<f8E4M3FN, ["x.y"]>
// CHECK-NEXT: %3 = "test.op"() {e = #shape_poly.extent<S + "past len">} : () -> !shape_poly.tensor<f8E4M3FN, ["x.y"]>

shape_poly.owe N <= 1024 for "Slice node 'attn/mask_slice'"
// CHECK-NEXT: shape_poly.owe N <= 1024 for "Slice node 'attn/mask_slice'"

shape_poly.owe attention_length == S + past for "Add node 'mask'"
// CHECK-NEXT: shape_poly.owe attention_length == S + past for "Add node 'mask'"

// A derived symbol is named by its definition, which reads back as the same symbol.
%4 = "test.op"() : () -> !shape_poly.tensor<f32, [min(N, 1024), floordiv(min(8, N) + 1, 2) + 1]>
// CHECK-NEXT: %4 = "test.op"() : () -> !shape_poly.tensor<f32, [min(N, 1024), floordiv(min(8, N) + 1, 2) + 1]>

%5 = shape_poly.values [N, 2*S + 1, 768] : !shape_poly.tensor<i64, [3]>
// CHECK-NEXT: %5 = shape_poly.values [N, 2*S + 1, 768] : !shape_poly.tensor<i64, [3]>

%6 = shape_poly.values "x/shape" [N] : !shape_poly.tensor<i64, [1]>
// CHECK-NEXT: %6 = shape_poly.values "x/shape" [N] : !shape_poly.tensor<i64, [1]>
