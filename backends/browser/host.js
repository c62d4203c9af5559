// The kernels a page computes on its own CPU (`loam build --target browser --host-fallback`): those
// the WGSL module computes on the host because they have no device form yet (NonZero, Range over run-time
// values, an i64 reduction the device's i32 could wrap, a cast to i64, a random draw).  The forward
// downloads their operands (`g.host`), calls the function here of the numpy kernel's name with the same
// arguments, and uploads the result; a length the result gives sizes the buffers after it, as in the
// Python module.  Each function mirrors the numpy kernel of the same name in `loam/runtime/kernels/`
// (the same results, the same DataError messages); tests/backends/browser/test_host_js.py holds the two
// to the same numbers.  `loam.backends.browser_js.HOST_KERNELS` lists them with the arguments each takes.

/** A value of the model's data that its kernel cannot compute (Range's delta of 0). */
export class DataError extends Error {
  constructor(message) { super(message); this.name = "DataError"; }
}

const _INTEGER_RANGES = {
  int64: [-(2n ** 63n), 2n ** 63n - 1n], int32: [-(2 ** 31), 2 ** 31 - 1], int16: [-(2 ** 15), 2 ** 15 - 1],
  int8: [-128, 127], uint8: [0, 255], uint16: [0, 2 ** 16 - 1], uint32: [0, 2 ** 32 - 1],
};

/** Element `k` of `t` as a JavaScript number (an int64 as its nearest double, a half float widened). */
function _number(t, k) {
  const v = t.data[k];
  if (t.dtype === "float16") return _fromHalf(v);
  if (t.dtype === "bfloat16") return _fromBf16(v);
  return Number(v);
}

/** A tensor of `dtype` and extents `shape` holding `values` (numbers; integers already in range). */
function _made(dtype, values, shape) {
  const Kind = ARRAYS[dtype];
  let data;
  if (dtype === "float16") data = Uint16Array.from(values, _toHalf);
  else if (dtype === "bfloat16") data = Uint16Array.from(values, _toBf16);
  else if (Kind === BigInt64Array) data = BigInt64Array.from(values, (v) => (typeof v === "bigint" ? v : BigInt(v)));
  else data = Kind.from(values);
  return new Tensor(dtype, data, shape);
}

/** numpy's `astype` of one number to an integer dtype: truncated toward zero; NaN, an infinity or a
 * value past int64's or int32's range is that type's lowest value (x86's conversion), and a narrower
 * type keeps the low bits of the int32 conversion. */
function _toInteger(x, dtype) {
  if (dtype === "int64") {
    const [low] = _INTEGER_RANGES.int64;
    if (!Number.isFinite(x) || x >= 2 ** 63 || x < -(2 ** 63)) return low;
    return BigInt(Math.trunc(x));
  }
  return !Number.isFinite(x) || x >= 2 ** 31 || x < -(2 ** 31) ? -(2 ** 31) : Math.trunc(x);
}

/** `x.astype(dtype)` (and `np.asarray(x, dtype=...)`): a cast with numpy's conversions. */
function _astype(x, dtype) {
  if (x.dtype === dtype) return x;
  const count = x.data.length;
  const out = new Array(count);
  const integer = dtype in _INTEGER_RANGES;
  for (let k = 0; k < count; k++) {
    const v = x.data[k];
    if (dtype === "bool") out[k] = typeof v === "bigint" ? v !== 0n : _number(x, k) !== 0 ? 1 : 0;
    else if (typeof v === "bigint") out[k] = dtype === "int64" ? v : integer ? Number(BigInt.asIntN(32, v)) : Number(v);
    else if (integer && x.dtype in _INTEGER_RANGES) out[k] = v;  // integer to integer: the typed array wraps
    else if (integer) out[k] = _toInteger(_number(x, k), dtype);
    else out[k] = _number(x, k);
  }
  if (dtype === "bool") return new Tensor("bool", Uint8Array.from(out, (v) => (v ? 1 : 0)), x.shape);
  return _made(dtype, out, x.shape);
}

/** ONNX NonZero: the indices of x's nonzero elements in row-major order, [rank, count] (int64). */
function kernel_nonzero(x) {
  const rank = x.shape.length;
  const hits = [];
  for (let k = 0; k < x.data.length; k++) {
    const v = x.data[k];
    const zero = typeof v === "bigint" ? v === 0n : x.dtype === "float16" || x.dtype === "bfloat16" ? (v & 0x7fff) === 0 : v === 0;
    if (!zero) hits.push(k);
  }
  if (rank === 0) return new Tensor("int64", new BigInt64Array(0), [0, hits.length]);
  const out = new BigInt64Array(rank * hits.length);
  hits.forEach((flat, j) => {
    for (let axis = rank - 1; axis >= 0; axis--) {
      const extent = x.shape[axis];
      out[axis * hits.length + j] = BigInt(flat % extent);
      flat = Math.floor(flat / extent);
    }
  });
  return new Tensor("int64", out, [rank, hits.length]);
}

