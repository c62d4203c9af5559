// RUN: %python -m loam.backends.numpy_module %s | filecheck %s

// forward's prologue: each input checked (a spelled axis left for later), each symbol no input
// carries alone read back from a linear axis, every spelled axis checked against its spelling, then
// the owed conditions in program order, each derived symbol computed just before the first check
// that reads it, and the derived symbols the kernels read.  A kernel.constant holding polynomials is
// computed from the bound symbols inside forward, not written as a module-level literal.

kernel.program "forward" (%k : !tensor_axes.tensor<f32, [B: 1, Past: past, D: 4]>, %m : !tensor_axes.tensor<f32, [B: 1, Total: past + 1]>, %y : !tensor_axes.tensor<f32, [Y: 2*n]>) names ["past_key", "mask", "y"] attributes {model = "owe"} {
  shape_poly.owe past + 1 <= 128 for "Slice node '/attn/Slice_3'"
  shape_poly.owe min(n, 4) + past <= 16 for "Reshape node '/Reshape'"
  shape_poly.owe n == past for "Add node '/Add'"
  %c = kernel.constant [#shape_poly.extent<min(n, 4)>, #shape_poly.extent<2*n - past>, #shape_poly.extent<floordiv(past + 1, 2)>] {node = "/Shape"} : !tensor_axes.tensor<i64, [Three: 3]>
  kernel.return %c names ["s"] : !tensor_axes.tensor<i64, [Three: 3]>
}

// CHECK:      def forward(weights: "Weights", past_key: np.ndarray, mask: np.ndarray, y: np.ndarray) -> np.ndarray:
// CHECK:          _env: dict[str, int] = {}  # each extent symbol's value
// CHECK-NEXT:     _src: dict[str, str] = {}  # the input axis that gave it
// CHECK-NEXT:     if past_key.__class__ is np.ndarray and past_key.dtype == np.float32 and past_key.ndim == 3 and past_key.shape[0] == 1 and past_key.shape[2] == 4:
// CHECK-NEXT:         _env['past'] = past_key.shape[1]
// CHECK-NEXT:         _src['past'] = 'past_key axis 1'
// CHECK-NEXT:     else:
// CHECK-NEXT:         _check_input('past_key', past_key, 'float32', (('B', 1), ('Past', 'past'), ('D', 4)), _env, _src)
// CHECK-NEXT:     if mask.__class__ is np.ndarray and mask.dtype == np.float32 and mask.ndim == 2 and mask.shape[0] == 1:
// CHECK-NEXT:         pass
// CHECK-NEXT:     else:
// CHECK-NEXT:         _check_input('mask', mask, 'float32', (('B', 1), ('Total', None)), _env, _src)
// CHECK-NEXT:     if y.__class__ is np.ndarray and y.dtype == np.float32 and y.ndim == 1:
// CHECK-NEXT:         pass
// CHECK-NEXT:     else:
// CHECK-NEXT:         _check_input('y', y, 'float32', (('Y', None),), _env, _src)
// CHECK-NEXT:     _read_back('y', 0, 'Y', y.shape[0], 'n', '2*n', 2, 0, _env, _src)
// CHECK-NEXT:     _check_spelled('mask', 1, 'Total', mask.shape[1], 'past + 1', _env['past'] + 1, ('past',), _env, _src)
// CHECK-NEXT:     _owe(_env['past'] + 1 <= 128, 'past + 1 <= 128', "Slice node '/attn/Slice_3'", ('past',), _env, _src)
// CHECK-NEXT:     _env['min(n, 4)'] = derived_extent('min', _env['n'], 4)
// CHECK-NEXT:     _owe(_env['min(n, 4)'] + _env['past'] <= 16, 'min(n, 4) + past <= 16', "Reshape node '/Reshape'", ('past', 'n'), _env, _src)
// CHECK-NEXT:     _owe(_env['n'] == _env['past'], 'n == past', "Add node '/Add'", ('past', 'n'), _env, _src)
// CHECK-NEXT:     _env['floordiv(past + 1, 2)'] = derived_extent('floordiv', _env['past'] + 1, 2)
// CHECK-NEXT:     s = np.array([_env['min(n, 4)'], 2*_env['n'] - _env['past'], _env['floordiv(past + 1, 2)']], dtype=np.int64).reshape((3,))  # /Shape
// CHECK-NEXT:     return s
// CHECK-NOT:  _CONST_0 =
// CHECK:      def _owe(
// CHECK:      def derived_extent(
