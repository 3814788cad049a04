// Drives sluice's web dashboard in a real browser — the distribution's
// Chromium, through playwright-core, which downloads no browser — as a person
// would. First on a running sluice demo: reads its side-by-side page /demo
// (both sides' jobs, the chart of their progress, the simulated clock),
// follows the navigation to the demo's overview, a backfill's flow page,
// one of its runs that saved articles and that run's history. Then on the
// sample app: signs in on the login form, reads the overview's gauges, opens a
// backfill's flow page, the runs list, a completed run and a failed one,
// reads the failed run's history (table and timeline), re-runs it from its
// second step and follows the new run until it has completed, searches the
// runs by the text of the failure, and replays the failed run's event,
// following that run until it has completed. Takes a
// screenshot of every page it checks. cmd/sluice's TestDashboardInBrowser
// starts the server on a sample app against the provider simulator, runs
// this, and checks what it printed.
//
// Environment:
//   DEMO_URL             the demo's base URL (http://127.0.0.1:PORT)
//   DASHBOARD_URL        the sample app's server's base URL
//   DASHBOARD_TOKEN      the token the server was started with (not argv:
//                        argv is visible to every user of the machine)
//   DASHBOARD_ARTIFACTS  folder the screenshots are written to
//   DASHBOARD_CHROMIUM   path of the chromium binary
//   DASHBOARD_PROFILE    an empty folder for the browser's user data
//   DASHBOARD_EXPECT     JSON: {"demo": {"key", "clock", "sides":
//                        [{"side", "label"}, …], "jobs": […], "flow",
//                        "function"}, "key", "limits": {"rpm": 60, …}, "flow",
//                        "flow_state", "items", "rejected_once",
//                        "completed_run", "completed_function",
//                        "completed_steps": […], "failed_run",
//                        "failed_function", "failed_step", "failed_error",
//                        "rerun_steps": […]}
//   DASHBOARD_DEADLINE_MS  bound of the whole check (default 60000)
//   DASHBOARD_NODE_MODULES optionally, the node_modules folder holding
//                        playwright-core
//
// On success it prints one JSON document (what it saw, the new run's ID and
// the screenshots) and exits 0; on any failure it prints
// "dashboard-check: <step>: <what is wrong>" on stderr, saves failure.png of
// the page it was on, and exits 1.
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

async function loadChromium() {
  const dir = process.env.DASHBOARD_NODE_MODULES;
  if (dir && existsSync(join(dir, 'playwright-core', 'index.mjs'))) {
    return (await import(pathToFileURL(join(dir, 'playwright-core', 'index.mjs')).href)).chromium;
  }
  return (await import('playwright-core')).chromium;
}

class CheckError extends Error {}

let step = 'start';
function fail(message) {
  throw new CheckError(message);
}

function need(name) {
  const v = process.env[name];
  if (!v) {
    console.error(`dashboard-check: ${name} is not set`);
    process.exit(1);
  }
  return v;
}

const base = need('DASHBOARD_URL').replace(/\/+$/, '');
const demoBase = need('DEMO_URL').replace(/\/+$/, '');
const token = need('DASHBOARD_TOKEN');
const artifacts = need('DASHBOARD_ARTIFACTS');
const executablePath = need('DASHBOARD_CHROMIUM');
const want = JSON.parse(need('DASHBOARD_EXPECT'));
const deadlineMs = Number(process.env.DASHBOARD_DEADLINE_MS || 60000);
const began = Date.now();

// The whole check is bounded: a page that never loads, a selector that never
// appears, a run that never ends all end it with a failure.
const watchdog = setTimeout(() => {
  console.error(`dashboard-check: ${step}: not done within ${deadlineMs} ms`);
  process.exit(1); // playwright kills the browser it launched on exit
}, deadlineMs);
watchdog.unref();

