// The runtime a browser module carries (`loam build --target browser`): its errors and tensors, the
// forward prologue's checks, the kernels' parameter functions, the WebGPU device and the weights'
// loader.  `loam.backends.browser_module` copies this file into every model.js after the model's own
// part, so the module imports nothing; it runs where WebGPU does (a browser, Node with the `webgpu`
// package).  Each function below mirrors the Python piece of the same name in `loam.runtime` or
// `loam.backends.wgsl_kernels` (the same checks, the same messages, the same kernel parameters);
// tests/backends/browser/ holds the two to the same numbers.

export class ShapeError extends Error {
  constructor(message) { super(message); this.name = "ShapeError"; }
}

export class LoadError extends Error {
  constructor(message) { super(message); this.name = "LoadError"; }
}

export class DeviceError extends Error {
  constructor(message) { super(message); this.name = "DeviceError"; }
}

// -- tensors -------------------------------------------------------------------------------------

// Each host dtype's typed array (half floats travel as their 16 bits; bool as one byte).
const ARRAYS = {
  float32: Float32Array, float16: Uint16Array, bfloat16: Uint16Array, int64: BigInt64Array,
  int32: Int32Array, int16: Int16Array, int8: Int8Array, uint8: Uint8Array, uint16: Uint16Array,
  uint32: Uint32Array, bool: Uint8Array,
};

/** A tensor: its dtype (numpy's name), its elements row-major in a typed array, its extents. */
export class Tensor {
  constructor(dtype, data, shape) {
    this.dtype = dtype;
    this.data = data;
    this.shape = Array.from(shape);
  }
  get size() { return _prod(this.shape); }
}

/** A new tensor of `dtype` holding `values` (numbers, or BigInts for int64), shaped `shape`. */
export function tensor(dtype, values, shape) {
  const Kind = ARRAYS[dtype];
  if (Kind === undefined) throw new ShapeError(`dtype ${dtype} is not one a browser module reads`);
  const data = Kind === BigInt64Array ? BigInt64Array.from(values, (v) => BigInt(v)) : Kind.from(values);
  return new Tensor(dtype, data, shape ?? [data.length]);
}

/** The product of `xs` (a tensor's element count from its extents). */
function _prod(xs) { return xs.reduce((a, b) => a * b, 1); }

function _dtypeOf(value) {
  if (typeof value.dtype === "string") return value.dtype;
  for (const [name, Kind] of Object.entries(ARRAYS)) if (value.data instanceof Kind) return name;
  return undefined;
}

function _describe(value) {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an Array";
  if (typeof value !== "object") return typeof value;
  return value.constructor?.name ?? "an object";
}

/** Whether `value` is a well-formed tensor: a typed array of its dtype's kind, as many elements as its extents give. */
function _isTensor(value) {
  if (value === null || typeof value !== "object" || !Array.isArray(value.shape)) return false;
  const dtype = _dtypeOf(value);
  const Kind = ARRAYS[dtype];
  if (Kind === undefined || !(value.data instanceof Kind)) return false;
  if (!value.shape.every((e) => Number.isInteger(e) && e >= 0)) return false;
  return value.data.length === _prod(value.shape);
}

function _eq(a, b) {
  if (a.length !== b.length) return false;
  for (let k = 0; k < a.length; k++) if (a[k] !== b[k]) return false;
  return true;
}

/** Python's floor division and modulo on integers (JavaScript's % truncates). */
function _fdiv(a, b) { return Math.floor(a / b); }
function _mod(a, b) { const r = a % b; return r !== 0 && (r < 0) !== (b < 0) ? r + b : r; }

/** The truth of a one-element tensor (an If's condition given as an input). */
function _truth(value) {
  const v = value.data[0];
  return typeof v === "bigint" ? v !== 0n : v !== 0;
}

// -- the forward prologue (loam/runtime/prologue.py) -------------------------------------------------

function _check_input(name, value, dtype, axes, env, src) {
  if (value === null || typeof value !== "object" || !Array.isArray(value.shape) || value.data === undefined) {
    throw new ShapeError(`input '${name}' must be a Tensor (dtype, data, shape), got ${_describe(value)}`);
  }
  const got = _dtypeOf(value);
  if (got !== dtype) {
    throw new ShapeError(`input '${name}' must have dtype ${dtype} (a ${ARRAYS[dtype]?.name}), got ${got ?? _describe(value.data)}`);
  }
  if (!(value.data instanceof ARRAYS[dtype])) {
    throw new ShapeError(`input '${name}' has dtype ${dtype} but holds a ${_describe(value.data)}, not a ${ARRAYS[dtype].name}`);
  }
  if (value.shape.length !== axes.length) {
    const names = axes.map(([axis]) => axis).join(", ");
    throw new ShapeError(`input '${name}' must have rank ${axes.length} [${names}], got ${value.shape.length}`);
  }
  const count = _prod(value.shape);
  if (!value.shape.every((e) => Number.isInteger(e) && e >= 0) || value.data.length !== count) {
    throw new ShapeError(`input '${name}' has extents [${value.shape.join(", ")}] but ${value.data.length} elements`);
  }
  axes.forEach(([axis, extent], i) => {
    const e = value.shape[i];
    if (extent === null) return;
    if (typeof extent === "string") {
      if (!(extent in env)) {
        env[extent] = e;
        src[extent] = `${name} axis ${i}`;
      } else if (env[extent] !== e) {
        throw new ShapeError(`input '${name}' axis ${i} (${axis}) must be ${extent} = ${env[extent]} as ${src[extent]} gives it, got ${e}`);
      }
    } else if (extent !== e) {
      throw new ShapeError(`input '${name}' axis ${i} (${axis}) must be ${extent}, got ${e}`);
    }
  });
}

function _gives(symbols, env, src) {
  return symbols.map((s) => `${src[s]} gives ${s} = ${env[s]}`).join(", ");
}

