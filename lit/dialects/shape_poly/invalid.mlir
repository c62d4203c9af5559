// RUN: loam-opt %s --parsing-diagnostics --verify-diagnostics --split-input-file | filecheck %s

// xDSL prints each chunk's diagnostic and goes on; the CHECK lines compare the messages. The
// `expected-error` lines say where each error belongs, as MLIR's checker would read them.

// expected-error @+1 {{unknown element type 'f33'}}
%0 = "test.op"() : () -> !shape_poly.tensor<f33, [4]>
// CHECK: unknown element type 'f33'

// -----

// expected-error @+1 {{!shape_poly.tensor: axis 1 has negative extent -3}}
%0 = "test.op"() : () -> !shape_poly.tensor<f32, [4, -3]>
// CHECK: !shape_poly.tensor: axis 1 has negative extent -3

// -----

// expected-error @+1 {{expected an integer, a symbol, '-' or '(' in a polynomial}}
%0 = "test.op"() : () -> !shape_poly.tensor<f32, [N +]>
// CHECK: expected an integer, a symbol, '-' or '(' in a polynomial

// -----

// expected-error @+1 {{symbol 'N.x' must be quoted: "N.x"}}
%0 = "test.op"() : () -> !shape_poly.tensor<f32, [N.x]>
// CHECK: symbol 'N.x' must be quoted: "N.x"

// -----

// expected-error @+1 {{expected ')' to close the parenthesis}}
%0 = "test.op"() {e = #shape_poly.extent<(N + 1>} : () -> ()
// CHECK: expected ')' to close the parenthesis

// -----

// expected-error @+1 {{shape_poly.owe 'N <= 1024' must name what relies on it}}
shape_poly.owe N <= 1024 for ""
// CHECK: shape_poly.owe 'N <= 1024' must name what relies on it

// -----

// expected-error @+1 {{min takes 2 operands, got 1}}
%0 = "test.op"() : () -> !shape_poly.tensor<f32, [min(N)]>
// CHECK: min takes 2 operands, got 1
