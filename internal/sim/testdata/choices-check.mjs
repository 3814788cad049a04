// Drives the provider simulator (openai profile) with the official openai npm
// client: n choices plain and streamed (assembled by the client's own stream
// helper), and requests without a model or with a field of the wrong type.
// Prints what the client saw as one JSON document; internal/sim's
// TestOpenAINodeChoices runs it and checks the output.
//
// Environment: SIM_BASE_URL (e.g. http://127.0.0.1:8089/v1), SIM_API_KEY,
// and SIM_NODE_MODULES, the node_modules folder holding openai.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

async function loadOpenAI() {
  const dir = process.env.SIM_NODE_MODULES;
  if (dir && existsSync(join(dir, 'openai', 'index.mjs'))) {
    return (await import(pathToFileURL(join(dir, 'openai', 'index.mjs')).href)).default;
  }
  return (await import('openai')).default;
}

const OpenAI = await loadOpenAI();
const client = new OpenAI({ baseURL: process.env.SIM_BASE_URL, apiKey: process.env.SIM_API_KEY, maxRetries: 0 });
const messages = [{ role: 'user', content: 'Say a few words.' }];

async function failure(call) {
  try {
    await call();
    return { ok: true };
  } catch (err) {
    return { ok: false, status: err.status, message: err.message, type: err.type ?? null };
  }
}

const out = {};

// Three choices in one answer.
{
  const c = await client.chat.completions.create(
    { model: 'gpt-4o-mini', messages, n: 3, max_tokens: 20 },
    { headers: { 'X-Sim-Output-Tokens': '7' } },
  );
  out.plain = {
    indexes: c.choices.map((ch) => ch.index),
    contents: c.choices.map((ch) => ch.message.content),
    finish: c.choices.map((ch) => ch.finish_reason),
    usage: c.usage,
    fingerprint: c.system_fingerprint,
  };
}

// Two choices streamed, read chunk by chunk.
{
  const stream = await client.chat.completions.create(
    { model: 'gpt-4o-mini', messages, n: 2, max_tokens: 20, stream: true, stream_options: { include_usage: true } },
    { headers: { 'X-Sim-Output-Tokens': '5' } },
  );
  const texts = ['', ''];
  let chunks = 0, nullUsage = 0, fingerprints = 0, usage = null;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage === null) nullUsage++;
    if (chunk.usage) usage = chunk.usage;
    if (chunk.system_fingerprint === 'fp_sluice_sim') fingerprints++;
    for (const ch of chunk.choices) texts[ch.index] += ch.delta.content ?? '';
  }
  out.chunks = { texts, chunks, null_usage: nullUsage, fingerprints, usage };
}

// Two choices streamed, assembled by the client's stream helper.
{
  const runner = client.chat.completions.stream(
    { model: 'gpt-4o-mini', messages, n: 2, max_tokens: 20, stream_options: { include_usage: true } },
    { headers: { 'X-Sim-Output-Tokens': '4' } },
  );
  const c = await runner.finalChatCompletion();
  out.assembled = {
    indexes: c.choices.map((ch) => ch.index),
    contents: c.choices.map((ch) => ch.message.content),
    finish: c.choices.map((ch) => ch.finish_reason),
    usage: c.usage ?? null,
    fingerprint: c.system_fingerprint ?? null,
  };
}

out.no_model = await failure(() => client.chat.completions.create({ messages, max_tokens: 5 }));
out.model_number = await failure(() => client.chat.completions.create({ model: 7, messages, max_tokens: 5 }));
out.n_too_many = await failure(() => client.chat.completions.create({ model: 'gpt-4o-mini', messages, n: 129, max_tokens: 5 }));

console.log(JSON.stringify(out));