function _read_back(name, axis, axisName, got, symbol, spelling, coefficient, rest, env, src) {
  const where = `input '${name}' axis ${axis} (${axisName}) is ${spelling}`;
  if (coefficient === 0) throw new ShapeError(`${where}, which reads no value of ${symbol} here: its coefficient is 0`);
  const value = _fdiv(got - rest, coefficient);
  if (_mod(got - rest, coefficient) !== 0) throw new ShapeError(`${where}, got ${got}, which gives no whole ${symbol}`);
  if (value < 0) throw new ShapeError(`${where}, got ${got}, which gives ${symbol} = ${value}; a length cannot be negative`);
  env[symbol] = value;
  src[symbol] = `${name} axis ${axis}`;
}

function _check_spelled(name, axis, axisName, got, spelling, want, symbols, env, src) {
  if (got !== want) {
    throw new ShapeError(`input '${name}' axis ${axis} (${axisName}) must be ${spelling} = ${want}, got ${got} (${_gives(symbols, env, src)})`);
  }
}

function _owe(holds, condition, node, symbols, env, src) {
  if (!holds) throw new ShapeError(`${condition} (${node}); ${_gives(symbols, env, src)}`);
}

function _room(shapes, symbols, env, src, limit) {
  for (const shape of shapes) {
    const count = _prod(shape);
    if (count > limit) {
      throw new ShapeError(`the inputs make a buffer of extents [${shape.join(", ")}] (${count} elements), past the ${limit} one tensor may hold (${_gives(symbols, env, src)})`);
    }
  }
}

function derived_extent(fn, ...args) {
  const [a, b] = args;
  switch (fn) {
    case "min": return Math.min(a, b);
    case "max": return Math.max(a, b);
    case "floordiv": case "ceildiv": case "truncdiv": case "mod": case "fmod":
      if (b === 0) throw new ShapeError(`${fn}(${a}, ${b}) divides by zero`);
      if (fn === "floordiv") return _fdiv(a, b);
      if (fn === "ceildiv") return -_fdiv(-a, b);
      if (fn === "truncdiv") return Math.trunc(a / b);
      if (fn === "mod") return _mod(a, b);
      return a < 0 ? -(Math.abs(a) % Math.abs(b)) : Math.abs(a) % Math.abs(b);
    case "fromend": return a < 0 ? a + b : a;
    case "wrap32": return _mod(a + 2 ** 31, 2 ** 32) - 2 ** 31;
    case "half": return Math.trunc(_fromHalf(_toHalf(a)));
    case "select": return args[0] ? args[1] : args[2];
    case "eq": return a === b ? 1 : 0;
    default: throw new ShapeError(`unknown derived extent function ${fn}`);
  }
}

// -- half floats ---------------------------------------------------------------------------------------

const _f32 = new Float32Array(1);
const _u32 = new Uint32Array(_f32.buffer);

/** The float16 bits nearest `x` (round to nearest even, as numpy's astype). */
function _toHalf(x) {
  _f32[0] = x;
  const b = _u32[0];
  const sign = (b >>> 16) & 0x8000;
  const exp = (b >>> 23) & 0xff;
  let mant = b & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  let e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    const half = 1 << (shift - 1);
    let r = mant >>> shift;
    const rest = mant & ((1 << shift) - 1);
    if (rest > half || (rest === half && (r & 1))) r += 1;
    return sign | r;
  }
  let r = (e << 10) | (mant >>> 13);
  const rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && (r & 1))) r += 1;
  return sign | r;
}

