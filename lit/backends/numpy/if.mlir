// RUN: %python -m loam.backends.numpy_module %s | filecheck %s
// RUN: %python -m loam.backends.numpy_module %s > %t.py && %python -c "import ast, sys; ast.parse(open(sys.argv[1]).read())" %t.py

// kernel.if prints as `if`/`else` over the one-element condition.  Each block starts with the owed
// conditions only its branch relies on, the derived symbols they and its kernels read computed
// inside it (a branch not taken computes nothing), then its kernels, and ends assigning the If's
// results from what it yields, so the results are bound after the If whichever way it went.  A
// nested If nests.  A length only the If's result has (`y[0]`: the branches give it differently) is
// bound from the result after the If, because a later kernel reads it; an owed condition reading it
// is checked right there, before that kernel.

kernel.program "forward" (%x : !tensor_axes.tensor<f32, [N: N, D: 4]>, %c : !tensor_axes.tensor<bool, [C: 1]>, %d : !tensor_axes.tensor<bool, []>) names ["x", "c", "d"] attributes {model = "branches"} {
  shape_poly.owe N <= 64 for "Add node '/top'"
  shape_poly.owe "y[0]" <= 32 for "Reshape node '/after'"
  %y = "kernel.if"(%c) <{node = "/grow"}> ({
    shape_poly.owe min(N, 16) == N for "Where node '/then/where'"
    %s = kernel.constant [#shape_poly.extent<min(N, 16)>, #shape_poly.extent<floordiv(N, 2)>] {node = "/then/Shape"} : !tensor_axes.tensor<i64, [Two: 2]>
    %t = kernel.concat(%x, %x) {axis = 0 : i64, node = "/then/concat"} : (!tensor_axes.tensor<f32, [N: N, D: 4]>, !tensor_axes.tensor<f32, [N: N, D: 4]>) -> !tensor_axes.tensor<f32, [T: 2*N, D: 4]>
    kernel.yield %t : !tensor_axes.tensor<f32, [T: 2*N, D: 4]>
  }, {
    %z = "kernel.if"(%d) <{node = "/else/inner"}> ({
      %n = kernel.zip(%x) #kernel.expr<[operand 0, neg 0]> {node = "/else/inner/neg"} : (!tensor_axes.tensor<f32, [N: N, D: 4]>) -> !tensor_axes.tensor<f32, [N: N, D: 4]>
      kernel.yield %n : !tensor_axes.tensor<f32, [N: N, D: 4]>
    }, {
      kernel.yield %x : !tensor_axes.tensor<f32, [N: N, D: 4]>
    }) : (!tensor_axes.tensor<bool, []>) -> !tensor_axes.tensor<f32, [N: N, D: 4]>
    kernel.yield %z : !tensor_axes.tensor<f32, [N: N, D: 4]>
  }) : (!tensor_axes.tensor<bool, [C: 1]>) -> !tensor_axes.tensor<f32, [Y: "y[0]", D: 4]>
  %r = kernel.regroup %y {node = "/after"} : !tensor_axes.tensor<f32, [Y: "y[0]", D: 4]> -> !tensor_axes.tensor<f32, [Y: "y[0]", U: 1, D: 4]>
  kernel.return %r names ["r"] : !tensor_axes.tensor<f32, [Y: "y[0]", U: 1, D: 4]>
}

// CHECK:      def forward(weights: "Weights", x: np.ndarray, c: np.ndarray, d: np.ndarray) -> np.ndarray:
// CHECK:          _check_input('d', d, 'bool', (), _env, _src)
// CHECK-NEXT:     _owe(_env['N'] <= 64, 'N <= 64', "Add node '/top'", ('N',), _env, _src)
// CHECK-NEXT:     if bool(np.asarray(c).reshape(-1)[0]):  # /grow
// CHECK-NEXT:         _env['min(N, 16)'] = derived_extent('min', _env['N'], 16)
// CHECK-NEXT:         _owe(_env['min(N, 16)'] == _env['N'], 'min(N, 16) == N', "Where node '/then/where'", ('N',), _env, _src)
// CHECK-NEXT:         _env['floordiv(N, 2)'] = derived_extent('floordiv', _env['N'], 2)
// CHECK-NEXT:         s = np.array([_env['min(N, 16)'], _env['floordiv(N, 2)']], dtype=np.int64).reshape((2,))  # /then/Shape
// CHECK-NEXT:         t = kernel_concat(x, x, axis=0)  # /then/concat
// CHECK-NEXT:         y = t
// CHECK-NEXT:     else:
// CHECK-NEXT:         if bool(np.asarray(d).reshape(-1)[0]):  # /else/inner
// CHECK-NEXT:             n = _zip_0(x)  # /else/inner/neg
// CHECK-NEXT:             z = n
// CHECK-NEXT:         else:
// CHECK-NEXT:             z = x
// CHECK-NEXT:         y = z
// CHECK-NEXT:     _env['y[0]'] = y.shape[0]  # the length If node '/grow' gave
// CHECK-NEXT:     _src['y[0]'] = "If node '/grow'"
// CHECK-NEXT:     _owe(_env['y[0]'] <= 32, '"y[0]" <= 32', "Reshape node '/after'", ('y[0]',), _env, _src)
// CHECK-NEXT:     r = y.reshape((_env['y[0]'], 1, 4))  # /after
// CHECK-NEXT:     return r
