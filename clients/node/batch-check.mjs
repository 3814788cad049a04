// A batch job as users write it with the official openai npm client: each
// flow's requests go through a pool of concurrent workers, with the SDK's
// defaults (maxRetries 2, timeout 600 s, retry-after honoured as sent), the
// base URL and key from the environment, and the flow named in a default
// header (X-Sluice-Flow; a provider ignores it). The flows run side by side.
// Prints one JSON document of what the client saw; internal/gateway's
// TestBatchClients runs it against the simulator directly and through the
// gateway, and compares the two.
//
// Environment: BATCH_BASE_URL (e.g. http://127.0.0.1:8080/v1),
// BATCH_API_KEY, BATCH_PLAN_FILE (a JSON file: {"model", "max_tokens",
// "flows": [{"name", "workers", "prompts": [...]}]}), and optionally
// BATCH_NODE_MODULES, the node_modules folder holding openai, and
// BATCH_WAIT_FOR_START: when set, the job writes "ready" on stderr once
// loaded and starts when a line comes on stdin, so that several runs can
// start together.
//
// Everything runs on the wall clock: the SDK is used as it ships, with no
// option but its base URL, key and default headers.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

async function loadOpenAI() {
  const dir = process.env.BATCH_NODE_MODULES;
  if (dir && existsSync(join(dir, 'openai', 'index.mjs'))) {
    return (await import(pathToFileURL(join(dir, 'openai', 'index.mjs')).href)).default;
  }
  return (await import('openai')).default;
}

const OpenAI = await loadOpenAI();
const plan = JSON.parse(readFileSync(process.env.BATCH_PLAN_FILE, 'utf8'));

function makeClient(headers) {
  return new OpenAI({
    baseURL: process.env.BATCH_BASE_URL,
    apiKey: process.env.BATCH_API_KEY,
    defaultHeaders: headers,
  });
}

if (process.env.BATCH_WAIT_FOR_START) {
  // Loaded is not warm: the first requests a node process makes compile
  // the SDK's and fetch's code, which takes the CPU for a while. One GET
  // /models (which no rate limit counts) does that before the start.
  await makeClient({}).models.list();
  process.stderr.write('ready\n');
  await new Promise((resolve) => process.stdin.once('data', resolve));
  process.stdin.destroy();
}

const start = Date.now();

async function runFlow(flow) {
  const client = makeClient({ 'X-Sluice-Flow': flow.name });
  const results = new Array(flow.prompts.length);
  let next = 0;
  async function worker() {
    while (next < flow.prompts.length) {
      const i = next++;
      const started = Date.now();
      try {
        const r = await client.chat.completions.create({
          model: plan.model,
          messages: [{ role: 'user', content: flow.prompts[i] }],
          max_tokens: plan.max_tokens,
        });
        results[i] = { ok: true, ms: Date.now() - started, done_ms: Date.now() - start, tokens: r.usage?.total_tokens ?? 0 };
      } catch (err) {
        results[i] = {
          ok: false,
          ms: Date.now() - started,
          done_ms: Date.now() - start,
          status: err.status ?? null,
          name: err.constructor?.name,
          message: String(err.message).slice(0, 300),
        };
      }
    }
  }
  await Promise.all(Array.from({ length: Math.min(flow.workers, flow.prompts.length) }, worker));
  const failures = results.filter((r) => !r.ok);
  const byStatus = {};
  for (const f of failures) byStatus[f.status ?? f.name] = (byStatus[f.status ?? f.name] ?? 0) + 1;
  return {
    name: flow.name,
    sent: flow.prompts.length,
    ok: results.length - failures.length,
    failed: failures.length,
    failed_by_status: byStatus,
    wall_ms: Date.now() - start,
    // When each successful request ended, from the start of the job.
    done_ms: results.filter((r) => r.ok).map((r) => r.done_ms).sort((a, b) => a - b),
    failures: failures.slice(0, 5),
  };
}

const flows = await Promise.all(plan.flows.map(runFlow));
// start_ms is the job's start in Unix milliseconds, so that the caller can
// place every done_ms on its own clock.
const out = { ok: 0, failed: 0, start_ms: start, wall_ms: Date.now() - start, flows: {} };
for (const f of flows) {
  out.ok += f.ok;
  out.failed += f.failed;
  out.flows[f.name] = f;
}
console.log(JSON.stringify(out));
