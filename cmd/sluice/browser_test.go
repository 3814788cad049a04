package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/examples/devpick"
	"github.com/sluice-dev/sluice/examples/summarize"
	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/backfill"
	"github.com/sluice-dev/sluice/internal/govtext"
	"github.com/sluice-dev/sluice/internal/guard"
	"github.com/sluice-dev/sluice/internal/serveapp"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/llm"
	"github.com/sluice-dev/sluice/run"
)

// The sample app of the browser test: the summarize pipeline, a backfill,
// and a function that fails until the test lets it succeed, on one key of
// the provider simulator.
const (
	browserKey      = "sim"
	browserLimits   = "rpm=60,tpm=20000,tpd=200000,otpm=4000"
	browserToken    = "dashboard-token-0123456789abcdef"
	browserBackfill = "titles_en"
	browserItems    = 12
	// browserRejectOnce is the item whose first output the backfill rejects:
	// it is saved at its second attempt.
	browserRejectOnce = "article-04"
	browserFlaky      = "publish-digest"
	browserFlakyEvent = "digest/ready"
	browserFlakyStep  = "publish"
	browserFlakyError = "the digest endpoint answered 503"
)

// TestDashboardInBrowser starts sluice demo, and serves a sample app the
// way sluice serve does — the run API, /metrics and the dashboard on one
// address, behind serve's guard — against the provider simulator, and
// drives both in Chromium with clients/node/dashboard-check.mjs. On the
// demo, once both sides have done articles, it reads the side-by-side
// page and its chart, then follows the dashboard's pages to a backfill run
// of the demo and its history; on the sample app it signs in, sees a gauge
// per limit of the key, the backfill's progress, a run's steps, and re-runs
// a failed run until it completes, saving a screenshot of every page under
// test-artifacts/dashboard. Then it checks the demo's run history the
// browser read against the demo's run API, scrapes the sample app's
// /metrics and checks that the series of the key, the flows and the runs
// moved.
//
// Not parallel: a browser is heavy on a small machine, and the check's
// deadlines are for a browser that is not starved by the package's other
// tests.
func TestDashboardInBrowser(t *testing.T) {
	node, modules := testenv.NodeModules(t)
	if _, err := os.Stat(filepath.Join(modules, "playwright-core", "package.json")); err != nil {
		browserUnavailable(t, "the playwright-core npm package is not installed in %s", modules)
	}
	chromium := os.Getenv("SLUICE_TEST_CHROMIUM")
	if chromium == "" {
		browserUnavailable(t, "SLUICE_TEST_CHROMIUM (the chromium binary) is not set")
	}
	if _, err := exec.LookPath(chromium); err != nil {
		browserUnavailable(t, "SLUICE_TEST_CHROMIUM=%s: %v", chromium, err)
	}
	script, err := filepath.Abs("../../clients/node/dashboard-check.mjs")
	if err != nil {
		t.Fatal(err)
	}
	artifacts, err := filepath.Abs("../../test-artifacts/dashboard")
	if err != nil {
		t.Fatal(err)
	}
	// Only this run's screenshots: none of an earlier run is left to mislead.
	if err := os.RemoveAll(artifacts); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}

	// The demo starts first: its sides need some minutes of simulated time
	// to show progress, while the sample app is set up.
	demo := startBrowserDemo(t)

	sim, provider := startSim(t, browserLimits)
	var logs testenv.Buffer
	app, flaky := newBrowserApp(t, provider, &logs)
	t.Cleanup(func() {
		if t.Failed() {
			gs, _ := app.Stats(context.Background(), browserKey)
			t.Logf("the provider saw %+v; the key's governor: %+v\nthe app's log:\n%s", sim.Stats(), gs, logs.String())
		}
	})
	base := serveBrowserApp(t, app)

	// What the pages will show: two documents summarized, the backfill done,
	// and a run that failed.
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	var completed string
	for _, doc := range []string{"d1", "d2"} {
		id := browserSend(t, app, summarize.Event, "upload-"+doc, summarize.Doc{DocumentID: doc})
		if st := browserWait(ctx, t, app, id); st.Status != run.Completed {
			t.Fatalf("summarize %s: %s %s", doc, st.Status, st.Error)
		}
		completed = id
	}
	failed := browserSend(t, app, browserFlakyEvent, "digest-1", browserDigest{Edition: "monday"})
	if st := browserWait(ctx, t, app, failed); st.Status != run.Failed || !strings.Contains(st.Error, browserFlakyError) {
		t.Fatalf("the flaky function's first run: %s %q, want failed with %q", st.Status, st.Error, browserFlakyError)
	}
	browserWaitMetrics(ctx, t, base, "the backfill done", func(f browserScrape) bool {
		v, _ := f.value("sluice_flow_state", "flow", browserBackfill, "state", "done")
		return v == 1
	})
	// The endpoint is back: the re-run the browser asks for succeeds.
	flaky.Store(false)

	limits, err := govtext.Limits(browserLimits)
	if err != nil {
		t.Fatal(err)
	}
	wantLimits := map[string]int64{}
	for l := range governor.NumLimits {
		if limits[l] > 0 {
			wantLimits[l.String()] = limits[l]
		}
	}
	demoSnap := demo.waitProgress(t)
	if !strings.Contains(demoSnap.Clock, "simulated") {
		t.Fatalf("/demo.json's clock %q does not say it is simulated", demoSnap.Clock)
	}
	type demoSide struct {
		Side  string `json:"side"`
		Label string `json:"label"`
	}
	var demoSides []demoSide
	for _, s := range demoSnap.Sides {
		demoSides = append(demoSides, demoSide{s.Side, s.Label})
	}
	var demoJobs []string // the page shows the same on both sides
	for _, j := range demoSnap.Sides[0].Jobs {
		demoJobs = append(demoJobs, j.Name)
	}
	expect, err := json.Marshal(map[string]any{
		"demo": map[string]any{
			"key": browserDemoKey, "clock": demoSnap.Clock, "sides": demoSides, "jobs": demoJobs,
			"flow": devpick.Title, "function": backfill.FunctionID(devpick.Title),
		},
		"key": browserKey, "limits": wantLimits,
		"flow": browserBackfill, "flow_state": "done", "items": browserItems, "rejected_once": browserRejectOnce,
		"completed_run": completed, "completed_function": summarize.FunctionID,
		"completed_steps": []string{"fetch-document", "summarize", "classify", "save-result"},
		"failed_run":      failed, "failed_function": browserFlaky, "failed_step": browserFlakyStep, "failed_error": browserFlakyError,
		"rerun_steps": []string{"draft", browserFlakyStep},
	})
	if err != nil {
		t.Fatal(err)
	}

	began := time.Now()
	nctx, ncancel := context.WithTimeout(context.Background(), 240*time.Second)
	defer ncancel()
	cmd := exec.CommandContext(nctx, node, script)
	cmd.Dir = filepath.Dir(script)
	cmd.Env = append(os.Environ(),
		"DASHBOARD_URL="+base, "DEMO_URL="+demo.base, "DASHBOARD_TOKEN="+browserToken, "DASHBOARD_ARTIFACTS="+artifacts,
		"DASHBOARD_CHROMIUM="+chromium, "DASHBOARD_PROFILE="+t.TempDir(), "DASHBOARD_EXPECT="+string(expect),
		"DASHBOARD_DEADLINE_MS=225000", "DASHBOARD_NODE_MODULES="+modules)
	// At the deadline node is asked to stop, so that playwright closes the
	// browser it launched; it is killed if it has not within 10 s.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node dashboard-check.mjs: %v\n%s\nstdout: %s\n(screenshots in %s)", err, stderr.String(), stdout.String(), artifacts)
	}
	var out struct {
		Rerun       string   `json:"rerun"`
		Replay      string   `json:"replay"`
		Search      []string `json:"search"`
		Screenshots []string `json:"screenshots"`
		Gauges      map[string]struct {
			Used, Max int64
		} `json:"gauges"`
		Flow struct {
			State       string
			Done, Total int64
		} `json:"flow"`
		RerunStatuses []string `json:"rerun_statuses"`
		Demo          struct {
			Run     string           `json:"run"`
			History []browserAttempt `json:"history"`
		} `json:"demo"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("the check's output %q: %v\nstderr: %s", stdout.String(), err, stderr.String())
	}
	t.Logf("the browser's check took %s: the demo's run %s with %d attempts; gauges %v, flow %+v, the re-run %s went %v", time.Since(began).Round(time.Millisecond),
		out.Demo.Run, len(out.Demo.History), out.Gauges, out.Flow, out.Rerun, out.RerunStatuses)

	// The demo's run whose history the browser read has those attempts,
	// as the demo's run API answers them.
	if api := demo.history(t, out.Demo.Run); len(api) == 0 || !slices.Equal(out.Demo.History, api) {
		t.Errorf("the demo's run %s: the page's history %+v, the API's %+v", out.Demo.Run, out.Demo.History, api)
	}

	// What the browser did, as the app saw it: the re-run it started is of
	// the failed run, and completed.
	wctx, wcancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer wcancel()
	st := browserWait(wctx, t, app, out.Rerun)
	if st.Status != run.Completed || st.RerunOf != failed || st.Function != browserFlaky {
		t.Errorf("the re-run %s: %+v, want a completed re-run of %s", out.Rerun, st, failed)
	}
	// The replay the browser asked for is a new run of the failed run's
	// event: the same name and data under a new ID, and it completed.
	rp := browserWait(wctx, t, app, out.Replay)
	if rp.Status != run.Completed || rp.Function != browserFlaky || out.Replay == failed || out.Replay == out.Rerun {
		t.Errorf("the replayed run %s: %+v, want a new completed run of %s", out.Replay, rp, browserFlaky)
	}
	orig, replayed := browserRunEvent(t, base, failed), browserRunEvent(t, base, out.Replay)
	if orig.Name != browserFlakyEvent || replayed.Name != orig.Name || string(replayed.Data) != string(orig.Data) || replayed.ID == "" || replayed.ID == orig.ID {
		t.Errorf("the replayed run's event %+v, want %s's data %s under a new ID (was %q)", replayed, orig.Name, orig.Data, orig.ID)
	}
	if !slices.Contains(out.Search, failed) || slices.Contains(out.Search, out.Rerun) {
		t.Errorf("the search by the failure's text found %v, want %s and not the completed re-run %s", out.Search, failed, out.Rerun)
	}
	for _, name := range []string{"demo-1-side-by-side", "demo-2-overview", "demo-3-flow", "demo-4-run", "demo-5-run-history", "01-login", "02-overview", "03-flows", "04-flow", "05-runs", "06-run", "07-run-failed", "08-run-history", "09-run-rerun", "10-search", "11-replay"} {
		p := filepath.Join(artifacts, name+".png")
		if !slices.Contains(out.Screenshots, p) {
			t.Errorf("the check did not report the screenshot %s", p)
		}
		if b, err := os.ReadFile(p); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
			t.Errorf("screenshot %s: not a PNG (%v)", p, err)
		}
	}

	// The series behind the pages moved.
	f := browserMetrics(t, base, browserToken)
	for name, max := range wantLimits {
		if got := f.must(t, "sluice_limit_capacity", "key", browserKey, "limit", name); got != float64(max) {
			t.Errorf("sluice_limit_capacity{limit=%s} = %v, want %d", name, got, max)
		}
		// Every call of the test was made within the minute: each limit has
		// use in its window, the day limit and the output limit too.
		if got := f.must(t, "sluice_limit_used", "key", browserKey, "limit", name); got <= 0 || got > float64(max) {
			t.Errorf("sluice_limit_used{limit=%s} = %v, want in (0, %d]", name, got, max)
		}
	}
	for _, flow := range []string{browserBackfill, "summaries", "digests"} {
		adm := f.must(t, "sluice_flow_admissions_total", "key", browserKey, "flow", flow)
		if adm <= 0 {
			t.Errorf("sluice_flow_admissions_total{flow=%s} = %v", flow, adm)
		}
		if waits := f.must(t, "sluice_flow_admission_wait_seconds", "key", browserKey, "flow", flow); waits != adm {
			t.Errorf("flow %s: %v admission waits observed for %v admissions", flow, waits, adm)
		}
		for _, kind := range []string{"input", "output"} {
			if v := f.must(t, "sluice_flow_tokens_total", "key", browserKey, "flow", flow, "kind", kind); v <= 0 {
				t.Errorf("sluice_flow_tokens_total{flow=%s,kind=%s} = %v", flow, kind, v)
			}
		}
	}
	// One call per batch of at most 3, and the rejected item's second call.
	if adm := f.must(t, "sluice_flow_admissions_total", "key", browserKey, "flow", browserBackfill); adm < browserItems/3+1 {
		t.Errorf("the backfill's admissions: %v, want at least %d", adm, browserItems/3+1)
	}
	if got := f.must(t, "sluice_flow_items_done", "flow", browserBackfill); got != browserItems {
		t.Errorf("sluice_flow_items_done = %v, want %d", got, browserItems)
	}
	if got := f.must(t, "sluice_flow_items_remaining", "flow", browserBackfill); got != 0 {
		t.Errorf("sluice_flow_items_remaining = %v, want 0", got)
	}
	if on := f.oneHot(t, "sluice_flow_state", "state", "flow", browserBackfill); on != "done" {
		t.Errorf("sluice_flow_state: %q is 1, want done", on)
	}
	for _, c := range []struct {
		function, status string
		want             float64
	}{
		{browserFlaky, "failed", 1},    // its first run
		{browserFlaky, "completed", 2}, // the browser's re-run and replay
		{summarize.FunctionID, "completed", 2},
	} {
		if got := f.must(t, "sluice_runs_finished_total", "function", c.function, "status", c.status); got != c.want {
			t.Errorf("sluice_runs_finished_total{function=%s,status=%s} = %v, want %v", c.function, c.status, got, c.want)
		}
	}
	if st := sim.Stats(); st.Rejected > 0 {
		t.Errorf("the provider rejected %d calls: the governor let calls over a limit through", st.Rejected)
	}
}

// browserUnavailable skips the test, or fails it under CI=true, where
// scripts/test.sh has installed Node's packages and Chromium.
func browserUnavailable(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if testenv.InCI() {
		t.Fatalf("%s (CI=true: this test must run; scripts/test.sh sets it up)", msg)
	}
	t.Skip(msg + " (run scripts/test.sh to set it up)")
}

type browserDigest struct {
	Edition string `json:"edition"`
}

type browserArticle struct {
	Title string `json:"title"`
}

// newBrowserApp builds and starts the sample app on a fresh SQLite
// database. The flaky function's publish step fails for good while the
// returned switch is on (it starts on).
func newBrowserApp(t *testing.T, provider string, logs io.Writer) (*sluice.App, *atomic.Bool) {
	t.Helper()
	limits, err := govtext.Limits(browserLimits)
	if err != nil {
		t.Fatal(err)
	}
	app, err := sluice.New(context.Background(), sluice.Config{
		DatabaseURL: filepath.Join(t.TempDir(), "sluice.db"),
		Providers: []sluice.Provider{{
			Name:   browserKey,
			LLM:    llm.Config{BaseURL: provider, Profile: llm.Groq},
			Limits: limits,
			// The day's budget is not paced: the pacer starts with nothing
			// in hand and would spread the test's calls over minutes.
			DayBurst: -1,
		}},
		Flows:        []governor.FlowConfig{{Name: "summaries", Weight: 2}, {Name: "digests", Priority: 1}, {Name: browserBackfill}},
		PollInterval: 20 * time.Millisecond,
		RetryBase:    10 * time.Millisecond,
		RetryMax:     50 * time.Millisecond,
		HealthEvery:  100 * time.Millisecond,
		HistoryEvery: time.Second,
		Logger:       slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := app.Stop(ctx); err != nil {
			t.Errorf("stop the app: %v", err)
		}
	})
	if err := summarize.Register(app, summarize.Config{}); err != nil {
		t.Fatal(err)
	}

	var flaky atomic.Bool
	flaky.Store(true)
	err = sluice.Register(app, run.Function{ID: browserFlaky, Event: browserFlakyEvent, Flow: "digests", Retries: run.NoRetries},
		func(ctx *sluice.Context, ev sluice.Event[browserDigest]) (string, error) {
			draft, err := sluice.LLM(ctx, "draft", &llm.ChatRequest{Model: "sim-model", MaxTokens: 120,
				Messages: []llm.Message{{Role: "user", Content: "Write the " + ev.Data.Edition + " digest of the week's articles."}}})
			if err != nil {
				return "", err
			}
			return sluice.Step(ctx, browserFlakyStep, func(context.Context) (string, error) {
				if flaky.Load() {
					return "", sluice.NonRetriable(errors.New(browserFlakyError))
				}
				return fmt.Sprintf("published the %s digest (%d characters)", ev.Data.Edition, len(draft.Text())), nil
			})
		})
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	items := map[string]browserArticle{}
	saved := map[string]string{}
	rejected := map[string]bool{}
	for i := range browserItems {
		items[fmt.Sprintf("article-%02d", i+1)] = browserArticle{Title: fmt.Sprintf("Artikel Nummer %d über das Wetter", i+1)}
	}
	err = sluice.RegisterBackfill(app, sluice.Backfill[browserArticle]{
		Backfill: run.Backfill{ID: browserBackfill, MaxBatch: 3, Poll: time.Second, RetryAfter: 200 * time.Millisecond},
		Pending: func(_ context.Context, after string, limit int) ([]string, error) {
			mu.Lock()
			defer mu.Unlock()
			var keys []string
			for k := range items {
				if _, done := saved[k]; !done && k > after {
					keys = append(keys, k)
				}
			}
			slices.Sort(keys)
			return keys[:min(limit, len(keys))], nil
		},
		Load: func(_ context.Context, keys []string) (map[string]browserArticle, error) {
			mu.Lock()
			defer mu.Unlock()
			out := map[string]browserArticle{}
			for _, k := range keys {
				if a, ok := items[k]; ok {
					out[k] = a
				}
			}
			return out, nil
		},
		Request: func(batch []sluice.Item[browserArticle]) (*llm.ChatRequest, error) {
			var b strings.Builder
			b.WriteString("Translate these titles into English, one per line:\n")
			for _, it := range batch {
				b.WriteString(it.Data.Title + "\n")
			}
			return &llm.ChatRequest{Model: "sim-model", MaxTokens: 30 * len(batch), Messages: []llm.Message{{Role: "user", Content: b.String()}}}, nil
		},
		Parse: func(_ *llm.ChatResponse, batch []sluice.Item[browserArticle]) ([]string, error) {
			out := make([]string, len(batch))
			for i, it := range batch {
				out[i] = "English title of " + it.Key
			}
			return out, nil
		},
		Save: func(_ context.Context, _ sluice.Tx, it sluice.Item[browserArticle], title string) error {
			mu.Lock()
			defer mu.Unlock()
			if it.Key == browserRejectOnce && !rejected[it.Key] {
				rejected[it.Key] = true
				return sluice.Reject("not English")
			}
			saved[it.Key] = title
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := app.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return app, &flaky
}

// serveBrowserApp serves app as sluice serve does (serve.go): the run API,
// /metrics and the dashboard behind one handler, in serve's guard with its
// default bounds and the dashboard's forms allowed, on a loopback address.
// It returns the base URL; the server stops when the test ends, before the
// app does.
func serveBrowserApp(t *testing.T, app *sluice.App) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sf := addServerFlags(flag.NewFlagSet("serve", flag.ContinueOnError))
	gc, err := sf.config(ln.Addr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	gc.Forms = serveapp.DashboardForm
	dash, err := app.Dashboard(sluice.DashboardConfig{Token: browserToken, OutputLimit: 4096, MaxEventBytes: 1 << 20, Refresh: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	srv := guard.NewServer(serveapp.Handler(serveapp.Parts{App: app, API: sluice.HandlerConfig{Token: browserToken, MaxEventBytes: 1 << 20, OutputLimit: 4096}, Dashboard: dash}), gc)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveUntilDone(ctx, srv, ln, 10*time.Second, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the server: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

func browserSend(t *testing.T, app *sluice.App, event, id string, data any) string {
	t.Helper()
	sent, err := app.Send(context.Background(), event, id, data)
	if err != nil {
		t.Fatal(err)
	}
	if len(sent) != 1 || sent[0].Status != "queued" {
		t.Fatalf("event %s %s: %+v, want one run queued", event, id, sent)
	}
	return sent[0].RunID
}

// browserEvent is a run's event as GET /v1/runs/{id} shows it.
type browserEvent struct {
	Name string          `json:"name"`
	ID   string          `json:"id"`
	Data json.RawMessage `json:"data"`
}

// browserRunEvent GETs run id's event from the run API at base.
func browserRunEvent(t *testing.T, base, id string) browserEvent {
	t.Helper()
	req, err := http.NewRequest("GET", base+"/v1/runs/"+url.PathEscape(id), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+browserToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var d struct {
		Event *browserEvent `json:"event"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil || resp.StatusCode != http.StatusOK || d.Event == nil {
		t.Fatalf("GET /v1/runs/%s: %d, event %+v (%v)", id, resp.StatusCode, d.Event, err)
	}
	return *d.Event
}

