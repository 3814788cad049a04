// Drives sluice's gateway with the official openai npm client, changed only
// in its base URL, key and default headers (X-Sluice-Flow picks the flow):
// one large call from the default flow fills most of the key's minute, then
// three flows send their bursts at once and wait in the gateway's lines.
// Prints what the client saw as one JSON document; internal/gateway's
// TestOpenAINodeClientBursts runs it and checks the output.
//
// Environment: GATEWAY_BASE_URL (e.g. http://127.0.0.1:8080/v1),
// GATEWAY_API_KEY (a gateway client key), GATEWAY_PLAN (JSON: {"model",
// "filler_max_tokens", "max_tokens", "flows": [{"name", "count", "stream",
// "include_usage"}]}), and optionally GATEWAY_NODE_MODULES, the
// node_modules folder holding openai.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

async function loadOpenAI() {
  const dir = process.env.GATEWAY_NODE_MODULES;
  if (dir && existsSync(join(dir, 'openai', 'index.mjs'))) {
    return (await import(pathToFileURL(join(dir, 'openai', 'index.mjs')).href)).default;
  }
  return (await import('openai')).default;
}

const OpenAI = await loadOpenAI();
const plan = JSON.parse(process.env.GATEWAY_PLAN);
const client = (headers) =>
  new OpenAI({
    baseURL: process.env.GATEWAY_BASE_URL,
    apiKey: process.env.GATEWAY_API_KEY,
    defaultHeaders: headers,
  });

// call sends one request and returns what the client saw of it.
async function call(c, body, opts) {
  const started = Date.now();
  try {
    if (!body.stream) {
      const r = await c.chat.completions.create(body);
      return { ok: true, ms: Date.now() - started, usage: r.usage, text_length: r.choices[0].message.content.length };
    }
    const stream = await c.chat.completions.create(body);
    let text = '';
    let usage = null;
    let chunks = 0;
    for await (const chunk of stream) {
      chunks++;
      if (chunk.usage) usage = chunk.usage;
      text += chunk.choices[0]?.delta?.content ?? '';
    }
    return { ok: true, ms: Date.now() - started, usage, text_length: text.length, chunks };
  } catch (err) {
    return { ok: false, ms: Date.now() - started, status: err.status ?? null, name: err.constructor?.name, message: err.message };
  }
}

const prompt = (flow, i) => [{ role: 'user', content: `Work on ${flow} item ${i}.` }];
const out = { flows: {} };

// The filler: admitted at once, it holds most of the minute's tokens, so the
// bursts below find the key nearly full and queue.
out.filler = await call(client({}), {
  model: plan.model,
  messages: prompt('filler', 0),
  max_tokens: plan.filler_max_tokens,
});

// The bursts start together: requests of the three flows are sent in turn.
const clients = Object.fromEntries(plan.flows.map((f) => [f.name, client({ 'X-Sluice-Flow': f.name })]));
const calls = Object.fromEntries(plan.flows.map((f) => [f.name, []]));
for (let i = 0; i < Math.max(...plan.flows.map((f) => f.count)); i++) {
  for (const f of plan.flows) {
    if (i >= f.count) continue;
    const body = { model: plan.model, messages: prompt(f.name, i), max_tokens: plan.max_tokens };
    if (f.stream) {
      body.stream = true;
      if (f.include_usage) body.stream_options = { include_usage: true };
    }
    calls[f.name].push(call(clients[f.name], body));
  }
}
const bursts = plan.flows.map(async (f) => {
  const results = await Promise.all(calls[f.name]);
  const failures = results.filter((r) => !r.ok);
  out.flows[f.name] = {
    sent: f.count,
    ok: results.filter((r) => r.ok).length,
    with_usage: results.filter((r) => r.ok && r.usage).length,
    empty_text: results.filter((r) => r.ok && !r.text_length).length,
    completion_tokens: results.reduce((n, r) => n + (r.usage?.completion_tokens ?? 0), 0),
    max_ms: Math.max(...results.map((r) => r.ms)),
    failures: failures.slice(0, 5),
  };
});
await Promise.all(bursts);
console.log(JSON.stringify(out));
