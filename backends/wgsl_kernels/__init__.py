"""WGSL kernels, one module per family: the shader source each kernel op prints as, and the runtime
function computing its parameters and launch size (`_p_NAME`, copied into the generated module).

The contract every kernel keeps (`common.header`):
- binding 0 is `params: array<u32>`: the run-time numbers (extents, strides, offsets) the
  kernel's `_p_NAME(shapes, **params)` returns, in the order the shader reads them; signed values
  travel as their two's-complement bits (`bitcast<i32>(params[k])`);
- bindings 1.. are the results (`read_write`), then the operands (`read`), in the op's order;
- `@workgroup_size(64)`; the launch is `grid` workgroups laid out by `wgsl_runtime._Gpu.dispatch`
  as x + y * nwg.x, so a kernel reads its workgroup as `wid.y * nwg.x + wid.x`;
- device element types: f32 (also holding f16 and bf16 values, rounded by `round_f16`/`round_bf16`
  where the result is a half, and float8 and float4 values, which only the `narrow` family's casts and
  quantization make), i32 (every integer type, 2- and 4-bit ones included), u32 (bool).
"""
