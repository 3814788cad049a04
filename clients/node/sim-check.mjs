// Drives sluice's provider simulator with the official openai npm client,
// unchanged but for its base URL and key, and prints what the client saw as
// one JSON document. internal/sim's TestOpenAINodeClient runs it against a
// simulator with tight Groq limits and checks the output.
//
// Environment: SIM_BASE_URL (e.g. http://127.0.0.1:8089/v1), SIM_API_KEY,
// and optionally SIM_NODE_MODULES, the node_modules folder holding openai.
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
const client = new OpenAI({
  baseURL: process.env.SIM_BASE_URL,
  apiKey: process.env.SIM_API_KEY,
  maxRetries: 0,
});
const model = 'llama-3.1-8b-instant';
const words = (n) => 'word '.repeat(n);

// failure returns what the client exposes of a rejected call.
async function failure(call) {
  try {
    await call();
    return { ok: true };
  } catch (err) {
    return {
      ok: false,
      name: err.constructor?.name,
      status: err.status,
      retry_after: err.headers?.get('retry-after') ?? null,
      message: err.message,
      type: err.type ?? null,
      code: err.code ?? null,
    };
  }
}

const out = {};

// Streaming, with usage in the final chunk.
{
  const stream = await client.chat.completions.create(
    {
      model,
      messages: [{ role: 'user', content: 'Stream a few words.' }],
      max_tokens: 20,
      stream: true,
      stream_options: { include_usage: true },
    },
    { headers: { 'X-Sim-Output-Tokens': '9' } },
  );
  let text = '';
  let usage = null;
  let chunks = 0;
  let finish = null;
  for await (const chunk of stream) {
    chunks++;
    for (const choice of chunk.choices) {
      text += choice.delta?.content ?? '';
      finish = choice.finish_reason ?? finish;
    }
    if (chunk.usage) usage = chunk.usage;
  }
  out.stream = { text, usage, chunks, finish_reason: finish };
}

// A plain completion with real usage.
{
  const res = await client.chat.completions.create(
    { model, messages: [{ role: 'user', content: 'Say hello.' }], max_tokens: 50 },
    { headers: { 'X-Sim-Output-Tokens': '12' } },
  );
  out.completion = {
    content: res.choices[0].message.content,
    finish_reason: res.choices[0].finish_reason,
    usage: res.usage,
  };
}

// Fill most of the tokens-per-minute window, then ask for more than is left.
{
  const res = await client.chat.completions.create({
    model,
    messages: [{ role: 'user', content: words(500) }],
    max_tokens: 800,
  });
  out.fill = { usage: res.usage };
}
out.rate_limit = await failure(() =>
  client.chat.completions.create({ model, messages: [{ role: 'user', content: words(600) }], max_tokens: 100 }),
);

// Requests that can never fit: a prompt over TPM (413) and max_tokens over OTPM (429, retry-after 900).
out.too_large_tpm = await failure(() =>
  client.chat.completions.create({ model, messages: [{ role: 'user', content: words(2100) }], max_tokens: 10 }),
);
out.too_large_otpm = await failure(() =>
  client.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 1200 }),
);

process.stdout.write(JSON.stringify(out) + '\n');
