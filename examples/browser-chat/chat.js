// The chat page: tokenizes with Hugging Face's tokenizers.js, decodes greedily with the Loam module.
//
// The prompt is the chat template rendered around the question (chat.json, written by build.py from
// the GGUF's template); the model reads it through an empty past, then one token a step, each step's
// presents fed back as the next step's pasts.  `window.loamChat` exposes `ready` and `ask` to scripts
// (the repository's browser test drives the page through them and the form).
import { Tokenizer } from "./vendor/tokenizers.mjs";
import * as model from "./model/model.js";

const $ = (id) => document.getElementById(id);

async function setup() {
  const read = (name) => fetch(new URL(name, import.meta.url)).then((r) => r.json());
  const [tokenizerJson, tokenizerConfig, chat] = await Promise.all(
    ["tokenizer.json", "tokenizer_config.json", "chat.json"].map(read),
  );
  const tokenizer = new Tokenizer(tokenizerJson, tokenizerConfig);
  $("status").textContent = "loading the weights…";
  const weights = await model.Weights.load(new URL("./model/weights/", import.meta.url));
  return { tokenizer, chat, weights };
}

function emptyPast() {
  const past = {};
  for (const [name, , extents] of model.INPUTS) {
    if (name.startsWith("past_key_values.")) past[name] = new model.Tensor("float32", new Float32Array(0), [1, extents[1], 0, extents[3]]);
  }
  return past;
}

function lastRowArgmax(logits) {
  const [, rows, vocab] = logits.shape;
  const last = logits.data.subarray((rows - 1) * vocab, rows * vocab);
  let best = 0;
  for (let v = 1; v < vocab; v++) if (last[v] > last[best]) best = v;
  return best;
}

/** Greedy reply to `question`: at most `maxTokens` tokens, stopping at the end-of-text token.
 * `onToken({ids, text, prefillMs, tokensPerSecond})` is called after each token. */
export async function ask(question, maxTokens = 64, onToken = () => {}) {
  const { tokenizer, chat, weights } = await ready;
  const prompt = tokenizer.encode(chat.before + question + chat.after, { add_special_tokens: false }).ids;
  let past = emptyPast();
  let ids = prompt;
  let length = 0;
  const out = [];
  const start = performance.now();
  let firstAt = null;
  while (out.length < maxTokens) {
    length += ids.length;
    const inputs = {
      input_ids: new model.Tensor("int64", BigInt64Array.from(ids, (v) => BigInt(v)), [1, ids.length]),
      attention_mask: new model.Tensor("int64", new BigInt64Array(length).fill(1n), [1, length]),
      ...past,
    };
    const result = await model.forward(weights, ...model.INPUTS.map(([name]) => inputs[name]));
    const token = lastRowArgmax(result.logits);
    out.push(token);
    const now = performance.now();
    firstAt ??= now;
    const decoded = out.length > 1 ? (out.length - 1) / ((now - firstAt) / 1000) : null;
    const text = tokenizer.decode(out, { skip_special_tokens: true });
    onToken({ ids: out.slice(), text, prefillMs: firstAt - start, tokensPerSecond: decoded });
    if (token === chat.eos_token_id) break;
    ids = [token];
    past = {};
    for (const name of Object.keys(inputs)) {
      if (name.startsWith("past_key_values.")) past[name] = result[name.replace("past_key_values", "present")];
    }
  }
  return { prompt, ids: out, text: tokenizer.decode(out, { skip_special_tokens: true }) };
}

const ready = setup();
window.loamChat = { ready, ask, last: null };

ready.then(
  () => {
    $("status").textContent = "ready: WebGPU";
    $("send").disabled = false;
  },
  (e) => { $("status").textContent = `could not start: ${e.name}: ${e.message}`; },
);

$("ask").addEventListener("submit", async (event) => {
  event.preventDefault();
  const question = $("question").value.trim();
  if (!question) return;
  $("send").disabled = true;
  const you = document.createElement("div");
  you.className = "you";
  you.textContent = question;
  const bot = document.createElement("div");
  bot.className = "bot";
  $("log").append(you, bot);
  try {
    const max = Math.max(1, Math.min(256, Number($("max-tokens").value) || 64));
    const done = await ask(question, max, ({ ids, text, prefillMs, tokensPerSecond }) => {
      bot.textContent = text;
      const rate = tokensPerSecond === null ? "" : `, ${tokensPerSecond.toFixed(2)} tokens/s`;
      $("stats").textContent = `${ids.length} tokens; prompt ${(prefillMs / 1000).toFixed(1)} s${rate}`;
    });
    window.loamChat.last = done;
  } catch (e) {
    bot.textContent = `${e.name}: ${e.message}`;
    window.loamChat.last = { error: `${e.name}: ${e.message}` };
  } finally {
    $("send").disabled = false;
  }
});
