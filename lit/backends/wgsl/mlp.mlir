// RUN: %python -m loam.backends.wgsl_module %s | filecheck %s
// RUN: %python -m loam.backends.wgsl_module %s > %t.py && %python -c "import ast, sys; t = ast.parse(open(sys.argv[1]).read()); print(sorted({a.name for n in ast.walk(t) if isinstance(n, ast.Import) for a in n.names}))" %t.py | filecheck %s --check-prefix=IMPORTS

// A product finished by bias + ReLU, then a permutation that is not a product's operand (a copy
// kernel), then a half-typed zip: the shaders and the dispatches forward records.
kernel.program "forward" (%x : !tensor_axes.tensor<f32, [Batch: N, In: 8]>) names ["x"] attributes {model = "mlp"} {
  %w = kernel.weight "fc1.weight" : !tensor_axes.tensor<f32, [In: 8, Hidden: 16]>
  %b = kernel.weight "fc1.bias" : !tensor_axes.tensor<f32, [Hidden: 16]>
  %0 = kernel.matmul %x, %w then #kernel.expr<[operand 0, operand 1, add 0 1, relu 2]>(%b) {node = "fc1"} : (!tensor_axes.tensor<f32, [Batch: N, In: 8]>, !tensor_axes.tensor<f32, [In: 8, Hidden: 16]>, !tensor_axes.tensor<f32, [Hidden: 16]>) -> !tensor_axes.tensor<f32, [Batch: N, Hidden: 16]>
  %1 = kernel.permute %0 [1, 0] {node = "t"} : !tensor_axes.tensor<f32, [Batch: N, Hidden: 16]> -> !tensor_axes.tensor<f32, [Hidden: 16, Batch: N]>
  %2 = kernel.zip(%1) #kernel.expr<[operand 0, cast 0 : f16]> {node = "half"} : (!tensor_axes.tensor<f32, [Hidden: 16, Batch: N]>) -> !tensor_axes.tensor<f16, [Hidden: 16, Batch: N]>
  kernel.return %2 names ["y"] : !tensor_axes.tensor<f16, [Hidden: 16, Batch: N]>
}

// CHECK:      """The model 'mlp', compiled by Loam: forward(weights, x) -> y.
// CHECK:      def forward(weights: "Weights", x: np.ndarray) -> np.ndarray:
// CHECK:          _key = (_env['N'],)  # the extents the activation buffers read
// The half zip's result takes the product's buffer, free once the copy has read it.
// CHECK-NEXT:     _sizes = (32*_env['N'], 64*_env['N'], 64*_env['N'])  # bytes per buffer
// CHECK-NEXT:     g = _gpu()
// CHECK-NEXT:     with g.lock:  # forward's calls from many threads take turns on the device
// No buffer may pass Loam's limit or what the device binds (4 bytes an element), checked before any is made.
// CHECK-NEXT:         _room(tuple((n // 4,) for n in _sizes), ('N',), _env, _src, min(g.max_elements, 68719476736))
// CHECK-NEXT:         _w = _resident(weights, g)
// CHECK-NEXT:         _b = g.pool(_key, _sizes)  # this binding's activation buffers, made once
// CHECK-NEXT:         g.write('x', _b[0], x)
// CHECK-NEXT:         g.begin()
// CHECK-NEXT:         g.dispatch('matmul_0', (_b[1], _b[0], _w[0], _w[1]), *_p_matmul(
// CHECK-NEXT:         g.dispatch('copy_1', (_b[2], _b[1]), *_p_permute((_env['N'], 16), (1, 0)))  # t
// CHECK-NEXT:         g.dispatch('zip_2', (_b[1], _b[2]), *_p_zip((16, _env['N']), ()))  # half
// CHECK-NEXT:         g.end()
// CHECK-NEXT:         y = g.read(_b[1], 'float16', (16, _env['N']))
// CHECK-NEXT:     return y
// CHECK:      # What forward calls: the expressions, constants and runtime pieces this model uses, copied in by Loam
// CHECK:      _SHADERS = {
// CHECK-NEXT:     'matmul_0': '@group(0) @binding(0) var<storage, read> params: array<u32>;\n@group(0) @binding(1) var<storage, read_write> out0: array<f32>;\n@group(0) @binding(2) var<storage, read> in0: array<f32>;\n@group(0) @binding(3) var<storage, read> in1: array<f32>;\n@group(0) @binding(4) var<storage, read> in2: array<f32>;
// CHECK-SAME:     var<workgroup> ta: array<array<f32, 8>, 8>;
// CHECK-SAME:     workgroupBarrier();
// CHECK-SAME:     let s2: f32 = (acc + in2[o_in2]);\n    let s3: f32 = relu_(s2);\n    out0[i] = s3;
// CHECK-NEXT:     'copy_1': '
// CHECK-SAME:     out0[dst] = in0[src];
// CHECK-NEXT:     'zip_2': '
// CHECK-SAME:     let s1: f32 = round_f16(in0[i]);\n  out0[i] = s1;
// CHECK-NEXT: }

// IMPORTS: ['json', 'numpy', 'threading', 'wgpu']