/** ONNX Range over the values given: max(ceil((limit - start) / delta), 0) elements, element i start +
 * i * delta in their type (halves computed in f32).  A delta of 0, or more elements than an i32 extent
 * holds, is a DataError. */
function kernel_range_of(start, limit, delta) {
  const dtype = start.dtype;
  const exact = dtype in _INTEGER_RANGES;
  let count;
  if (exact) {
    const [s, l, d] = [start, limit, delta].map((t) => BigInt(t.data[0]));
    if (d === 0n) throw new DataError("Range's delta is 0");
    const span = l - s;
    const ceil = span / d + (span % d !== 0n && (span < 0n) === (d < 0n) ? 1n : 0n);  // ceil of span / d
    count = ceil > 0n ? ceil : 0n;
    if (count > 2n ** 31n - 1n) throw new DataError(`Range makes ${count} elements, more than an extent holds`);
    const values = Array.from({ length: Number(count) }, (_, i) => s + BigInt(i) * d);
    return _made(dtype, dtype === "int64" ? values : values.map(Number), [Number(count)]);
  }
  const [s, l, d] = [start, limit, delta].map((t) => _number(t, 0));
  if (d === 0) throw new DataError("Range's delta is 0");
  const n = Math.ceil((l - s) / d);
  if (Number.isNaN(n)) throw new DataError(`Range from ${s} to ${l} by ${d} makes no count of elements`);
  count = Math.max(n, 0);
  if (count > 2 ** 31 - 1) throw new DataError(`Range makes ${count} elements, more than an extent holds`);
  // f32 arithmetic, each step rounded as numpy's float32 arange and product and sum round it
  const [fs, fd] = [Math.fround(s), Math.fround(d)];
  const values = Array.from({ length: count }, (_, i) => Math.fround(fs + Math.fround(Math.fround(i) * fd)));
  return _made(dtype, values, [count]);
}

/** For each element of `shape` (row-major), the index of the element it reduces into over `axes`. */
function _reducedIndex(shape, axes) {
  const keep = shape.map((_, a) => !axes.includes(a));
  const outStrides = new Array(shape.length).fill(0);
  let stride = 1;
  for (let a = shape.length - 1; a >= 0; a--) {
    if (keep[a]) {
      outStrides[a] = stride;
      stride *= shape[a];
    }
  }
  const total = _prod(shape);
  const index = new Int32Array(total);
  const at = new Array(shape.length).fill(0);
  for (let k = 0; k < total; k++) {
    let o = 0;
    for (let a = 0; a < shape.length; a++) o += at[a] * outStrides[a];
    index[k] = o;
    for (let a = shape.length - 1; a >= 0; a--) {
      if (++at[a] < shape[a]) break;
      at[a] = 0;
    }
  }
  return [index, stride];
}

/** An integer reduction's f64 result stored as `dtype`, as onnxruntime's CPU kernels store it: at or past
 * the type's largest (lowest) value it is that value, else truncated toward zero (NaN: the lowest). */
function _saturated(y, dtype) {
  const [low, high] = _INTEGER_RANGES[dtype];
  if (y >= Number(high)) return high;
  if (!(y > Number(low))) return low;
  return dtype === "int64" ? BigInt(Math.trunc(y)) : Math.trunc(y);
}

/** ONNX Reduce<kind> over `axes` for kind sum, prod, mean, max and min; a reduction over no element
 * gives the reduction's identity.  Integers other than by max and min reduce in f64 and saturate, as
 * numpy's `integer_reduce`; floats reduce in f32, each step rounded. */
