// Drives sluice's gateway with the official openai npm client, changed only
// in its base URL and key, asking for ONE model name that the gateway routes
// over two targets (two simulators with keys of their own). The client reads
// each answer's X-Sluice-Target with .withResponse(), sends a streamed
// request too, a request for a model the gateway does not serve, and then
// reads GET /v1/flows. Prints what it saw as one JSON document;
// cmd/sluice's TestGatewayRoutesOpenAINodeClient runs it and checks it.
//
// Environment: GATEWAY_BASE_URL (e.g. http://127.0.0.1:8080/v1),
// GATEWAY_API_KEY (a gateway client key), GATEWAY_MODEL (the routed name),
// GATEWAY_REQUESTS (how many plain requests, default 4), and optionally
// GATEWAY_NODE_MODULES (else SLUICE_TEST_NODE_MODULES), the node_modules
// folder holding openai.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

async function loadOpenAI() {
  const dir = process.env.GATEWAY_NODE_MODULES || process.env.SLUICE_TEST_NODE_MODULES;
  if (dir && existsSync(join(dir, 'openai', 'index.mjs'))) {
    return (await import(pathToFileURL(join(dir, 'openai', 'index.mjs')).href)).default;
  }
  return (await import('openai')).default;
}

const OpenAI = await loadOpenAI();
const base = process.env.GATEWAY_BASE_URL;
const key = process.env.GATEWAY_API_KEY;
const model = process.env.GATEWAY_MODEL;
const n = Number(process.env.GATEWAY_REQUESTS || 4);
// No retries: each request the client makes is one the gateway answers.
const client = new OpenAI({ baseURL: base, apiKey: key, maxRetries: 0 });

const report = { calls: [], stream: null, unknown_model: null, flows: null };

for (let i = 0; i < n; i++) {
  try {
    const { data, response } = await client.chat.completions
      .create({ model, messages: [{ role: 'user', content: `Route request ${i}.` }], max_tokens: 20 })
      .withResponse();
    report.calls.push({
      ok: true,
      target: response.headers.get('x-sluice-target'),
      text_length: (data.choices[0]?.message?.content ?? '').length,
      usage: data.usage,
    });
  } catch (e) {
    report.calls.push({ ok: false, status: e.status ?? 0, message: String(e.message) });
  }
}

try {
  const { data: stream, response } = await client.chat.completions
    .create({
      model,
      messages: [{ role: 'user', content: 'Route a stream.' }],
      max_tokens: 20,
      stream: true,
      stream_options: { include_usage: true },
    })
    .withResponse();
  let chunks = 0;
  let text = '';
  let usage = null;
  for await (const chunk of stream) {
    chunks++;
    text += chunk.choices?.[0]?.delta?.content ?? '';
    if (chunk.usage) usage = chunk.usage;
  }
  report.stream = { ok: true, target: response.headers.get('x-sluice-target'), chunks, text_length: text.length, usage };
} catch (e) {
  report.stream = { ok: false, status: e.status ?? 0, message: String(e.message) };
}

try {
  await client.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 });
  report.unknown_model = { ok: true };
} catch (e) {
  report.unknown_model = { ok: false, status: e.status ?? 0, code: e.code ?? null, message: String(e.message) };
}

const res = await fetch(base + '/flows', { headers: { Authorization: 'Bearer ' + key } });
const flows = await res.json();
report.flows = {
  status: res.status,
  models: flows.models ?? [],
  targets: (flows.targets ?? []).map((t) => ({ name: t.name, model: t.model, sent: t.sent, picked: t.picked, out: t.out })),
};

process.stdout.write(JSON.stringify(report));
