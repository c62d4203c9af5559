// RUN: loam-opt %s -p differentiate | filecheck %s

// y = relu(x @ W + b): the program gains the upstream gradient `grad.y` as an input and returns the
// weights' gradients after y.  Relu's clause selects the gradient where its argument was positive; the
// add passes it on as it is; the bias, which the add broadcast over Batch, gets it summed over Batch;
// W gets x^T @ g.  No gradient of x is computed: none was asked for.
// CHECK-LABEL: kernel.program "forward"
// CHECK-SAME:  (%x: !tensor_axes.tensor<f32, [Batch: 4, In: 8]>, %[[G:.*]]: !tensor_axes.tensor<f32, [Batch: 4, Out: 3]>) names ["x", "grad.y"]
// CHECK:       %[[RELU:.*]] = kernel.zip(%h, %[[G]]) #kernel.expr<[operand 0, operand 1, const 0.0 : f32, greater 0 2, select 3 1 2]> {node = "act.grad"}
// CHECK-NEXT:  %[[B:.*]] = kernel.reduce(%[[RELU]]) {kind = "sum", axes = array<i64: 0>, keepdims = 0 : i64, node = "bias.grad_unbroadcast"}
// CHECK-NEXT:  %[[XT:.*]] = kernel.permute %x [1, 0] {node = "prod.grad"}
// CHECK-NEXT:  %[[W:.*]] = kernel.matmul %[[XT]], %[[RELU]] {node = "prod.grad"} : {{.*}} -> !tensor_axes.tensor<f32, [In: 8, Out: 3]>
// CHECK-NEXT:  kernel.return %y, %[[W]], %[[B]] names ["y", "grad.w", "grad.b"]

kernel.program "forward" (%x : !tensor_axes.tensor<f32, [Batch: 4, In: 8]>) names ["x"] {
  %w = kernel.weight "w" : !tensor_axes.tensor<f32, [In: 8, Out: 3]>
  %b = kernel.weight "b" : !tensor_axes.tensor<f32, [Out: 3]>
  %p = kernel.matmul %x, %w {node = "prod"} : (!tensor_axes.tensor<f32, [Batch: 4, In: 8]>, !tensor_axes.tensor<f32, [In: 8, Out: 3]>) -> !tensor_axes.tensor<f32, [Batch: 4, Out: 3]>
  %h = kernel.zip(%p, %b) #kernel.expr<[operand 0, operand 1, add 0 1]> {node = "bias"} : (!tensor_axes.tensor<f32, [Batch: 4, Out: 3]>, !tensor_axes.tensor<f32, [Out: 3]>) -> !tensor_axes.tensor<f32, [Batch: 4, Out: 3]>
  %y = kernel.zip(%h) #kernel.expr<[operand 0, relu 0]> {node = "act"} : (!tensor_axes.tensor<f32, [Batch: 4, Out: 3]>) -> !tensor_axes.tensor<f32, [Batch: 4, Out: 3]>
  kernel.return %y names ["y"] : !tensor_axes.tensor<f32, [Batch: 4, Out: 3]>
}
