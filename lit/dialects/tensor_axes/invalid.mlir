// RUN: loam-opt %s --parsing-diagnostics --verify-diagnostics --split-input-file | filecheck %s

// xDSL prints each chunk's diagnostic and goes on; the CHECK lines compare the messages. The
// `expected-error` lines say where each error belongs, as MLIR's checker would read them.

// expected-error @+1 {{axis 'Batch' occurs twice}}
%0 = "test.op"() : () -> !tensor_axes.tensor<f32, [Batch: 4, Batch: 5]>
// CHECK: axis 'Batch' occurs twice in !tensor_axes.tensor<f32, [Batch: 4, Batch: 5]> with extents 4 and 5

// -----

// expected-error @+1 {{axis '(C H)' occurs twice}}
%0 = "test.op"() : () -> !tensor_axes.tensor<f32, [(C H): 4, (C  H): 6]>
// CHECK: axis '(C H)' occurs twice {{.*}} with extents 4 and 6

// -----

// expected-error @+1 {{expected an axis name (an identifier or a merge like (C H W))}}
%0 = "test.op"() : () -> !tensor_axes.tensor<f32, [A: 1, "seq-len": 4]>
// CHECK: expected an axis name (an identifier or a merge like (C H W))

// -----

// expected-error @+1 {{merged axis '(C)' needs at least two parts; write C}}
%0 = "test.op"() : () -> !tensor_axes.tensor<f32, [(C): 4]>
// CHECK: merged axis '(C)' needs at least two parts; write C

// -----

// expected-error @+1 {{merged axis '(C H C)' names a part twice}}
%0 = "test.op"() : () -> !tensor_axes.tensor<f32, [(C H C): 4]>
// CHECK: merged axis '(C H C)' names a part twice

// -----

// expected-error @+1 {{axis 'A' has negative extent -2}}
%0 = "test.op"() : () -> !tensor_axes.tensor<f32, [A: -2]>
// CHECK: axis 'A' has negative extent -2

// -----

// expected-error @+1 {{a layout rule needs a non-empty pattern}}
"test.op"() {layout = #tensor_axes.layout<["" -> [A]]>} : () -> ()
// CHECK: a layout rule needs a non-empty pattern

// -----

// expected-error @+1 {{expected a quoted glob pattern}}
"test.op"() {layout = #tensor_axes.layout<[weight -> [A]]>} : () -> ()
// CHECK: expected a quoted glob pattern