// attr quotes a value for a CSS attribute selector.
const attr = (v) => '"' + String(v).replace(/["\\]/g, '\\$&') + '"';
// num reads a figure as the dashboard writes it: 20,000 → 20000.
const num = (s) => (s == null || !/\d/.test(s) ? NaN : Number(String(s).replace(/[^\d.-]/g, '')));

mkdirSync(artifacts, { recursive: true });
let profile = process.env.DASHBOARD_PROFILE;
let ownProfile = false;
if (!profile) {
  profile = mkdtempSync(join(tmpdir(), 'sluice-dashboard-'));
  ownProfile = true;
}

const chromium = await loadChromium();
const context = await chromium.launchPersistentContext(profile, {
  executablePath,
  headless: true,
  // The machine may have no network: without the background-networking
  // flags Chromium keeps trying to reach Google's services.
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  viewport: { width: 1280, height: 800 },
  deviceScaleFactor: 1,
  timeout: 20000,
});
context.setDefaultTimeout(10000);
context.setDefaultNavigationTimeout(20000);
const page = context.pages()[0] ?? (await context.newPage());

// Everything the pages do is watched: a script error, a console error (a
// refused Content-Security-Policy says so there), a request to another site,
// an error status nobody asked for.
const problems = [];
let allowStatus = null; // {status, path}: the one error a step provokes
page.on('pageerror', (e) => problems.push(`script error on ${page.url()}: ${e.message}`));
page.on('console', (m) => {
  if (m.type() !== 'error') return;
  if (allowStatus && m.text().includes(`status of ${allowStatus.status}`)) return;
  problems.push(`console error on ${page.url()}: ${m.text()}`);
});
page.on('request', (r) => {
  const u = r.url();
  if (!u.startsWith(base + '/') && !u.startsWith(demoBase + '/') && !u.startsWith('data:')) problems.push(`request to another site: ${u}`);
});
page.on('response', (r) => {
  if (r.status() < 400) return;
  const p = new URL(r.url()).pathname;
  if (allowStatus && allowStatus.status === r.status() && allowStatus.path === p) return;
  problems.push(`${r.request().method()} ${p} answered ${r.status()}`);
});
function clean() {
  if (problems.length) fail(problems.join('; '));
}

const shots = [];
// shot saves the whole page, or only the element el (a locator).
async function shot(name, el) {
  const path = join(artifacts, name + '.png');
  await (el ? el.screenshot({ path }) : page.screenshot({ path, fullPage: true }));
  shots.push(path);
}

const pathname = () => new URL(page.url()).pathname;

// open loads path of the server at origin (the sample app's by default)
// and wants a 200.
async function open(path, origin = base) {
  const resp = await page.goto(origin + path);
  if (!resp) fail(`GET ${path}: no response`);
  if (resp.status() !== 200) fail(`GET ${path} answered ${resp.status()}`);
  if (pathname() !== new URL(origin + path).pathname) fail(`GET ${path} ended on ${page.url()}`);
}

// follow clicks the link or button sel and waits for the page it leads to.
async function follow(sel, to) {
  const target = page.locator(sel);
  if ((await target.count()) !== 1) fail(`want one ${sel} on ${pathname()}, found ${await target.count()}`);
  await Promise.all([page.waitForURL(to), target.click()]);
  await page.waitForLoadState('load');
}

// onRun is whether a URL is run id's page.
const onRun = (id) => (u) => decodeURIComponent(u.pathname) === '/runs/' + id;

// runOnPage reads the run page's summary and steps in one go: the page may
// swap its content for a fresher one at any moment.
const runOnPage = () =>
  page.evaluate(() => {
    const s = document.querySelector('section.summary[data-run]');
    if (!s) return null;
    const text = (el) => (el ? el.textContent.trim() : null);
    return {
      id: s.getAttribute('data-run'),
      status: s.getAttribute('data-status'),
      function: text(s.querySelector('.function')),
      error: text(s.querySelector('.error-box .error-text')),
      rerunOf: text(s.querySelector('dd a[href^="/runs/"] code')),
      canRerun: !!s.querySelector('form[action$="/rerun"] button'),
      canCancel: !!s.querySelector('form[action$="/cancel"] button'),
      steps: [...document.querySelectorAll('li.step')].map((li) => ({
        name: li.getAttribute('data-step'),
        status: li.getAttribute('data-status'),
        attempts: Number(li.getAttribute('data-attempts')),
        error: text(li.querySelector('.error-box .error-text')),
        classes: [...li.querySelectorAll('table.attempts tbody tr td:nth-child(2)')].map((td) => td.textContent.trim()),
      })),
      bars: document.querySelectorAll('svg.timeline rect.step-bar').length,
    };
  });

// historyOnPage reads the run page's History section: a row per attempt
// of its table, and its timeline's lanes, bars and time axis.
const historyOnPage = () =>
  page.evaluate(() => {
    const rows = [...document.querySelectorAll('#history-table tbody tr[data-step]')].map((tr) => ({
      step: tr.getAttribute('data-step'),
      index: Number(tr.getAttribute('data-step-index')),
      attempt: Number(tr.getAttribute('data-attempt')),
      status: tr.getAttribute('data-status'),
      cells: [...tr.querySelectorAll('td')].map((td) => td.textContent.trim()),
    }));
    const svg = document.querySelector('#timeline');
    return {
      rows,
      ticks: svg ? [...svg.querySelectorAll('.tick-label')].map((t) => t.textContent.trim()) : [],
      lanes: svg ? [...svg.querySelectorAll('.lane-label')].map((t) => t.textContent.trim()) : [],
      bars: svg ? svg.querySelectorAll('.attempt-bar').length : 0,
    };
  });

// wantTimeline checks that a history's timeline draws its table: a bar per
// attempt, a lane per attempt labelled with its step and attempt (and one
// for the run's wait in its queue), and a time axis with units.
function wantTimeline(history, what) {
  if (history.bars !== history.rows.length) fail(`${what}: ${history.bars} bars on the timeline for ${history.rows.length} attempts`);
  const attemptLanes = history.lanes.filter((l) => l !== 'queued');
  if (attemptLanes.length !== history.rows.length || !history.rows.every((r, i) => attemptLanes[i].includes(r.step) && attemptLanes[i].includes('#' + r.attempt))) {
    fail(`${what}: the timeline's lanes are labelled ${JSON.stringify(history.lanes)} for attempts ${JSON.stringify(history.rows.map((r) => [r.step, r.attempt]))}`);
  }
  if (history.ticks.length < 2 || !history.ticks.every((t) => /\d\s*(ms|s|m|h)\b/.test(t) || /^0$/.test(t))) fail(`${what}: the timeline's axis is labelled ${JSON.stringify(history.ticks)}, want times with units`);
}

function wantSteps(r, names, what) {
  const got = r.steps.map((s) => s.name);
  if (JSON.stringify(got) !== JSON.stringify(names)) fail(`${what}: steps ${JSON.stringify(got)}, want ${JSON.stringify(names)}`);
  if (r.bars !== names.length) fail(`${what}: ${r.bars} bars on the timeline for ${names.length} steps`);
}

const out = { screenshots: shots };
let code = 0;
try {
  // --- The demo's side-by-side page: both sides, their chart, the clock ---
  // The demo's server has no token (it serves on loopback only): no sign-in.
  step = 'demo';
  const demo = want.demo;
  out.demo = {};
  await open('/demo', demoBase);
  // One read: the page swaps its content for a fresher one every 2 s.
  const side = await page.evaluate(() => {
    const text = (el) => (el ? el.textContent.trim() : null);
    const svg = document.querySelector('main figure.chart svg');
    return {
      h1: text(document.querySelector('main h1')),
      stamp: text(document.querySelector('main .head .stamp .clock')),
      lead: text(document.querySelector('main p.lead')),
      current: text(document.querySelector('header nav a[aria-current=page]')),
      sides: [...document.querySelectorAll('main section.side[data-side]')].map((s) => ({
        side: s.getAttribute('data-side'),
        label: text(s.querySelector('h2')),
        heads: [...s.querySelectorAll('table.flows thead th')].map(text),
        jobs: [...s.querySelectorAll('table.flows tbody tr[data-job]')].map((tr) => {
          const p = tr.querySelector('.progress');
          return {
            name: tr.getAttribute('data-job'),
            done: p && p.getAttribute('data-done'),
            total: p && p.getAttribute('data-total'),
            doneText: text(p && p.querySelector('.figures .done')),
            totalText: text(p && p.querySelector('.figures .total')),
            state: text(tr.querySelector('.badge')),
          };
        }),
        key: text(s.querySelector('p.key')),
      })),
      chart: svg && {
        title: text(svg.querySelector('text.title')),
        panels: [...svg.querySelectorAll('g.panel')].map((g) => ({
          title: text(g.querySelector('.panel-title')),
          unit: text(g.querySelector('text.unit')),
          yticks: [...g.querySelectorAll('text.ytick')].map(text),
          xticks: [...g.querySelectorAll('text.xtick')].map(text),
          series: [...g.querySelectorAll('polyline.series')].map((l) => ({
            name: l.getAttribute('data-series'),
            points: (l.getAttribute('points') || '').trim().split(/\s+/).filter(Boolean).length,
          })),
        })),
        caption: text(document.querySelector('main figure.chart figcaption')),
      },
    };
  });
  if (side.h1 !== 'Side by side' || side.current !== 'Side by side') fail(`the page is ${JSON.stringify(side.h1)}, its link in the header ${JSON.stringify(side.current)}`);
  // The clock is the demo's simulated one, and every time on the page says so.
  if (side.stamp !== `(${demo.clock})`) fail(`the page's time is labelled ${JSON.stringify(side.stamp)}, want (${demo.clock})`);
  if (!side.lead || !side.lead.includes(`simulated `) || !side.lead.includes(`(${demo.clock})`)) fail(`the page's lead ${JSON.stringify(side.lead)} does not name the simulated clock`);
  const sidesSeen = side.sides.map((s) => ({ side: s.side, label: s.label }));
  if (JSON.stringify(sidesSeen) !== JSON.stringify(demo.sides)) fail(`the sides ${JSON.stringify(sidesSeen)}, want ${JSON.stringify(demo.sides)}`);
  out.demo.done = {};
  for (const s of side.sides) {
    if (!s.heads.includes('Per simulated hour')) fail(`${s.label}: the rate's column is headed ${JSON.stringify(s.heads)}, want "Per simulated hour"`);
    const jobs = s.jobs.map((j) => j.name);
    if (JSON.stringify(jobs) !== JSON.stringify(demo.jobs)) fail(`${s.label}: jobs ${JSON.stringify(jobs)}, want ${JSON.stringify(demo.jobs)}`);
    for (const j of s.jobs) {
      if (num(j.doneText) !== num(j.done) || num(j.totalText) !== num(j.total) || !(num(j.done) <= num(j.total))) fail(`${s.label} ${j.name}: shows ${j.doneText} / ${j.totalText}, its bar's data ${j.done} / ${j.total}`);
      if (!j.state) fail(`${s.label} ${j.name}: no state`);
    }
    const done = s.jobs.reduce((n, j) => n + num(j.done), 0);
    if (!(done > 0)) fail(`${s.label}: no job shows an article done: ${JSON.stringify(s.jobs)}`);
    out.demo.done[s.side] = done;
    if (!/^Key \S+: answered [\d,]+, refused [\d,]+/.test(s.key || '')) fail(`${s.label}: its key's counts read ${JSON.stringify(s.key)}`);
  }
  // The chart: a panel per job, each with a line per side, an axis of
  // articles done and one of the simulated time of day.
  const c = side.chart;
  if (!c) fail('no chart on the side-by-side page');
  if (!c.caption || !c.caption.includes('simulated time')) fail(`the chart's caption ${JSON.stringify(c.caption)} does not say its time is simulated`);
  const panels = c.panels.map((p) => p.title);
  if (JSON.stringify(panels) !== JSON.stringify(demo.jobs)) fail(`the chart's panels ${JSON.stringify(panels)}, want one per job ${JSON.stringify(demo.jobs)}`);
  for (const p of c.panels) {
    if (p.unit !== 'articles done') fail(`panel ${p.title}: its y-axis is labelled ${JSON.stringify(p.unit)}, want "articles done"`);
    if (p.yticks.length < 2 || p.yticks[0] !== '0' || !p.yticks.every((t) => /^[\d,.]+[kM]?$/.test(t))) fail(`panel ${p.title}: y ticks ${JSON.stringify(p.yticks)}`);
    if (!p.xticks.length || !p.xticks.every((t) => /^\d\d:\d\d$/.test(t) || /^\d{1,2} [A-Z][a-z]{2}$/.test(t))) fail(`panel ${p.title}: time ticks ${JSON.stringify(p.xticks)}, want times of day or dates`);
    const names = p.series.map((x) => x.name);
    if (JSON.stringify(names) !== JSON.stringify(demo.sides.map((x) => x.label))) fail(`panel ${p.title}: lines ${JSON.stringify(names)}, want one per side`);
    if (!p.series.every((x) => x.points >= 2)) fail(`panel ${p.title}: lines of ${JSON.stringify(p.series.map((x) => x.points))} points, want at least 2 each`);
  }
  clean();
  await shot('demo-1-side-by-side');

  // --- The demo's dashboard: its overview, a backfill, a run's history ---
  step = 'demo overview';
  await follow('header nav a[href="/"]', (u) => u.origin === demoBase && u.pathname === '/');
  const over = await page.evaluate(() => {
    const text = (el) => (el ? el.textContent.trim() : null);
    return {
      h1: text(document.querySelector('main h1')),
      stamp: text(document.querySelector('main .head .stamp .clock')),
      keys: [...document.querySelectorAll('main section.key[data-key]')].map((s) => s.getAttribute('data-key')),
      gauges: document.querySelectorAll('main article.gauge').length,
      flows: [...document.querySelectorAll('table.key-flows tr[data-flow]')].map((tr) => tr.getAttribute('data-flow')),
    };
  });
  if (over.h1 !== 'Overview') fail(`the page behind the header's Overview is ${JSON.stringify(over.h1)}`);
  if (over.stamp !== `(${demo.clock})`) fail(`the overview's time is labelled ${JSON.stringify(over.stamp)}, want (${demo.clock})`);
  if (JSON.stringify(over.keys) !== JSON.stringify([demo.key]) || !(over.gauges > 0)) fail(`the overview shows keys ${JSON.stringify(over.keys)} with ${over.gauges} gauges, want ${demo.key}'s`);
  if (JSON.stringify([...over.flows].sort()) !== JSON.stringify([...demo.jobs].sort())) fail(`the key's flows ${JSON.stringify(over.flows)}, want the jobs ${JSON.stringify(demo.jobs)}`);
  clean();
  await shot('demo-2-overview');

  step = 'demo flow';
  const demoFlowPath = '/flows/' + encodeURIComponent(demo.flow);
  await follow(`table.key-flows tr[data-flow=${attr(demo.flow)}] a[href=${attr(demoFlowPath)}]`, (u) => u.pathname === demoFlowPath);
  const dflow = await page.evaluate(() => {
    const s = document.querySelector('section.summary[data-flow]');
    const p = s && s.querySelector('.progress');
    const heads = [...document.querySelectorAll('section.backfill-runs table.runs thead th')].map((th) => th.textContent.trim());
    const saved = heads.indexOf('Saved');
    return {
      name: s && s.getAttribute('data-flow'),
      done: p && p.getAttribute('data-done'),
      runs: [...document.querySelectorAll('section.backfill-runs table.runs tbody tr[data-run]')].map((tr) => ({
        id: tr.getAttribute('data-run'),
        saved: saved < 0 ? null : tr.querySelectorAll('td')[saved]?.textContent.trim(),
      })),
    };
  });
  if (dflow.name !== demo.flow) fail(`the flow page is of ${JSON.stringify(dflow.name)}, want ${demo.flow}`);
  if (!(num(dflow.done) > 0)) fail(`the backfill ${demo.flow} shows ${dflow.done} done`);
  // A run that saved articles: it called the provider.
  const saver = dflow.runs.find((r) => num(r.saved) > 0);
  if (!saver) fail(`none of the backfill's latest runs saved an article: ${JSON.stringify(dflow.runs)}`);
  clean();
  await shot('demo-3-flow');

  step = 'demo run';
  await follow(`section.backfill-runs tr[data-run=${attr(saver.id)}] a`, onRun(saver.id));
  const drun = await runOnPage();
  if (!drun || drun.id !== saver.id) fail(`no summary of run ${saver.id} on ${page.url()}`);
  if (drun.status !== 'completed' || drun.function !== demo.function) fail(`run ${saver.id} is ${drun.status} of ${drun.function}, want completed of ${demo.function}`);
  if (!drun.steps.length || drun.bars !== drun.steps.length) fail(`run ${saver.id}: ${drun.steps.length} steps, ${drun.bars} bars on its timeline`);
  const undone = drun.steps.filter((s) => s.status !== 'completed' || !(s.attempts >= 1));
  if (undone.length) fail(`steps of run ${saver.id} not completed: ${JSON.stringify(undone)}`);
  // Its output is the backfill's account of the run: what it saved, as the
  // flow page listed it.
  const account = await page.locator('section.run-output pre').textContent().catch(() => null);
  let saved;
  try {
    saved = JSON.parse(account).Saved;
  } catch {
    fail(`run ${saver.id}'s output ${JSON.stringify(account)} is not the backfill's account of it`);
  }
  if (saved !== num(saver.saved)) fail(`run ${saver.id}'s output says it saved ${saved}, the flow page ${saver.saved}`);
  out.demo.run = saver.id;
  clean();
  await shot('demo-4-run');

  // Its history: a row per attempt of every step, in the steps' order.
  step = 'demo history';
  const dhist = await historyOnPage();
  const perStep = drun.steps.flatMap((s, i) => Array.from({ length: s.attempts }, (_, a) => [s.name, i + 1, a + 1]));
  const rowsSeen = dhist.rows.map((r) => [r.step, r.index, r.attempt]);
  if (JSON.stringify(rowsSeen) !== JSON.stringify(perStep)) fail(`the history's rows ${JSON.stringify(rowsSeen)}, want an attempt per row of the steps ${JSON.stringify(perStep)}`);
  // An attempt may have failed (a call that waited for quota past its
  // deadline) if a later one of its step completed.
  const lastOfStep = dhist.rows.filter((r, i) => dhist.rows[i + 1]?.index !== r.index);
  if (!lastOfStep.every((r) => r.status === 'completed')) fail(`the history's last attempts of each step: ${JSON.stringify(lastOfStep.map((r) => [r.step, r.status]))}, want every one completed`);
  wantTimeline(dhist, `the demo's run ${saver.id}`);
  out.demo.history = dhist.rows.map((r) => ({ step: r.step, step_index: r.index, attempt: r.attempt, status: r.status }));
  const section = page.locator('#history');
  await section.scrollIntoViewIfNeeded();
  clean();
  await shot('demo-5-run-history', section);

  // --- Signing in ---------------------------------------------------------
  step = 'sign in';
  const first = await page.goto(base + '/');
  if (!first || first.status() !== 200) fail(`GET / ended with ${first && first.status()}`);
  if (pathname() !== '/login') fail(`GET / without a session ended on ${page.url()}, want the login page`);
  if (new URL(page.url()).searchParams.get('next') !== '/') fail(`the login page's next is not /: ${page.url()}`);
  await page.locator('form.login input[name=token]').waitFor();
  await shot('01-login');
  // A wrong token is refused on the form, saying so.
  allowStatus = { status: 401, path: '/login' };
  await page.fill('form.login input[name=token]', 'not-the-token-0123456789');
  await Promise.all([page.waitForResponse((r) => r.request().method() === 'POST' && new URL(r.url()).pathname === '/login'),
    page.click('form.login button[type=submit]')]);
  await page.waitForLoadState('load');
  const refused = await page.locator('.error-box[role=alert]').textContent().catch(() => null);
  if (pathname() !== '/login' || !refused || !/not the token/i.test(refused)) fail(`a wrong token: on ${page.url()}, alert ${JSON.stringify(refused)}`);
  allowStatus = null;
  await page.fill('form.login input[name=token]', token);
  await Promise.all([page.waitForURL((u) => u.pathname === '/'), page.click('form.login button[type=submit]')]);
  await page.waitForLoadState('load');
  const cookies = await context.cookies(base);
  const session = cookies.find((c) => c.name === 'sluice_session');
  if (!session || !session.httpOnly || session.sameSite !== 'Strict') fail(`session cookie ${JSON.stringify(session)}`);
  if (session.value.includes(token)) fail('the session cookie holds the token');
  if (!(await page.locator('form.signout button').isVisible())) fail('no Sign out button once signed in');
  clean();

  // --- Overview: a gauge per limit of the key ------------------------------
  step = 'overview';
  if ((await page.locator('h1').first().textContent())?.trim() !== 'Overview') fail('the page after signing in is not the overview');
  await page.locator(`section.key[data-key=${attr(want.key)}]`).waitFor();
  const gauges = await page.$$eval(`article.gauge[data-key=${attr(want.key)}]`, (els) =>
    els.map((g) => ({
      limit: g.getAttribute('data-limit'),
      used: g.getAttribute('data-used'),
      max: g.getAttribute('data-max'),
      usedText: g.querySelector('.used')?.textContent ?? null,
      maxText: g.querySelector('.max')?.textContent ?? null,
      pct: g.querySelector('.pct')?.textContent ?? null,
      left: g.querySelector('.left')?.textContent ?? null,
      bar: !!g.querySelector('svg.bar rect.fill'),
    })),
  );
  const limits = Object.keys(want.limits);
  const seen = gauges.map((g) => g.limit).sort();
  if (JSON.stringify(seen) !== JSON.stringify([...limits].sort())) fail(`gauges of key ${want.key}: ${JSON.stringify(seen)}, want one per limit ${JSON.stringify(limits)}`);
  out.gauges = {};
  for (const g of gauges) {
    const used = num(g.used), max = num(g.max);
    if (max !== want.limits[g.limit]) fail(`gauge ${g.limit}: data-max ${g.max}, want ${want.limits[g.limit]}`);
    if (!Number.isFinite(used) || used < 0 || used > max) fail(`gauge ${g.limit}: data-used ${g.used} of ${g.max}`);
    if (num(g.usedText) !== used || num(g.maxText) !== max) fail(`gauge ${g.limit}: shows ${g.usedText} / ${g.maxText}, its data says ${g.used} / ${g.max}`);
    if (!/^\d+(\.\d+)?\s?%$/.test((g.pct || '').trim())) fail(`gauge ${g.limit}: percentage ${JSON.stringify(g.pct)}`);
    if (num(g.left) !== max - used) fail(`gauge ${g.limit}: ${JSON.stringify(g.left)} left of ${max} with ${used} used`);
    if (!g.bar) fail(`gauge ${g.limit}: no bar`);
    out.gauges[g.limit] = { used, max };
  }
  if (!(out.gauges.rpm?.used > 0) && !(out.gauges.tpm?.used > 0)) fail(`no gauge shows any use, though calls were made: ${JSON.stringify(out.gauges)}`);
  if ((await page.locator(`table.key-flows tr[data-flow=${attr(want.flow)}]`).count()) !== 1) fail(`the key's flows do not list ${want.flow}`);
  clean();
  await shot('02-overview');

  // --- The backfill's flow: its progress -----------------------------------
  step = 'flows';
  await follow('header nav a[href="/flows"]', (u) => u.pathname === '/flows');
  clean();
  await shot('03-flows');
  step = 'flow';
  await follow(`a[href=${attr('/flows/' + encodeURIComponent(want.flow))}]`, (u) => u.pathname === '/flows/' + encodeURIComponent(want.flow));
  const flow = await page.evaluate(() => {
    const s = document.querySelector('section.summary[data-flow]');
    if (!s) return null;
    const p = s.querySelector('.progress');
    const text = (el) => (el ? el.textContent.trim() : null);
    return {
      name: s.getAttribute('data-flow'),
      state: s.getAttribute('data-state'),
      badge: text(s.querySelector('.badge')),
      done: p && p.getAttribute('data-done'),
      total: p && p.getAttribute('data-total'),
      doneText: text(p && p.querySelector('.figures .done')),
      totalText: text(p && p.querySelector('.figures .total')),
      pct: text(p && p.querySelector('.figures .pct')),
      fill: p && p.querySelector('rect.fill')?.getAttribute('width'),
      ddDone: text(s.querySelector('dd.done')),
      ddRemaining: text(s.querySelector('dd.remaining')),
      items: [...document.querySelectorAll('table.items tbody tr')].map((tr) => ({
        key: tr.getAttribute('data-key'),
        outcome: tr.getAttribute('data-outcome'),
        attempts: Number(tr.querySelector('.attempts')?.textContent),
        run: !!tr.querySelector('a[href^="/runs/"]'),
      })),
      runs: document.querySelectorAll('section.backfill-runs tbody tr').length,
    };
  });
  if (!flow) fail('no summary of the flow on its page');
  out.flow = { state: flow.state, done: num(flow.done), total: num(flow.total), items: flow.items.length, runs: flow.runs };
  if (flow.name !== want.flow) fail(`the page is of flow ${flow.name}`);
  if (!(num(flow.done) > 0)) fail(`done ${flow.done}: want progress`);
  if (num(flow.done) !== want.items || num(flow.total) !== want.items) fail(`progress ${flow.done} / ${flow.total}, want ${want.items} / ${want.items}`);
  if (num(flow.doneText) !== num(flow.done) || num(flow.totalText) !== num(flow.total) || num(flow.ddDone) !== num(flow.done)) {
    fail(`figures ${flow.doneText} / ${flow.totalText} (done ${flow.ddDone}) disagree with the bar's data ${flow.done} / ${flow.total}`);
  }
  if (num(flow.ddRemaining) !== 0) fail(`remaining ${flow.ddRemaining}, want 0`);
  if (!/100\s?%/.test(flow.pct || '') || num(flow.fill) !== 100) fail(`a finished backfill shows ${flow.pct}, bar ${flow.fill} wide`);
  if (flow.state !== want.flow_state || flow.badge !== want.flow_state) fail(`state ${flow.state} (badge ${flow.badge}), want ${want.flow_state}`);
  if (flow.items.length !== Math.min(want.items, 50)) fail(`${flow.items.length} items listed, want ${Math.min(want.items, 50)}`);
  const notSaved = flow.items.filter((it) => it.outcome !== 'saved' || !it.run);
  if (notSaved.length) fail(`items not shown saved with their run: ${JSON.stringify(notSaved)}`);
  const twice = flow.items.find((it) => it.key === want.rejected_once);
  if (!twice || twice.attempts !== 2) fail(`item ${want.rejected_once}, rejected once then saved: ${JSON.stringify(twice)}, want 2 attempts`);
  if (flow.runs < 1) fail('no backfill run listed');
  clean();
  await shot('04-flow');

  // --- The runs, and a completed run's steps --------------------------------
  step = 'runs';
  await follow('header nav a[href="/runs"]', (u) => u.pathname === '/runs');
  const rows = await page.$$eval('table.runs tbody tr', (trs) => trs.map((tr) => ({ id: tr.getAttribute('data-run'), status: tr.getAttribute('data-status') })));
  for (const [id, status] of [[want.completed_run, 'completed'], [want.failed_run, 'failed']]) {
    const r = rows.find((x) => x.id === id);
    if (!r || r.status !== status) fail(`run ${id} listed as ${JSON.stringify(r)}, want ${status}`);
  }
  clean();
  await shot('05-runs');

  step = 'completed run';
  await follow(`table.runs tr[data-run=${attr(want.completed_run)}] a`, onRun(want.completed_run));
  const done = await runOnPage();
  if (!done || done.id !== want.completed_run) fail(`no summary of run ${want.completed_run} on ${page.url()}`);
  if (done.status !== 'completed' || done.function !== want.completed_function) fail(`run is ${done.status} of ${done.function}`);
  wantSteps(done, want.completed_steps, 'completed run');
  const unfinished = done.steps.filter((s) => s.status !== 'completed' || !(s.attempts >= 1));
  if (unfinished.length) fail(`steps not completed: ${JSON.stringify(unfinished)}`);
  if (done.canRerun || done.canCancel) fail('a completed run offers Re-run or Cancel');
  if ((await page.locator('section.run-output pre').count()) !== 1) fail("no output of the run");
  clean();
  await shot('06-run');

  // --- The failed run, re-run until it completes ---------------------------
  step = 'failed run';
  await open('/runs?status=failed');
  await follow(`table.runs tr[data-run=${attr(want.failed_run)}] a`, onRun(want.failed_run));
  const failed = await runOnPage();
  if (!failed || failed.status !== 'failed' || failed.function !== want.failed_function) fail(`run ${want.failed_run}: ${JSON.stringify(failed)}`);
  if (!failed.error || !failed.error.includes(want.failed_error)) fail(`the run's error ${JSON.stringify(failed.error)} does not say ${JSON.stringify(want.failed_error)}`);
  const bad = failed.steps.find((s) => s.name === want.failed_step);
  if (!bad || bad.status !== 'failed' || !bad.classes.some((c) => c.startsWith('fatal'))) fail(`step ${want.failed_step}: ${JSON.stringify(bad)}, want failed with a fatal attempt`);
  if (!failed.canRerun || failed.canCancel) fail(`a failed run: Re-run ${failed.canRerun}, Cancel ${failed.canCancel}`);
  clean();
  await shot('07-run-failed');

  // --- Its history: every attempt, with its wait and why, on a timeline ---
  step = 'history';
  const history = await historyOnPage();
  out.history = history;
  for (const [i, name] of want.rerun_steps.entries()) {
    if (!history.rows.some((r) => r.step === name && r.index === i + 1)) fail(`the history has no attempt of step ${i + 1} ${name}: ${JSON.stringify(history.rows)}`);
  }
  const lastFailed = history.rows.filter((r) => r.step === want.failed_step);
  if (!lastFailed.length || lastFailed.at(-1).status !== 'failed') fail(`the history of step ${want.failed_step}: ${JSON.stringify(lastFailed)}, want its last attempt failed`);
  if (!lastFailed.some((r) => r.cells.some((c) => c.includes(want.failed_error)))) fail(`the history of step ${want.failed_step} does not say ${want.failed_error}`);
  wantTimeline(history, 'the failed run');
  await page.locator('#history').scrollIntoViewIfNeeded();
  clean();
  await shot('08-run-history');

  step = 're-run';
  // Re-run from step 2 (the failed one): the form posts to
  // /runs/{id}/rerun?from_step=2, which sends the browser on to the new
  // run's page (or shows an error there).
  const fromStep = want.rerun_steps.indexOf(want.failed_step) + 1;
  await follow(`form#rerun-from-${fromStep} button`,
    (u) => u.pathname.startsWith('/runs/') && !onRun(want.failed_run)(u) && !u.pathname.endsWith('/rerun'));
  if (pathname().endsWith('/rerun')) fail(`Re-run ended on ${page.url()}`);
  const rerunID = decodeURIComponent(pathname().slice('/runs/'.length));
  out.rerun = rerunID;
  // Watch the page, bounded, until the new run has ended.
  const until = Date.now() + 20000;
  let rerun = await runOnPage();
  const seenStatuses = [];
  for (;;) {
    if (!rerun || rerun.id !== rerunID) fail(`no summary of the new run ${rerunID} on ${page.url()}`);
    if (seenStatuses.at(-1) !== rerun.status) seenStatuses.push(rerun.status);
    if (rerun.status === 'completed') break;
    if (['failed', 'cancelled', 'timed_out'].includes(rerun.status)) fail(`the re-run ${rerunID} ended ${rerun.status}: ${rerun.error}`);
    if (Date.now() > until) fail(`the re-run ${rerunID} is still ${rerun.status} after 20 s`);
    // No reload: the page's live refresh must bring the run's end, then stop.
    await page.waitForTimeout(200);
    rerun = await runOnPage();
  }
  if (seenStatuses.length > 1) {
    const live = await page.textContent('#live');
    if (!/final/.test(live || '')) fail(`the live refresh did not stop at the ended run: ${JSON.stringify(live)}`);
  }
  out.rerun_statuses = seenStatuses;
  if (rerun.function !== want.failed_function) fail(`the re-run is of ${rerun.function}`);
  if (rerun.rerunOf !== want.failed_run) fail(`the re-run says it re-runs ${JSON.stringify(rerun.rerunOf)}, want ${want.failed_run}`);
  wantSteps(rerun, want.rerun_steps, 're-run');
  const notOK = rerun.steps.filter((s) => s.status !== 'completed');
  if (notOK.length) fail(`steps of the re-run not completed: ${JSON.stringify(notOK)}`);
  if (rerun.canRerun || rerun.canCancel) fail('a completed re-run offers Re-run or Cancel');
  clean();
  await shot('09-run-rerun');
  // The runs list shows both: the failed run as it was, its re-run completed.
  await open('/runs?function=' + encodeURIComponent(want.failed_function));
  const after = await page.$$eval('table.runs tbody tr', (trs) => trs.map((tr) => ({ id: tr.getAttribute('data-run'), status: tr.getAttribute('data-status') })));
  if (!after.some((r) => r.id === rerunID && r.status === 'completed') || !after.some((r) => r.id === want.failed_run && r.status === 'failed')) {
    fail(`the runs of ${want.failed_function}: ${JSON.stringify(after)}`);
  }
  clean();

  // --- Search the runs by the text of why they failed ---------------------
  step = 'search';
  await open('/runs');
  const words = want.failed_error.split(' ').slice(-2).join(' '); // part of the reason, as a person remembers it
  await page.fill('#search-reason', words);
  await follow('#search-submit', (u) => u.pathname === '/runs' && u.searchParams.get('reason') === words);
  const found = await page.$$eval('table.runs tbody tr', (trs) => trs.map((tr) => ({ id: tr.getAttribute('data-run'), status: tr.getAttribute('data-status') })));
  if (!found.some((r) => r.id === want.failed_run)) fail(`searching for ${JSON.stringify(words)} did not find ${want.failed_run}: ${JSON.stringify(found)}`);
  const strays = found.filter((r) => r.status !== 'failed');
  if (strays.length) fail(`searching for ${JSON.stringify(words)} found runs that did not fail: ${JSON.stringify(strays)}`);
  out.search = found.map((r) => r.id);
  clean();
  await shot('10-search');

  // --- Replay the failed run's event: the same data under a new ID --------
  step = 'replay';
  await follow(`table.runs tr[data-run=${attr(want.failed_run)}] a`, onRun(want.failed_run));
  await follow('#replay', (u) => u.pathname.startsWith('/runs/') && !onRun(want.failed_run)(u) && !u.pathname.endsWith('/replay'));
  const replayID = decodeURIComponent(pathname().slice('/runs/'.length));
  if (replayID === rerunID) fail(`the replay opened the re-run ${rerunID}`);
  out.replay = replayID;
  const rUntil = Date.now() + 20000;
  let replayed = await runOnPage();
  for (;;) {
    if (!replayed || replayed.id !== replayID) fail(`no summary of the replayed run ${replayID} on ${page.url()}`);
    if (replayed.status === 'completed') break;
    if (['failed', 'cancelled', 'timed_out'].includes(replayed.status)) fail(`the replayed run ${replayID} ended ${replayed.status}: ${replayed.error}`);
    if (Date.now() > rUntil) fail(`the replayed run ${replayID} is still ${replayed.status} after 20 s`);
    await page.waitForTimeout(200);
    replayed = await runOnPage();
  }
  if (replayed.function !== want.failed_function) fail(`the replayed run is of ${replayed.function}`);
  wantSteps(replayed, want.rerun_steps, 'replayed run');
  clean();
  await shot('11-replay');
  step = 'done';
  out.ms = Date.now() - began;
  console.log(JSON.stringify(out));
} catch (err) {
  code = 1;
  const msg = err instanceof CheckError ? err.message : err && err.stack ? err.stack : String(err);
  console.error(`dashboard-check: ${step}: ${msg}`);
  if (!(err instanceof CheckError) && problems.length) console.error(`dashboard-check: ${step}: and the pages said: ${problems.join('; ')}`);
  try {
    await page.screenshot({ path: join(artifacts, 'failure.png'), fullPage: true });
    console.error(`dashboard-check: the page was ${page.url()}; see ${join(artifacts, 'failure.png')}`);
  } catch {
    // the page itself may be what failed
  }
} finally {
  await context.close().catch(() => {});
  if (ownProfile) rmSync(profile, { recursive: true, force: true });
  clearTimeout(watchdog);
}
process.exit(code);