function kernel_reduce(x, kind, axes, keepdims) {
  axes = Array.from(axes);
  const shape = keepdims ? x.shape.map((e, a) => (axes.includes(a) ? 1 : e)) : x.shape.filter((_, a) => !axes.includes(a));
  const [index, size] = _reducedIndex(x.shape, axes);
  const integer = x.dtype in _INTEGER_RANGES;
  if (x.dtype === "bool" && (kind === "max" || kind === "min")) {  // any / all
    const out = new Uint8Array(size).fill(kind === "max" ? 0 : 1);
    for (let k = 0; k < index.length; k++) {
      if (kind === "max" && x.data[k]) out[index[k]] = 1;
      if (kind === "min" && !x.data[k]) out[index[k]] = 0;
    }
    return new Tensor("bool", out, shape);
  }
  if (integer && (kind === "max" || kind === "min")) {  // exact, in the type itself
    const [low, high] = _INTEGER_RANGES[x.dtype];
    const out = new Array(size).fill(kind === "max" ? low : high);
    for (let k = 0; k < index.length; k++) {
      const v = x.data[k];
      const o = index[k];
      if (kind === "max" ? v > out[o] : v < out[o]) out[o] = v;
    }
    return _made(x.dtype, out, shape);
  }
  const identity = { sum: 0, mean: 0, prod: 1, max: -Infinity, min: Infinity }[kind];
  if (identity === undefined) throw new DataError(`the page computes no Reduce of kind ${kind}`);
  // integers accumulate in f64 (numpy's `integer_reduce`), floats in f32 as numpy's do (so a sum past
  // f32's range is infinite there too); the order is row-major, numpy's is pairwise within a row
  const acc = integer ? new Float64Array(size).fill(identity) : new Float32Array(size).fill(identity);
  for (let k = 0; k < index.length; k++) {
    const v = _number(x, k);
    const o = index[k];
    if (kind === "sum" || kind === "mean") acc[o] += v;
    else if (kind === "prod") acc[o] *= v;
    else if (Number.isNaN(v) || (kind === "max" ? v > acc[o] : v < acc[o])) acc[o] = Number.isNaN(acc[o]) ? acc[o] : v;
  }
  if (kind === "mean") {
    const count = index.length / Math.max(size, 1);
    for (let o = 0; o < size; o++) acc[o] /= integer ? Math.max(count, 1) : count;
  }
  const values = integer ? Array.from(acc, (y) => _saturated(y, x.dtype)) : Array.from(acc);
  return _made(x.dtype, values, shape);
}

/** The page's random numbers: xoshiro128** seeded through splitmix32.  One seed repeats a page's run;
 * the numbers are the page's own, not numpy's (the Python module's PCG64), so the same seed gives the
 * two modules different draws. */
class _Rng {
  constructor(seed) {
    let words;
    if (seed === null || seed === undefined) {
      words = new Uint32Array(4);
      globalThis.crypto.getRandomValues(words);
    } else {
      // the seed's 64 bits as a double (an integer seed and a node's float seed alike)
      const bits = new Uint32Array(new Float64Array([Number(seed)]).buffer);
      let x = (bits[0] ^ Math.imul(bits[1], 0x9e3779b9)) >>> 0;
      words = new Uint32Array(4);
      for (let k = 0; k < 4; k++) {  // splitmix32
        x = (x + 0x9e3779b9) >>> 0;
        let z = x;
        z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
        z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
        words[k] = (z ^ (z >>> 16)) >>> 0;
      }
      if (!(words[0] | words[1] | words[2] | words[3])) words[0] = 1;  // xoshiro's one forbidden state
    }
    this.s = words;
    this.spare = null;
  }

  next() {
    const s = this.s;
    const result = Math.imul(((Math.imul(s[1], 5) << 7) | (Math.imul(s[1], 5) >>> 25)), 9) >>> 0;
    const t = s[1] << 9;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 11) | (s[3] >>> 21);
    return result;
  }

  /** A uniform float32 in [0, 1) with 24 random bits (numpy's `random(dtype=float32)` spacing). */
  uniform32() { return (this.next() >>> 8) * 2 ** -24; }

  /** A uniform double in [0, 1) with 53 random bits. */
  uniform() { return ((this.next() >>> 5) * 67108864 + (this.next() >>> 6)) / 9007199254740992; }

  /** A standard normal draw (Box-Muller, its second value kept for the next call). */
  normal() {
    if (this.spare !== null) {
      const z = this.spare;
      this.spare = null;
      return z;
    }
    const radius = Math.sqrt(-2 * Math.log(1 - this.uniform()));  // 1 - u lies in (0, 1]
    const angle = 2 * Math.PI * this.uniform();
    this.spare = radius * Math.sin(angle);
    return radius * Math.cos(angle);
  }
}

/** Values of type `to` drawn from `dist` over x's extents (`shape` without x): `normal` with mean `a`
 * and standard deviation `b`, `uniform` in [`a`, `b`), `bernoulli` 1 where a uniform draw falls below
 * x's probability, else 0.  `rng` is forward's generator (null: seeded by `seed` if given). */
function kernel_random(x, rng, dist, a, b, to, shape = [], seed = null) {
  rng = rng ?? new _Rng(seed);
  const extents = x === null || x === undefined ? Array.from(shape) : x.shape;
  const count = _prod(extents);
  const values = new Array(count);
  for (let k = 0; k < count; k++) {
    if (dist === "bernoulli") values[k] = rng.uniform() < _number(x, k) ? 1 : 0;
    else if (dist === "normal") values[k] = Math.fround(Math.fround(Math.fround(rng.normal()) * Math.fround(b)) + Math.fround(a));
    else values[k] = Math.fround(Math.fround(rng.uniform32() * Math.fround(b - a)) + Math.fround(a));
  }
  if (to === "bool") return new Tensor("bool", Uint8Array.from(values), extents);
  return _made(to, to === "int64" ? values.map((v) => BigInt(v)) : values, extents);
}
