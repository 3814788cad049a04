// Drives `sluice serve --gateway` with three JavaScript clients no one here
// wrote, each changed only in its base URL and key: the official openai
// client, the Vercel AI SDK (ai with @ai-sdk/openai) and LangChain JS
// (@langchain/openai). With each it sends a plain completion, a streamed
// one, and a request carrying tools with a tool call and its result in the
// history; then the calls the gateway does not serve: the AI SDK's default
// factory openai(model), which calls the Responses API, and the openai
// client's responses and embeddings. Prints what each client saw as one
// JSON document; cmd/sluice's TestServeGatewayRealClients runs it and
// checks the output.
//
// Environment: GATEWAY_BASE_URL (serve's address with /v1, e.g.
// http://127.0.0.1:8288/v1), GATEWAY_API_KEY (a client key of the gateway),
// GATEWAY_MODEL, and GATEWAY_NODE_MODULES (else SLUICE_TEST_NODE_MODULES),
// the node_modules folder holding the packages; without either, the
// packages are imported from this folder's node_modules.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const modules = process.env.GATEWAY_NODE_MODULES || process.env.SLUICE_TEST_NODE_MODULES;

// entry picks the ES module file of a package's export conditions.
function entry(conditions) {
  if (typeof conditions === 'string') return conditions;
  for (const c of ['import', 'node', 'default']) {
    if (conditions?.[c]) return entry(conditions[c]);
  }
  return null;
}

// load imports a package (or one of its subpaths, e.g. './messages') from
// the node_modules folder named in the environment, as Node would resolve
// it there.
async function load(name, subpath = '.') {
  if (!modules || !existsSync(join(modules, name, 'package.json'))) {
    return import(subpath === '.' ? name : name + subpath.slice(1));
  }
  const pkg = JSON.parse(readFileSync(join(modules, name, 'package.json'), 'utf8'));
  let exp = pkg.exports;
  if (exp && typeof exp === 'object' && Object.keys(exp).some((k) => k.startsWith('.'))) {
    exp = exp[subpath];
  } else if (subpath !== '.') {
    exp = null;
  }
  const file = entry(exp) ?? (subpath === '.' ? pkg.module ?? pkg.main : null);
  if (!file) throw new Error(`${name}: no ES module entry for ${subpath}`);
  return import(pathToFileURL(join(modules, name, file)).href);
}

globalThis.AI_SDK_LOG_WARNINGS = false; // the report is stdout's one line

const { default: OpenAI } = await load('openai');
const { generateText, streamText, tool, jsonSchema } = await load('ai');
const { createOpenAI } = await load('@ai-sdk/openai');
const { ChatOpenAI } = await load('@langchain/openai');
const { AIMessage, HumanMessage, ToolMessage } = await load('@langchain/core', './messages');

const baseURL = process.env.GATEWAY_BASE_URL;
const apiKey = process.env.GATEWAY_API_KEY;
const model = process.env.GATEWAY_MODEL;
const maxTokens = 16;
const question = 'What is the weather in Paris?';
const weather = {
  name: 'get_weather',
  description: 'The weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
};

// leg runs one call and returns what the client saw of it: its text's
// length, usage and tool calls, or its error as the client shows it.
async function leg(fn) {
  try {
    const r = await fn();
    return { ok: true, ...r };
  } catch (err) {
    return {
      ok: false,
      name: err?.constructor?.name ?? null,
      status: err?.status ?? err?.statusCode ?? err?.lastError?.statusCode ?? null,
      message: String(err?.message ?? err),
    };
  }
}

const out = {};

// The official openai client.
const oc = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
out.openai = {
  plain: await leg(async () => {
    const r = await oc.chat.completions.create({ model, max_tokens: maxTokens, messages: [{ role: 'user', content: 'Say hello.' }] });
    return { text_length: r.choices[0].message.content.length, usage: r.usage ?? null };
  }),
  stream: await leg(async () => {
    const s = await oc.chat.completions.create({
      model, max_tokens: maxTokens, stream: true, stream_options: { include_usage: true },
      messages: [{ role: 'user', content: 'Say hello slowly.' }],
    });
    let text = '';
    let usage = null;
    let chunks = 0;
    for await (const c of s) {
      chunks++;
      if (c.usage) usage = c.usage;
      text += c.choices[0]?.delta?.content ?? '';
    }
    return { text_length: text.length, usage, chunks };
  }),
  tools: await leg(async () => {
    const r = await oc.chat.completions.create({
      model, max_tokens: maxTokens, tools: [{ type: 'function', function: weather }], tool_choice: 'auto',
      messages: [
        { role: 'user', content: question },
        { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: weather.name, arguments: '{"city":"Paris"}' } }] },
        { role: 'tool', tool_call_id: 'call_1', content: 'sunny, 21 °C' },
      ],
    });
    const m = r.choices[0].message;
    return { text_length: (m.content ?? '').length, usage: r.usage ?? null, tool_calls: m.tool_calls?.length ?? 0 };
  }),
  responses: await leg(async () => {
    await oc.responses.create({ model, input: 'Say hello.' });
    return {};
  }),
  embeddings: await leg(async () => {
    await oc.embeddings.create({ model, input: 'hello' });
    return {};
  }),
};

