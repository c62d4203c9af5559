// Run a module `loam build --target browser` wrote, in Node with Dawn's WebGPU (the npm package
// `webgpu`): no browser.  The same model.js a page imports; its weights read from the folder.
//
//   node examples/node-host/run.mjs DIR INPUTS.json
//
// INPUTS.json maps each input's ONNX name to {"dtype": "float32", "shape": [4, 8], "data": [...]}
// (int64 data as numbers); the outputs are printed as one JSON object of the same form, by output
// name.  A ShapeError or LoadError is printed as {"error": NAME, "message": ...} with exit status 1.
import { readFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

import { create, globals } from "webgpu";

Object.assign(globalThis, globals);  // GPUBufferUsage, GPUMapMode, ...

const [folder, inputsPath] = process.argv.slice(2);
if (!folder || !inputsPath) {
  console.error("usage: node run.mjs DIR INPUTS.json");
  process.exit(2);
}
const model = await import(pathToFileURL(resolve(folder, "model.js")).href);
model.useGpu(create([]));
const readWeight = async (name) => {
  const bytes = await readFile(join(folder, "weights", name));
  return bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
};
const given = JSON.parse(await readFile(inputsPath, "utf8"));
try {
  const weights = await model.Weights.load(readWeight);
  const inputs = model.INPUTS.map(([name]) => {
    const { dtype, shape, data } = given[name] ?? {};
    return model.tensor(dtype, data ?? [], shape);
  });
  const start = performance.now();
  const out = await model.forward(weights, ...inputs);
  const ms = performance.now() - start;
  const named = model.OUTPUTS.length === 1 ? { [model.OUTPUTS[0]]: out } : out;
  const result = {};
  for (const name of model.OUTPUTS) {
    const t = named[name];
    result[name] = { dtype: t.dtype, shape: t.shape, data: Array.from(t.data, (v) => (typeof v === "bigint" ? Number(v) : v)) };
  }
  console.log(JSON.stringify({ outputs: result, ms }));
  process.exit(0);
} catch (e) {
  console.log(JSON.stringify({ error: e.name, message: e.message }));
  process.exit(1);
}