func browserWait(ctx context.Context, t *testing.T, app *sluice.App, id string) run.Summary {
	t.Helper()
	st, err := app.Wait(ctx, id)
	if err != nil {
		t.Fatalf("run %s: %v", id, err)
	}
	return st
}

// browserScrape is one scrape of /metrics, parsed.
type browserScrape map[string]*dto.MetricFamily

// browserMetrics GETs base's /metrics with token and parses it.
func browserMetrics(t *testing.T, base, token string) browserScrape {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return browserScrape(fams)
}

// browserWaitMetrics scrapes base until ok holds of a scrape, or ctx ends.
func browserWaitMetrics(ctx context.Context, t *testing.T, base, what string, ok func(browserScrape) bool) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if ok(browserMetrics(t, base, browserToken)) {
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("%s: not by the deadline", what)
		}
	}
}

// value is the value of the first series of name whose labels include
// labels (name, value, …): a counter's or gauge's value, a histogram's
// count.
func (f browserScrape) value(name string, labels ...string) (float64, bool) {
	fam := f[name]
	if fam == nil {
		return 0, false
	}
	for _, m := range fam.GetMetric() {
		if !browserHasLabels(m, labels) {
			continue
		}
		switch fam.GetType() {
		case dto.MetricType_COUNTER:
			return m.GetCounter().GetValue(), true
		case dto.MetricType_GAUGE:
			return m.GetGauge().GetValue(), true
		case dto.MetricType_HISTOGRAM:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
		return 0, false
	}
	return 0, false
}

func (f browserScrape) must(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	v, ok := f.value(name, labels...)
	if !ok {
		t.Fatalf("no series %s%v in /metrics", name, labels)
	}
	return v
}

// oneHot checks that of name's series with labels, exactly one is 1 and the
// rest 0, and returns the value of label of that one.
func (f browserScrape) oneHot(t *testing.T, name, label string, labels ...string) string {
	t.Helper()
	on, n := "", 0
	for _, m := range f[name].GetMetric() {
		if !browserHasLabels(m, labels) {
			continue
		}
		n++
		switch v := m.GetGauge().GetValue(); v {
		case 0:
		case 1:
			if on != "" {
				t.Errorf("%s%v: both %s and %s are 1", name, labels, on, browserLabel(m, label))
			}
			on = browserLabel(m, label)
		default:
			t.Errorf("%s%v{%s=%s} = %v: want 0 or 1", name, labels, label, browserLabel(m, label), v)
		}
	}
	if n < 2 {
		t.Errorf("%s%v: %d series, want one per %s", name, labels, n, label)
	}
	return on
}

func browserHasLabels(m *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		if browserLabel(m, labels[i]) != labels[i+1] {
			return false
		}
	}
	return true
}

func browserLabel(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
