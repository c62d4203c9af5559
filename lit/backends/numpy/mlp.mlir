// RUN: %python -m loam.backends.numpy_module %s | filecheck %s
// RUN: %python -m loam.backends.numpy_module %s > %t.py && %python -c "import ast, sys; t = ast.parse(open(sys.argv[1]).read()); print(sorted({a.name for n in ast.walk(t) if isinstance(n, ast.Import) for a in n.names}))" %t.py | filecheck %s --check-prefix=IMPORTS

kernel.program "forward" (%x : !tensor_axes.tensor<f32, [Batch: N, In: 8]>) names ["x"] attributes {model = "mlp"} {
  %w = kernel.weight "fc1.weight" : !tensor_axes.tensor<f32, [In: 8, Hidden: 16]>
  %b = kernel.weight "fc1.bias" : !tensor_axes.tensor<f32, [Hidden: 16]>
  %0 = kernel.matmul %x, %w {node = "fc1"} : (!tensor_axes.tensor<f32, [Batch: N, In: 8]>, !tensor_axes.tensor<f32, [In: 8, Hidden: 16]>) -> !tensor_axes.tensor<f32, [Batch: N, Hidden: 16]>
  %1 = kernel.zip(%0, %b) #kernel.expr<[operand 0, operand 1, add 0 1, relu 2]> {node = "fc1"} : (!tensor_axes.tensor<f32, [Batch: N, Hidden: 16]>, !tensor_axes.tensor<f32, [Hidden: 16]>) -> !tensor_axes.tensor<f32, [Batch: N, Hidden: 16]>
  kernel.return %1 names ["y"] : !tensor_axes.tensor<f32, [Batch: N, Hidden: 16]>
}

// CHECK:      """The model 'mlp', compiled by Loam: forward(weights, x) -> y.
// CHECK:      import numpy as np
// CHECK-NOT:  def _sigmoid(
// CHECK:      class Batch:
// CHECK-NOT:  EXTENT
// CHECK:      class In:
// CHECK:          EXTENT = 8
// CHECK:      class Hidden:
// CHECK:          EXTENT = 16
// The zip runs in the product's buffer (no other reader): both steps write into out.
// The model first: its axes, Weights and forward; then, under a banner, what forward calls.
// CHECK:      class Weights:
// CHECK:              ('fc1.weight', 'fc1_weight', 'float32', (('In', 8), ('Hidden', 16))),
// CHECK:      def forward(weights: "Weights", x: np.ndarray) -> np.ndarray:
// CHECK:          _check_input('x', x, 'float32', (('Batch', 'N'), ('In', 8)), _env, _src)
// CHECK-NEXT:     fc1 = np.matmul(x, weights.fc1_weight)  # fc1
// CHECK-NEXT:     y = _zip_0(fc1, weights.fc1_bias, out=fc1)  # fc1
// CHECK-NEXT:     return y
// CHECK:      # What forward calls: the expressions, constants and runtime pieces this model uses, copied in by Loam
// CHECK:      def _zip_0(a0: np.ndarray, a1: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
// CHECK-NEXT:     """#kernel.expr<[operand 0, operand 1, add 0 1, relu 2]>; operand 0 arrives in out; steps 2, 3 write into out."""
// CHECK-NEXT:     s2 = np.add(a0, a1, out=out)
// CHECK-NEXT:     return _relu(s2, out=s2)
// The module carries only what this model reaches: no name rules, no row reordering, no packed blocks.
// CHECK-NOT:  def _packed_blocks(
// CHECK-NOT:  def graph_name_of(
// CHECK-NOT:  def _rotary_rows(

// IMPORTS: ['json', 'numpy']