function _fromHalf(h) {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant ? NaN : sign * Infinity;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

function _fromBf16(h) { _u32[0] = h << 16; return _f32[0]; }

function _toBf16(x) {
  _f32[0] = x;
  const b = _u32[0];
  if (Number.isNaN(x)) return (b >>> 16) | 0x40;
  return ((b + 0x7fff + ((b >>> 16) & 1)) >>> 16) & 0xffff;
}

// -- device arrays (backends/wgsl_runtime.py: _device_array, _host_array) ----------------------------

/** `value`'s elements in their device form: f32 for floats, u32 for bool, i32 for every integer,
 * refusing an integer past the i32 range (never a silent wrap). */
function _device_array(name, dtype, data) {
  if (dtype === "float32" || dtype === "uint32") return data;  // uint32: a bool weight's device form
  if (dtype === "float16") return Float32Array.from(data, _fromHalf);
  if (dtype === "bfloat16") return Float32Array.from(data, _fromBf16);
  if (dtype === "bool") return Uint32Array.from(data, (v) => (v ? 1 : 0));
  if (dtype === "int64") {
    const out = new Int32Array(data.length);
    for (let k = 0; k < data.length; k++) {
      const v = data[k];
      if (v < -2147483648n || v > 2147483647n) {
        throw new ShapeError(`'${name}' holds ${v}, outside the i32 range WGSL computes in (values must lie in [-2^31, 2^31))`);
      }
      out[k] = Number(v);
    }
    return out;
  }
  return data instanceof Int32Array ? data : Int32Array.from(data);
}

function _host_array(bytes, dtype, shape) {
  const count = _prod(shape);
  const isFloat = dtype === "float32" || dtype === "float16" || dtype === "bfloat16";
  const raw = isFloat ? new Float32Array(bytes, 0, count) : dtype === "bool" ? new Uint32Array(bytes, 0, count) : new Int32Array(bytes, 0, count);
  let data;
  if (dtype === "float32" || dtype === "int32") data = raw.slice();
  else if (dtype === "float16") data = Uint16Array.from(raw, _toHalf);
  else if (dtype === "bfloat16") data = Uint16Array.from(raw, _toBf16);
  else if (dtype === "int64") data = BigInt64Array.from(raw, (v) => BigInt(v));
  else data = ARRAYS[dtype].from(raw);
  return new Tensor(dtype, data, shape);
}

// -- the device (backends/wgsl_runtime.py: _Gpu) --------------------------------------------------------

const CACHE_LIMIT = 4096;
const DEVICES = new Map(); // GPU object -> the promise of its device, shared by every module

async function _sharedDevice(gpu, limits) {
  if (!DEVICES.has(gpu)) {
    DEVICES.set(gpu, (async () => {
      const adapter = await gpu.requestAdapter({ powerPreference: "high-performance" });
      if (!adapter) throw new DeviceError("no WebGPU adapter: this browser or host has WebGPU turned off or no driver for it");
      const short = Object.entries(limits).filter(([k, v]) => !(adapter.limits[k] >= v));
      if (short.length) {
        throw new DeviceError(`this module was built for a device with ${short.map(([k, v]) => `${k} ${v}`).join(", ")}; `
          + `this adapter offers ${short.map(([k]) => `${k} ${adapter.limits[k]}`).join(", ")}`);
      }
      // Exactly the module's limits, never the adapter's most: what runs here runs on any device offering them.
      return await adapter.requestDevice({ requiredLimits: limits });
    })());
  }
  const device = await DEVICES.get(gpu);
  const short = Object.entries(limits).filter(([k, v]) => !(device.limits[k] >= v));
  if (short.length) {
    throw new DeviceError(`this module was built for a device with ${short.map(([k, v]) => `${k} ${v}`).join(", ")}, and this `
      + "page's device was made with less for a module loaded before it: load the module needing the higher limits first");
  }
  return device;
}

/** The WebGPU entry point: `navigator.gpu` in a browser, else the one `useGpu` was given (Node). */
let GPU_ENTRY = null;
export function useGpu(gpu) { GPU_ENTRY = gpu; }

class _Gpu {
  /** `shaders` by name; `packed`: how many trailing operands each shader reads from one packed buffer
   * (`pack`); `limits`: the device limits the module was built within (backends/wgsl_limits.py). */
  static async make(shaders, packed = {}, limits = {}) {
    const entry = GPU_ENTRY ?? globalThis.navigator?.gpu;
    if (!entry) throw new DeviceError("no WebGPU here: navigator.gpu is missing (in Node, call useGpu(...) with a WebGPU implementation first)");
    const g = new _Gpu(await _sharedDevice(entry, limits));
    g.shaders = shaders;
    g.packed = packed;
    return g;
  }

  constructor(device) {
    this.device = device;
    this.max_elements = Math.floor(Math.min(device.limits.maxStorageBufferBindingSize, device.limits.maxBufferSize) / 4);
    this.usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST;
    this.pipelines = new Map();
    this.paramsCache = new Map();
    this.valuesCache = new Map();
    this.groups = new Map();
    this.packs = new Map();  // the ids of a packed shader's trailing operands -> [buffer, offsets, buffers]
    this.pools = new Map();
    this.lates = new Map();
    this.stats = { dispatches: 0, bytes_up: 0, bytes_down: 0, forwards: 0 };
    this.nextId = 1;
    this.encoder = null;
    this.compute = null;
    this.reads = [];
    this.scoped = false;
    // The flags shaders raise (backends/wgsl_runtime.py _FLAGS): [1] a checked int64 step wrapped.
    this.flags = this.buffer(8);
    this.flagged = new Map();  // pipeline name -> its bind group 1 (the flags)
    this.unchecked = new Set();  // flagged pipelines dispatched since the flags were last read
    this.queue = Promise.resolve();
  }

  /** forward's calls take turns on the device: the next starts once this one's release is called. */
  async acquire() {
    let release;
    const turn = new Promise((resolve) => { release = resolve; });
    const before = this.queue;
    this.queue = before.then(() => turn);
    await before;
    return release;
  }

  pipeline(name) {
    let found = this.pipelines.get(name);
    if (found === undefined) {
      const module = this.device.createShaderModule({ code: this.shaders[name] });
      found = this.device.createComputePipeline({ layout: "auto", compute: { module, entryPoint: "main" } });
      this.pipelines.set(name, found);
      if (this.shaders[name].includes("_loam_flags")) {
        const entries = [{ binding: 0, resource: { buffer: this.flags } }];
        this.flagged.set(name, this.device.createBindGroup({ layout: found.getBindGroupLayout(1), entries }));
      }
    }
    return found;
  }

  buffer(nbytes) {
    const b = this.device.createBuffer({ size: Math.max(4, Math.ceil(nbytes / 4) * 4), usage: this.usage });
    b._loamId = this.nextId++;
    return b;
  }

  upload(name, dtype, data) {
    const device = _device_array(name, dtype, data);
    const b = this.buffer(device.byteLength);
    if (device.byteLength) this.device.queue.writeBuffer(b, 0, device.buffer, device.byteOffset, device.byteLength);
    this.stats.bytes_up += device.byteLength;
    return b;
  }

  /** A weight's ggml blocks, byte for byte (the packed kernels widen them). */
  upload_blocks(name, bytes) {
    const b = this.buffer(bytes.byteLength);
    let padded = bytes;
    if (bytes.byteLength % 4) {  // writeBuffer takes whole 32-bit words
      padded = new Uint8Array(Math.ceil(bytes.byteLength / 4) * 4);
      padded.set(bytes);
    }
    if (padded.byteLength) this.device.queue.writeBuffer(b, 0, padded.buffer, padded.byteOffset, padded.byteLength);
    this.stats.bytes_up += padded.byteLength;
    return b;
  }

  write(name, buffer, value) {
    const device = _device_array(name, _dtypeOf(value), value.data);
    if (device.byteLength) this.device.queue.writeBuffer(buffer, 0, device.buffer, device.byteOffset, device.byteLength);
    this.stats.bytes_up += device.byteLength;
  }

  /** A buffer holding tensor `value`, computed on the host from the bound extents: uploaded the first
   * time these numbers appear, then reused. */
  values(value) {
    const key = `${value.dtype}:${Array.from(value.data).join(",")}`;
    let found = this.valuesCache.get(key);
    if (found === undefined) {
      if (this.valuesCache.size >= CACHE_LIMIT) this.valuesCache.clear();
      found = this.upload("shape values", value.dtype, value.data);
      this.valuesCache.set(key, found);
    }
    return found;
  }

  pool(key, sizes) {
    const k = key.join(",");
    let found = this.pools.get(k);
    if (found === undefined) {
      found = sizes.map((n) => this.buffer(n));
      this.pools.set(k, found);
      while (this.pools.size > 4) {
        const oldest = this.pools.keys().next().value;
        for (const b of this.pools.get(oldest)) b.destroy();
        this.pools.delete(oldest);
        this.groups.clear();
        this.packs.clear();
      }
    }
    return found;
  }

  late(tag, nbytes) {
    if (Math.floor(nbytes / 4) > this.max_elements) {
      throw new ShapeError(`${tag}: ${Math.floor(nbytes / 4)} elements, more than one device buffer holds (${this.max_elements})`);
    }
    const found = this.lates.get(tag);
    if (found === undefined || found[1] < nbytes) {
      const made = [this.buffer(nbytes), nbytes];
      this.lates.set(tag, made);
      return made[0];
    }
    return found[0];
  }

  begin() {
    this.resume();
    this.stats.forwards += 1;
  }

  dispatch(name, buffers, params, grid) {
    if (grid <= 0) return;
    const k = this.packed?.[name];
    if (k) buffers = [...buffers.slice(0, -k), this.pack(buffers.slice(-k))];
    const key = `${name}|${buffers.map((b) => b._loamId).join(",")}|${params.join(",")}`;
    let group = this.groups.get(key);
    if (group === undefined) {
      if (this.paramsCache.size >= CACHE_LIMIT || this.groups.size >= CACHE_LIMIT) {
        this.paramsCache.clear();
        this.groups.clear();
        this.packs.clear();
      }
      const pkey = params.join(",");
      let pbuf = this.paramsCache.get(pkey);
      if (pbuf === undefined) {
        const data = Uint32Array.from(params.length ? params : [0], (v) => v >>> 0);
        pbuf = this.buffer(data.byteLength);
        this.device.queue.writeBuffer(pbuf, 0, data);
        this.paramsCache.set(pkey, pbuf);
        this.stats.bytes_up += data.byteLength;
      }
      const pipeline = this.pipeline(name);
      const entries = [pbuf, ...buffers].map((buffer, binding) => ({ binding, resource: { buffer } }));
      group = this.device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries });
      this.groups.set(key, group);
    }
    this.compute.setPipeline(this.pipeline(name));
    this.compute.setBindGroup(0, group);
    if (this.flagged.has(name)) {
      this.compute.setBindGroup(1, this.flagged.get(name));
      this.unchecked.add(name);
    }
    const x = Math.min(grid, 65535);
    this.compute.dispatchWorkgroups(x, Math.ceil(grid / x));
    this.stats.dispatches += 1;
  }

  /** One buffer holding `buffers`' words after a header of their offsets, copied in now, before the
   * dispatch reading it (a shader past the storage-buffer budget reads its trailing operands from it:
   * backends/wgsl_limits.py fit_bindings); made once per set of buffers. */
  pack(buffers) {
    const key = buffers.map((b) => b._loamId).join(",");
    let found = this.packs.get(key);
    if (found === undefined) {
      const offsets = [];
      let at = buffers.length;
      for (const b of buffers) {
        offsets.push(at);
        at += b.size / 4;
      }
      if (at * 4 > this.device.limits.maxStorageBufferBindingSize) {
        throw new ShapeError(`operands packed into one buffer take ${at * 4} bytes, more than one binding holds`);
      }
      const packed = this.buffer(at * 4);
      this.device.queue.writeBuffer(packed, 0, Uint32Array.from(offsets));
      found = [packed, offsets];
      this.packs.set(key, found);
    }
    const [packed, offsets] = found;
    this.compute.end();
    buffers.forEach((b, i) => this.encoder.copyBufferToBuffer(b, 0, packed, offsets[i] * 4, b.size));
    this.compute = this.encoder.beginComputePass();
    return packed;
  }

  copy(source, target, nbytes) {
    this.compute.end();
    if (nbytes) this.encoder.copyBufferToBuffer(source, 0, target, 0, Math.ceil(nbytes / 4) * 4);
    this.compute = this.encoder.beginComputePass();
  }

  /** The forward's last dispatch is recorded: its pass ends (the encoder stays open for the reads). */
  end() {
    this.compute.end();
    this.compute = null;
  }

  /** After a forward that stopped early (a ShapeError between begin and done): its error scope closed,
   * its recording dropped. */
  async abandon() {
    if (this.scoped) {
      this.scoped = false;
      await this.device.popErrorScope();
    }
    this.encoder = this.compute = null;
    this.reads = [];
  }

  /** Record a copy of `buffer` (an output) for download; `done` submits and maps them all. */
  read(buffer, dtype, shape) {
    const count = _prod(shape);
    const nbytes = count * 4;
    const pending = { dtype, shape, nbytes, staging: null, tensor: null };
    if (nbytes) {
      pending.staging = this.device.createBuffer({ size: Math.ceil(nbytes / 4) * 4, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
      this.encoder.copyBufferToBuffer(buffer, 0, pending.staging, 0, Math.ceil(nbytes / 4) * 4);
    }
    this.reads.push(pending);
    return pending;
  }

  /** Submit the forward's one command encoder and download what `read` recorded. */
  async done() {
    let flags = null;
    const names = [...this.unchecked].sort();
    if (names.length) {  // the flags come down with the outputs
      flags = this.device.createBuffer({ size: 8, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
      this.encoder.copyBufferToBuffer(this.flags, 0, flags, 0, 8);
      this.unchecked.clear();
    }
    this.device.queue.submit([this.encoder.finish()]);
    this.encoder = null;
    if (this.scoped) {
      this.scoped = false;
      const error = await this.device.popErrorScope();
      if (error) {
        this.reads = [];
        throw new DeviceError(`the device refused this forward's work: ${error.message}`);
      }
    }
    const reads = this.reads;
    this.reads = [];
    if (flags !== null) {
      await flags.mapAsync(GPUMapMode.READ);
      const wrapped = new Uint32Array(flags.getMappedRange())[1];
      flags.unmap();
      flags.destroy();
      if (wrapped) {
        this.device.queue.writeBuffer(this.flags, 0, new Uint32Array(2));
        throw new DeviceError(`an int64 sum, difference or product in one of ${names.join(", ")} left the int32 range the device computes integers in, where numpy's int64 keeps the value: its results would be wrong, so none are returned (the numpy module computes these inputs)`);
      }
    }
    await Promise.all(reads.map(async (p) => {
      if (!p.staging) { p.tensor = _host_array(new ArrayBuffer(0), p.dtype, p.shape); return; }
      await p.staging.mapAsync(GPUMapMode.READ);
      p.tensor = _host_array(p.staging.getMappedRange().slice(0), p.dtype, p.shape);
      p.staging.unmap();
      p.staging.destroy();
      this.stats.bytes_down += p.nbytes;
    }));
  }

  /** Submit what is recorded and download `buffers` ([buffer, dtype, shape]) for the host to decide on
   * (an If's condition computed on the device); `resume` records on after it. */
  async sync(buffers) { return this.download(buffers, "syncs"); }

  /** `sync`'s download for a kernel the page computes itself (host.js), counted apart. */
  async host(buffers) { return this.download(buffers, "host_kernels"); }

  /** Submit what is recorded and download `buffers`, counting the stop in `stats[counter]`. */
  async download(buffers, counter) {
    this.compute.end();
    const pending = buffers.map(([b, dtype, shape]) => this.read(b, dtype, shape));
    await this.done();
    this.stats[counter] = (this.stats[counter] ?? 0) + 1;
    return pending.map((p) => p.tensor);
  }

  /** Record the forward's next dispatches in a new encoder (after a `sync` or a `host`). */
  resume() {
    this.device.pushErrorScope("validation");  // a refused shader or binding: a DeviceError, never zeros
    this.scoped = true;
    this.encoder = this.device.createCommandEncoder();
    this.compute = this.encoder.beginComputePass();
  }
}

/** A downloaded output (what `read` recorded, once `done` ran). */
function _value(pending) { return pending.tensor; }

// -- the weights: safetensors shards with a manifest of their digests -------------------------------

const SAFETENSORS = { F32: "float32", I32: "int32", U32: "uint32", U8: "uint8" };

async function _sha256(bytes) {
  const digest = await globalThis.crypto.subtle.digest("SHA-256", bytes);
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

/** The tensors of one safetensors file: name -> [dtype, shape, bytes (a view of the file)], every bound checked. */
function _readSafetensors(bytes, where) {
  if (bytes.byteLength < 8) throw new LoadError(`${where}: ${bytes.byteLength} bytes, shorter than a safetensors header`);
  const view = new DataView(bytes);
  const length = Number(view.getBigUint64(0, true));
  if (length > bytes.byteLength - 8) throw new LoadError(`${where}: its header claims ${length} bytes, past the file's end (${bytes.byteLength} bytes)`);
  let header;
  try {
    header = JSON.parse(new TextDecoder().decode(new Uint8Array(bytes, 8, length)));
  } catch (e) {
    throw new LoadError(`${where}: its header is not JSON (${e.message})`);
  }
  const tensors = new Map();
  const start = 8 + length;
  for (const [name, entry] of Object.entries(header)) {
    if (name === "__metadata__") continue;
    const dtype = SAFETENSORS[entry?.dtype];
    if (dtype === undefined) throw new LoadError(`tensor '${name}' in ${where}: dtype ${entry?.dtype} is not one a browser module reads`);
    const [begin, end] = entry.data_offsets ?? [];
    const count = _prod(entry.shape ?? []);
    const itemsize = ARRAYS[dtype].BYTES_PER_ELEMENT;
    if (!Number.isInteger(begin) || !Number.isInteger(end) || end - begin !== count * itemsize) {
      throw new LoadError(`tensor '${name}' in ${where}: its offsets [${begin}, ${end}) do not hold ${count} elements of ${entry.dtype}`);
    }
    if (start + end > bytes.byteLength) {
      throw new LoadError(`tensor '${name}' in ${where} runs past the file's end: it needs ${start + end} bytes, the file has ${bytes.byteLength} (a truncated download?)`);
    }
    tensors.set(name, [dtype, entry.shape, new Uint8Array(bytes, start + begin, end - begin)]);  // a view: one copy, when joined
  }
  return tensors;
}

async function _fetchBytes(url, what) {
  let response;
  try {
    response = await fetch(url);
  } catch (e) {
    throw new LoadError(`${what}: could not fetch ${url} (${e.message})`);
  }
  if (!response.ok) throw new LoadError(`${what}: fetching ${url} gave HTTP ${response.status}`);
  return await response.arrayBuffer();
}

/** Every tensor of the weights at `source`: a folder URL holding manifest.json and its shards (a
 * string or URL), a function reading one of those files by name (to a Promise of its ArrayBuffer), an
 * object mapping those file names to ArrayBuffers, or one safetensors ArrayBuffer. */
async function _readWeights(source) {
  if (source instanceof ArrayBuffer) return _readSafetensors(source, "the weights");
  let read;
  if (typeof source === "function") {  // (file name) => Promise<ArrayBuffer>: a host without fetch (Node)
    read = async (name) => {
      const found = await source(name);
      if (!(found instanceof ArrayBuffer)) throw new LoadError(`the weights' reader gave no ArrayBuffer for '${name}'`);
      return found;
    };
  } else if (typeof source === "string" || source instanceof URL) {
    const base = new URL(source, globalThis.location?.href ?? undefined);
    const folder = base.pathname.endsWith(".json") ? new URL(".", base) : new URL(base.href.endsWith("/") ? base.href : base.href + "/");
    read = (name) => _fetchBytes(new URL(name, folder), name);
  } else if (source !== null && typeof source === "object") {
    read = async (name) => {
      const found = source[name];
      if (!(found instanceof ArrayBuffer)) throw new LoadError(`the weights give no ArrayBuffer for '${name}'`);
      return found;
    };
  } else {
    throw new LoadError(`Weights.load takes a folder URL, an object of files or an ArrayBuffer, got ${_describe(source)}`);
  }
  let manifest;
  try {
    manifest = JSON.parse(new TextDecoder().decode(await read("manifest.json")));
  } catch (e) {
    if (e instanceof LoadError) throw e;
    throw new LoadError(`manifest.json is not JSON (${e.message})`);
  }
  if (!Array.isArray(manifest?.shards)) throw new LoadError("manifest.json has no list of shards");
  const tensors = new Map();
  const shards = await Promise.all(manifest.shards.map(async (s) => [s, await read(s.file)]));
  for (const [shard, bytes] of shards) {
    for (const [name, entry] of _readSafetensors(bytes, `shard '${shard.file}'`)) tensors.set(name, entry);
    if (bytes.byteLength !== shard.bytes || (await _sha256(bytes)) !== shard.sha256) {
      throw new LoadError(`shard '${shard.file}' does not match its sha256 in manifest.json: it changed since the build`);
    }
  }
  return tensors;
}

/** The resident tensor `spec` ([name, dtype, shape, axis names]) from `tensors`: whole, or in parts
 * `name#0`, `name#1`, ... split along axis 0; its dtype and every extent checked. */
function _residentTensor(tensors, [name, dtype, shape, axes]) {
  const parts = tensors.has(name) ? [tensors.get(name)] : [];
  for (let k = 0; !parts.length || tensors.has(`${name}#${k}`); k++) {
    if (!tensors.has(`${name}#${k}`)) break;
    parts.push(tensors.get(`${name}#${k}`));
  }
  if (!parts.length) throw new LoadError(`tensor '${name}' is missing from the weights`);
  let rows = 0;
  for (const [got, extents] of parts) {
    if (got !== dtype) throw new LoadError(`tensor '${name}' must have dtype ${dtype}, got ${got}`);
    if (extents.length !== shape.length) throw new LoadError(`tensor '${name}' must have rank ${shape.length} [${axes.join(", ")}], got ${extents.length}`);
    for (let a = 1; a < shape.length; a++) {
      if (extents[a] !== shape[a]) throw new LoadError(`tensor '${name}' axis ${a} (${axes[a]}) must be ${shape[a]}, got ${extents[a]}`);
    }
    rows += shape.length ? extents[0] : 1;
  }
  if (shape.length && rows !== shape[0]) throw new LoadError(`tensor '${name}' axis 0 (${axes[0]}) must be ${shape[0]}, got ${rows}`);
  const total = parts.reduce((n, [, , b]) => n + b.byteLength, 0);
  const joined = new Uint8Array(total);
  let at = 0;
  for (const [, , b] of parts) { joined.set(b, at); at += b.byteLength; }
  return new ARRAYS[dtype](joined.buffer);
}

// -- the kernels' parameters (backends/wgsl_kernels: each `_p_NAME`) ---------------------------------


function _bits32(v) { return v >>> 0; }

function _row_major(shape) {
  const strides = shape.map(() => 1);
  for (let k = shape.length - 2; k >= 0; k--) strides[k] = strides[k + 1] * shape[k + 1];
  return strides;
}

function _p_tile_program(grid, numbers) {
  const sizes = Array.isArray(grid) ? grid : [grid];
  const count = _prod(sizes);
  const extents = [...sizes, 1, 1, 1].slice(0, 3);
  return [[count, ...extents, ...numbers.map(_bits32)], count];
}

function _p_zip(outShape, strided) {
  const rank = outShape.length;
  const total = _prod(outShape);
  const params = [total, ...outShape];
  for (const shape of strided) {
    const strides = new Array(rank).fill(0);
    let step = 1;
    for (let k = shape.length - 1; k >= 0; k--) {
      if (shape[k] !== 1) strides[rank - shape.length + k] = step;
      step *= shape[k];
    }
    params.push(...strides);
  }
  return [params, _fdiv(total + 63, 64)];
}

function _p_copy(extents, src, srcStrides, dst, dstStrides) {
  const count = _prod(extents);
  const raw = [count, src, dst, ...extents, ...srcStrides, ...dstStrides];
  return [raw.map(_bits32), _fdiv(count + 63, 64)];
}

function _p_permute(shape, permutation) {
  const strides = _row_major(shape);
  const extents = permutation.map((p) => shape[p]);
  return _p_copy(extents, 0, permutation.map((p) => strides[p]), 0, _row_major(extents));
}

function _p_slice(shape, starts, counts, steps) {
  const strides = _row_major(shape);
  const offset = counts.every((c) => c) ? starts.reduce((n, s, k) => n + s * strides[k], 0) : 0;
  const read = steps.map((s, k) => s * strides[k]);
  return _p_copy(counts, offset, read, 0, _row_major(counts));
}

function _p_place(piece, whole, axis, at, into) {
  const strides = _row_major(whole);
  const offset = piece.every((e) => e) ? at * strides[axis] : 0;
  const own = _row_major(piece);
  return into ? _p_copy(piece, 0, own, offset, strides) : _p_copy(piece, offset, strides, 0, own);
}

function _p_range(start, limit, delta) {
  const count = delta ? Math.max(0, -_fdiv(-(limit - start), delta)) : 0;
  const last = count ? start + (count - 1) * delta : start;
  if (![start, delta, last].every((v) => v >= -(2 ** 31) && v < 2 ** 31)) {
    throw new ShapeError(`Range from ${start} by ${delta}: values past the i32 range the device computes integers in`);
  }
  return [[count, _bits32(start), _bits32(delta)], _fdiv(count + 63, 64)];
}

function _p_gather(shapes, axis) {
  const data = shapes[0];
  const inner = _prod(data.slice(axis + 1));
  const count = _prod(shapes[1]);
  const outer = _prod(data.slice(0, axis));
  const total = outer * count * inner;
  return [[total, Math.max(inner, 1), Math.max(count, 1), data[axis]], _fdiv(total + 63, 64)];
}

function _p_conv(shapes, strides, pads, dilations, group) {
  const x = shapes[0], w = shapes[1], out = shapes[shapes.length - 1];
  const nsp = x.length - 2;
  const total = _prod(out);
  const block = [total, x[1], w[0], _fdiv(x[1], group), Math.max(_fdiv(w[0], group), 1)];
  block.push(...x.slice(2), ...w.slice(2), ...out.slice(2), ...strides, ...dilations, ...pads.slice(0, nsp));
  return [block, _fdiv(total + 63, 64)];
}

function _p_conv_transpose(shapes, strides, pads, dilations, group, output_padding) {
  const x = shapes[0], w = shapes[1], out = shapes[shapes.length - 1];
  const nsp = x.length - 2;
  const total = _prod(out);
  const block = [total, x[1], out[1], Math.max(_fdiv(x[1], group), 1), Math.max(w[1], 1)];
  block.push(...x.slice(2), ...w.slice(2), ...out.slice(2), ...strides, ...dilations, ...pads.slice(0, nsp));
  return [block.map((v) => v >>> 0), _fdiv(total + 63, 64)];
}

function _p_scatter_elements(shapes, axis, reduction) {
  const data = shapes[0], updates = shapes[2];
  const rank = data.length;
  axis = ((axis % rank) + rank) % rank;
  const dstrides = _row_major(data), ustrides = _row_major(updates);
  let lines = _prod(data.filter((_, k) => k !== axis));
  if (data[axis] === 0) lines = 0;
  return [[lines, axis, data[axis], updates[axis], ...data, ...dstrides, ...updates, ...ustrides], _fdiv(lines + 63, 64)];
}

function _p_normalize(shapes, axes, epsilon, channel_axis, stash, stats) {
  const shape = shapes[0];
  const rank = shape.length;
  const noperands = shapes.length - (stats ? 3 : 1);
  const block = _row_block(shape, axes);
  const rows = block[0];
  _f32[0] = epsilon;
  block.push(_u32[0], ...shape, ..._row_major(shape));
  for (let p = 1; p < noperands; p++) {
    const pshape = shapes[p];
    let aligned;
    if (channel_axis >= 0) {
      aligned = new Array(rank).fill(1);
      aligned[channel_axis] = pshape.length ? pshape[0] : 1;
    } else {
      aligned = [...new Array(rank - pshape.length).fill(1), ...pshape];
    }
    const pstrides = new Array(rank).fill(0);
    let step = 1;
    for (let k = rank - 1; k >= 0; k--) {
      pstrides[k] = aligned[k] !== 1 ? step : 0;
      step *= aligned[k];
    }
    block.push(...pstrides);
  }
  return [block, rows];
}

function _row_block(shape, axes) {
  const strides = _row_major(shape);
  const kept = shape.map((_, a) => a).filter((a) => !axes.includes(a));
  const rows = _prod(kept.map((a) => shape[a]));
  const length = _prod(axes.map((a) => shape[a]));
  return [rows, length, ...kept.map((a) => shape[a]), ...kept.map((a) => strides[a]), ...axes.map((a) => shape[a]), ...axes.map((a) => strides[a])];
}

function _p_softmax(shapes, kind, axes) {
  const block = _row_block(shapes[0], axes);
  if (block[1] === 0) block[0] = 0;
  return [block, block[0]];
}

/** `shape` read as (outer, extent, inner) around `axis`: [outer * inner, extent, inner]. */
function _lines(shape, axis) {
  const rank = shape.length;
  axis = rank ? _mod(axis, rank) : 0;
  const outer = _prod(shape.slice(0, axis));
  const inner = _prod(shape.slice(axis + 1));
  return [outer * inner, rank ? shape[axis] : 1, Math.max(inner, 1)];
}

function _p_cumsum(shapes, axis, exclusive, reverse) {
  let [lines, extent, inner] = _lines(shapes[0], axis);
  if (extent === 0) lines = 0;
  return [[lines, extent, inner, exclusive ? 1 : 0, reverse ? 1 : 0], Math.floor((lines + 63) / 64)];
}

function _p_gather_elements(shapes, axis) {
  const data = shapes[0];
  const indices = shapes[1];
  axis = _mod(axis, data.length);
  const count = _prod(indices);
  return [[count, axis, data[axis], ...indices, ..._row_major(data)], Math.floor((count + 63) / 64)];
}

function _p_gather_nd(shapes, batchDims) {
  const [data, indices] = shapes;
  const k = indices[indices.length - 1];
  const b = batchDims;
  const inner = _prod(data.slice(b + k));
  const tuples = _prod(indices.slice(b, -1));
  const total = _prod(data.slice(0, b)) * tuples * inner;
  return [[total, Math.max(inner, 1), Math.max(tuples, 1), ...data.slice(b, b + k)], Math.floor((total + 63) / 64)];
}

function _p_reduce(shapes, kind, axes, keepdims) {
  const block = _row_block(shapes[0], axes);
  return [block, block[0]];
}

function _p_matmul(a, b, aStrides, bStrides, out, strided) {
  const m = a.length > 1 ? a[a.length - 2] : 1;
  const k = a[a.length - 1];
  const n = b.length > 1 ? b[b.length - 1] : 1;
  const aRow = a.length > 1 ? aStrides[aStrides.length - 2] : 0;
  const aK = aStrides[aStrides.length - 1];
  const [bK, bCol] = b.length > 1 ? [bStrides[bStrides.length - 2], bStrides[bStrides.length - 1]] : [bStrides[bStrides.length - 1], 0];
  const batchOut = out.slice(0, out.length - (a.length > 1 ? 1 : 0) - (b.length > 1 ? 1 : 0));
  const rankB = batchOut.length;
  const batchStrides = (shape, strides) => {
    const own = shape.length > 1 ? shape.length - 2 : 0;
    const found = new Array(rankB).fill(0);
    for (let j = 0; j < own; j++) if (shape[j] !== 1) found[rankB - own + j] = strides[j];
    return found;
  };
  const count = _prod(batchOut);
  const params = [m, n, k, count, aRow, aK, 0, bK, bCol, 0, 0, 0, ...batchOut];
  params.push(...batchStrides(a, aStrides), ...batchStrides(b, bStrides), ...out);
  for (const shape of strided) {
    const strides = new Array(out.length).fill(0);
    let step = 1;
    for (let j = shape.length - 1; j >= 0; j--) {
      if (shape[j] !== 1) strides[out.length - shape.length + j] = step;
      step *= shape[j];
    }
    params.push(...strides);
  }
  const tiles = _fdiv(m + 7, 8) * _fdiv(n + 7, 8);
  return [params, m && n ? count * tiles : 0];
}

function _p_pool(shapes, mode, kernelShape, strides, pads, dilations, outShape, countIncludePad = 0, p = 2.0, storageOrder = 0, indices = 0, nanRule = "ignore") {
  const x = shapes[0];
  const nsp = x.length - 2;
  const spatial = x.slice(2);
  if (indices && _prod(x) >= 2 ** 31) {
    throw new ShapeError(`MaxPool's input holds ${_prod(x)} elements; its indices travel as i32 on the device (at most 2^31 - 1 elements)`);
  }
  const ks = [...Array(nsp).keys()];
  const begins = ks.map((k) => Math.max(0, pads[k]));
  const ends = ks.map((k) => Math.max(0, pads[k + nsp]));
  const offs = ks.map((k) => Math.max(0, -pads[k]));
  const cropped = ks.map((k) => spatial[k] - offs[k] - Math.max(0, -pads[k + nsp]));
  const padded = ks.map((k) => cropped[k] + begins[k] + ends[k]);
  const total = x[0] * x[1] * _prod(outShape);
  const block = [total, ...spatial, ...cropped, ...begins, ...offs, ...padded, ...kernelShape, ...strides, ...dilations, ...outShape];
  return [block, _fdiv(total + 63, 64)];
}

function _p_matmul_packed(shapes, transposed, encoding) {
  const x = shapes[0], w = shapes[1];
  const [k, n] = transposed ? [w[1], w[0]] : [w[0], w[1]];
  const m = _prod(x.slice(0, -1));
  const total = m * n;
  return [[total, m, n, k, _fdiv(w[1], 32)], _fdiv(total + 63, 64)];
}

function _p_gather_packed(shapes, axis, encoding) {
  const w = shapes[0];
  const count = _prod(shapes[1]);
  const total = count * w[1];
  return [[total, w[1], count, w[0], _fdiv(w[1], 32)], _fdiv(total + 63, 64)];
}

function _p_trilu(shapes, upper, offset = 0) {
  const x = shapes[0];
  const count = _prod(x);
  return [[count, Math.max(x[x.length - 2], 1), Math.max(x[x.length - 1], 1), _bits32(offset)], _fdiv(count + 63, 64)];
}

function _p_scatter_nd(shapes, reduction) {
  const data = shapes[0], indices = shapes[1];
  const k = indices[indices.length - 1];
  const rows = _prod(data.slice(0, k));
  let columns = _prod(data.slice(k));
  const tuples = _prod(indices.slice(0, -1));
  if (rows === 0) columns = 0;
  return [[columns, rows, tuples, ...data.slice(0, k)], columns];
}

function _p_pad(shapes, pads, mode, value = 0.0) {
  const x = shapes[0], y = shapes[shapes.length - 1];
  const count = _prod(y);
  let useFill = 0;
  if (shapes.length === 3) useFill = _prod(shapes[1]) > 0 ? 1 : 0;
  _f32[0] = value;
  const asInt = Number.isFinite(value) ? Math.trunc(value) : 0;
  const block = [count, useFill, _u32[0], asInt >>> 0];
  for (let k = 0; k < x.length; k++) block.push(y[k], x[k], pads[k] >>> 0);
  return [block, _fdiv(count + 63, 64)];
}

/** A recurrent kernel's dispatches, in order: per step (phase 0 first where `twoPhase`) one invocation
 * per (direction, batch entry, hidden unit), then the finals over the larger of that and Y. */
function _p_recurrent(shapes, layout, twoPhase) {
  const x = shapes[0], w = shapes[1], r = shapes[2];
  const [steps, batch] = layout ? [x[1], x[0]] : [x[0], x[1]];
  const hidden = r[2], size = x[2];
  const count = w[0] * batch * hidden;
  const grid = _fdiv(count + 63, 64);
  const out = [];
  for (let k = 0; k < steps; k++) {
    if (twoPhase) out.push([[0, k, steps, batch, hidden, size], grid]);
    out.push([[1, k, steps, batch, hidden, size], grid]);
  }
  out.push([[2, 0, steps, batch, hidden, size], _fdiv(Math.max(steps, 1) * count + 63, 64)]);
  return out;
}

function _p_rnn(shapes, direction, activations, alphas, betas, clip, layout, present) {
  return _p_recurrent(shapes, layout, false);
}

function _p_gru(shapes, direction, activations, alphas, betas, clip, layout, linear_before_reset, present) {
  return _p_recurrent(shapes, layout, !linear_before_reset);
}

function _p_lstm(shapes, direction, activations, alphas, betas, clip, layout, input_forget, present) {
  return _p_recurrent(shapes, layout, false);
}