// The Vercel AI SDK: .chat(model) calls chat completions; the default
// factory, provider(model), calls the Responses API.
const provider = createOpenAI({ baseURL, apiKey });
const usageOf = (u) => (u ? { prompt_tokens: u.inputTokens ?? null, completion_tokens: u.outputTokens ?? null } : null);
out.ai_sdk = {
  plain: await leg(async () => {
    const r = await generateText({ model: provider.chat(model), prompt: 'Say hello.', maxOutputTokens: maxTokens, maxRetries: 0 });
    return { text_length: r.text.length, usage: usageOf(r.usage) };
  }),
  stream: await leg(async () => {
    let failure = null;
    const r = streamText({
      model: provider.chat(model), prompt: 'Say hello slowly.', maxOutputTokens: maxTokens, maxRetries: 0,
      onError: ({ error }) => { failure = error; },
    });
    let text = '';
    let chunks = 0;
    for await (const part of r.textStream) {
      chunks++;
      text += part;
    }
    if (failure) throw failure;
    return { text_length: text.length, usage: usageOf(await r.usage), chunks };
  }),
  tools: await leg(async () => {
    const r = await generateText({
      model: provider.chat(model), maxOutputTokens: maxTokens, maxRetries: 0,
      tools: { [weather.name]: tool({ description: weather.description, inputSchema: jsonSchema(weather.parameters), execute: async () => 'sunny, 21 °C' }) },
      messages: [
        { role: 'user', content: question },
        { role: 'assistant', content: [{ type: 'tool-call', toolCallId: 'call_1', toolName: weather.name, input: { city: 'Paris' } }] },
        { role: 'tool', content: [{ type: 'tool-result', toolCallId: 'call_1', toolName: weather.name, output: { type: 'text', value: 'sunny, 21 °C' } }] },
      ],
    });
    return { text_length: r.text.length, usage: usageOf(r.usage), tool_calls: r.toolCalls.length };
  }),
  default_factory: await leg(async () => {
    await generateText({ model: provider(model), prompt: 'Say hello.', maxOutputTokens: maxTokens, maxRetries: 0 });
    return {};
  }),
};

// LangChain JS.
const lc = new ChatOpenAI({ model, apiKey, maxTokens, maxRetries: 0, configuration: { baseURL } });
const lcUsage = (m) => (m?.usage_metadata ? { prompt_tokens: m.usage_metadata.input_tokens, completion_tokens: m.usage_metadata.output_tokens } : null);
out.langchain = {
  plain: await leg(async () => {
    const m = await lc.invoke([new HumanMessage('Say hello.')]);
    return { text_length: String(m.content).length, usage: lcUsage(m) };
  }),
  stream: await leg(async () => {
    let text = '';
    let chunks = 0;
    let usage = null;
    for await (const c of await lc.stream([new HumanMessage('Say hello slowly.')])) {
      chunks++;
      text += String(c.content);
      usage = lcUsage(c) ?? usage;
    }
    return { text_length: text.length, usage, chunks };
  }),
  tools: await leg(async () => {
    const m = await lc.bindTools([{ type: 'function', function: weather }]).invoke([
      new HumanMessage(question),
      new AIMessage({ content: '', tool_calls: [{ id: 'call_1', name: weather.name, args: { city: 'Paris' } }] }),
      new ToolMessage({ tool_call_id: 'call_1', content: 'sunny, 21 °C' }),
    ]);
    return { text_length: String(m.content).length, usage: lcUsage(m), tool_calls: m.tool_calls?.length ?? 0 };
  }),
};

console.log(JSON.stringify(out));
