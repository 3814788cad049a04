package sluice_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver, for the app's tables

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/sim"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/llm"
	"github.com/sluice-dev/sluice/run"
)

// The worker of TestBackfillKill is this test binary, running
// TestBackfillKillWorker with these variables set; the simulated provider
// stays in the parent, so its log of calls survives the kills.
const (
	killDBEnv  = "SLUICE_TEST_KILL_DB"  // the database URL, the same as the parent's
	killSimEnv = "SLUICE_TEST_KILL_SIM" // the simulator's base URL
)

const (
	killBackfillID = "kill"
	killItems      = 300
	killBatch      = 5
	killInFlight   = 3 // calls in flight at once, so a kill cuts several short
	killKills      = 3
	// killWait bounds each wait for a worker's progress.
	killWait = time.Minute
)

// The app's tables: the items, and the saves. The saves have no unique
// constraint on purpose: an item saved twice shows as two rows.
const killSchema = `
CREATE TABLE kill_items (key TEXT PRIMARY KEY, text TEXT NOT NULL);
CREATE TABLE kill_saves (key TEXT NOT NULL, output TEXT NOT NULL, saved_at BIGINT NOT NULL)`

// openAppDB opens the database at url (a PostgreSQL URL, or an SQLite
// file) for the app's own tables.
func openAppDB(url string) (*sql.DB, error) {
	if strings.HasPrefix(url, "postgres://") || strings.HasPrefix(url, "postgresql://") {
		return sql.Open("pgx", url)
	}
	return sql.Open("sqlite", url+"?_pragma=busy_timeout(10000)")
}

// killRequestLine is how a batch's request names each item: one line per
// item, from which the parent reads the keys a call carried.
const killRequestLine = "item "

// Kill -9 during a backfill, on both databases: a worker process runs a
// backfill of killItems items in batches of killBatch against a simulated
// provider, and is SIGKILLed killKills times at different points of its
// progress; a last worker finishes. Every item is saved once (one row in
// the app's table, which has no unique constraint), its processed_at is set
// once (an item processed before a kill keeps the exact time it had), its
// saved output comes from the call its record names, and no batch's call
// was billed again once answered and recorded: each kill re-bills at most
// the calls in flight (killInFlight).
func TestBackfillKill(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		ctx := context.Background()
		model, err := forecast.NewModel(forecast.ModelConfig{Profile: "groq", Latency: 30 * time.Millisecond, Wire: true, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		provider := &killProvider{calls: map[uint64]killCall{}}
		provider.sim = sim.NewServer(model, sim.ServerConfig{OnFinish: provider.finished})
		srv := httptest.NewServer(provider)
		t.Cleanup(srv.Close)

		db, err := openAppDB(url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		keys := make([]string, killItems)
		values := make([]string, killItems)
		for i := range keys {
			keys[i] = fmt.Sprintf("k%04d", i)
			values[i] = fmt.Sprintf("('%s', 'headline number %d')", keys[i], i)
		}
		for _, q := range strings.Split(killSchema, ";") {
			if _, err := db.ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := db.ExecContext(ctx, "INSERT INTO kill_items (key, text) VALUES "+strings.Join(values, ", ")); err != nil {
			t.Fatal(err)
		}
		st := testenv.OpenStore(t, url)
		processed := func() map[string]store.Item {
			t.Helper()
			items, err := st.Items(ctx, killBackfillID, keys)
			if err != nil {
				t.Fatal(err)
			}
			out := map[string]store.Item{}
			for _, it := range items {
				if it.State == store.ItemSaved || it.State == store.ItemParked {
					out[it.Key] = it
				}
			}
			return out
		}

		// Worker w calls the provider under /w<w>/, so every call is
		// known by the worker that made it.
		env := func(w int) []string {
			return append(os.Environ(), killDBEnv+"="+url, fmt.Sprintf("%s=%s/w%d/v1", killSimEnv, srv.URL, w))
		}
		var snapshots []map[string]store.Item // what each kill found processed
		began := time.Now()
		for k := range killKills {
			w := startKillWorker(t, env(k))
			// A different share of the work each time, and a different
			// point of the batch in progress.
			share := (k + 1) * killItems / (killKills + 1)
			w.waitFor(t, fmt.Sprintf("%d items processed", share), func() bool { return len(processed()) >= share })
			snap := processed()
			switch k % 3 {
			case 0: // in a call: its answer is lost, and the call made again
				w.waitFor(t, "a call in flight", func() bool { return provider.inFlight.Load() > 0 })
			case 1: // right after a save
			case 2: // right after an answer, which the worker may not have recorded yet
				ended := provider.ended.Load()
				w.waitFor(t, "a call answered", func() bool { return provider.ended.Load() > ended })
			}
			w.kill()
			snapshots = append(snapshots, snap)
			t.Logf("kill %d at %s: %d of %d items processed before it", k+1, time.Since(began).Round(time.Millisecond), len(snap), killItems)
		}
		// Then a graceful stop, as a deploy's SIGTERM makes one, with a
		// call in flight: the call finishes and is recorded, the worker
		// exits by itself, and nothing it did is billed again.
		w := startKillWorker(t, env(killKills))
		more := len(snapshots[len(snapshots)-1]) + killBatch
		w.waitFor(t, fmt.Sprintf("%d items processed", more), func() bool { return len(processed()) >= more })
		w.waitFor(t, "a call in flight", func() bool { return provider.inFlight.Load() > 0 })
		snapshots = append(snapshots, processed())
		if err := w.stop(); err != nil {
			t.Fatalf("the worker stopped gracefully: %v\n%s", err, w.out.String())
		}
		t.Logf("graceful stop at %s: %d of %d items processed before it", time.Since(began).Round(time.Millisecond), len(snapshots[killKills]), killItems)
		w = startKillWorker(t, env(killKills+1))
		w.waitFor(t, "every item processed", func() bool { return len(processed()) == killItems })
		w.kill()
		t.Logf("every item processed at %s", time.Since(began).Round(time.Millisecond))
		srv.Close() // once every call has ended, and is logged

		final := processed()
		checkKillSaves(t, db, keys, final, snapshots)
		checkKillCalls(t, provider.calls, final, snapshots, killKills)
	})
}

// checkKillSaves checks that every item was saved once, from the call its
// record names, and that every item a kill found processed kept its
// processed_at.
func checkKillSaves(t *testing.T, db *sql.DB, keys []string, final map[string]store.Item, snapshots []map[string]store.Item) {
	// One row each, in a table that would take two.
	rows, err := db.QueryContext(context.Background(), "SELECT key, output FROM kill_saves")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	saves := map[string][]string{}
	for rows.Next() {
		var key, output string
		if err := rows.Scan(&key, &output); err != nil {
			t.Fatal(err)
		}
		saves[key] = append(saves[key], output)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(saves) != len(keys) {
		t.Errorf("%d keys saved, want the %d items", len(saves), len(keys))
	}
	for _, key := range keys {
		it, ok := final[key]
		switch {
		case len(saves[key]) != 1:
			t.Errorf("item %s saved %d times, want once: %q", key, len(saves[key]), saves[key])
		case !ok || it.State != store.ItemSaved || it.ProcessedAt.IsZero():
			t.Errorf("item %s: state %q processed at %v, want saved with processed_at set", key, it.State, it.ProcessedAt)
		case saves[key][0] != killOutput(providerRequest(it.RequestID), key):
			t.Errorf("item %s saved %q, but its record names request %s", key, saves[key][0], it.RequestID)
		}
	}
	for k, snap := range snapshots {
		for key, before := range snap {
			if after := final[key].ProcessedAt; !after.Equal(before.ProcessedAt) {
				t.Errorf("item %s processed at %v before kill %d, at %v in the end", key, before.ProcessedAt, k+1, after)
			}
		}
	}
}

// checkKillCalls checks the provider's log of calls against the records:
// each batch's request is fixed once selected, so all its calls carry the
// same text, and one of them is the answered call its items' records name.
// Every other call of a batch must have been made by a worker killed before
// that one, and each kill re-bills at most the calls in flight; the
// graceful stop of worker graceful re-bills none. No worker calls for an
// item processed before it started.
func checkKillCalls(t *testing.T, calls map[uint64]killCall, final map[string]store.Item, snapshots []map[string]store.Item, graceful int) {
	recorded := map[string]killCall{} // request text → the call whose answer was saved
	for key, it := range final {
		id, err := strconv.ParseUint(strings.TrimPrefix(providerRequest(it.RequestID), "chatcmpl-sim-"), 10, 64)
		c, ok := calls[id]
		if err != nil || !ok || !c.Answered || !slices.Contains(c.keys, key) {
			t.Errorf("item %s: its record names request %s, which is no answered call carrying it", key, it.RequestID)
			continue
		}
		recorded[c.text] = c
	}
	carried := map[string]string{} // item → request text
	rebilled := make([]int, len(snapshots))
	cut := 0
	for _, c := range calls {
		if !c.Answered {
			cut++
		}
		for _, key := range c.keys {
			if other, ok := carried[key]; ok && other != c.text {
				t.Errorf("item %s carried by two different requests:\n%s\n%s", key, other, c.text)
			}
			carried[key] = c.text
			for k := 0; k < c.worker && k < len(snapshots); k++ {
				if _, done := snapshots[k][key]; done {
					t.Errorf("call %d of worker %d carried item %s, processed before kill %d", c.ID, c.worker, key, k+1)
				}
			}
		}
		switch rec, ok := recorded[c.text]; {
		case !ok:
			t.Errorf("call %d: no item records the batch it was for", c.ID)
		case c.ID == rec.ID:
		case c.worker >= rec.worker:
			t.Errorf("call %d of worker %d was billed for a batch whose saved answer is call %d of worker %d", c.ID, c.worker, rec.ID, rec.worker)
		default:
			rebilled[c.worker]++
		}
	}
	if len(carried) != len(final) {
		t.Errorf("calls carried %d items, want %d", len(carried), len(final))
	}
	for k, n := range rebilled {
		if k == graceful && n > 0 {
			t.Errorf("the graceful stop of worker %d re-billed %d calls, want none: its calls in flight finish", k, n)
		}
		if n > killInFlight {
			t.Errorf("kill %d re-billed %d calls, want at most the %d in flight", k+1, n, killInFlight)
		}
	}
	if len(calls) > len(recorded)+killInFlight*len(snapshots) {
		t.Errorf("%d calls for %d batches and %d kills: want at most %d more per kill", len(calls), len(recorded), len(snapshots), killInFlight)
	}
	t.Logf("%d calls for %d batches; re-billed by each kill %v; %d calls cut short", len(calls), len(recorded), rebilled, cut)
}

// killOutput is the output the worker saves for item key from the call
// that answered with request ID id.
func killOutput(id, key string) string { return id + " " + key }

// providerRequest is the provider's response ID in a recorded request: its
// last word, after the call's own ID.
func providerRequest(requestID string) string {
	return requestID[strings.LastIndexByte(requestID, ' ')+1:]
}

// killProvider serves the simulator to the workers, worker w under /w<w>/,
// and logs each call it charged with the worker that made it and the keys
// it carried.
type killProvider struct {
	sim      http.Handler
	inFlight atomic.Int32 // requests being served
	ended    atomic.Int64 // requests served to their end

	mu    sync.Mutex
	calls map[uint64]killCall // by the simulator's ID
}

// killCall is a call the simulator charged.
type killCall struct {
	sim.Call
	worker int
	text   string   // the request's messages
	keys   []string // the items it carried
}

func (p *killProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n, path, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, "/w"), "/")
	worker, err := strconv.Atoi(n)
	if !ok || err != nil {
		http.NotFound(w, r)
		return
	}
	r2 := *r
	u := *r.URL
	u.Path, u.RawPath = "/"+path, ""
	r2.URL = &u
	p.inFlight.Add(1)
	defer p.inFlight.Add(-1)
	defer p.ended.Add(1)
	defer func() { // also when the simulator aborts a call cut short
		id, err := strconv.ParseUint(strings.TrimPrefix(w.Header().Get("X-Request-Id"), "req_sim_"), 10, 64)
		if err != nil {
			return // no call: refused before the simulator numbered it
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if c, logged := p.calls[id]; logged {
			c.worker = worker
			p.calls[id] = c
		}
	}()
	p.sim.ServeHTTP(w, &r2)
}

// finished is the simulator's OnFinish: it runs before ServeHTTP records
// the worker.
func (p *killProvider) finished(c sim.Call) {
	kc := killCall{Call: c, text: strings.Join(c.Messages, "\n")}
	for line := range strings.Lines(kc.text) {
		if rest, ok := strings.CutPrefix(line, killRequestLine); ok {
			key, _, _ := strings.Cut(rest, ":")
			kc.keys = append(kc.keys, key)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls[c.ID] = kc
}

// killWorker is a worker process of TestBackfillKill.
type killWorker struct {
	cmd   *exec.Cmd
	stdin io.Closer // closing it stops the worker gracefully
	out   *testenv.Buffer
	done  chan struct{} // closed when it has exited
	err   error         // how it exited, once done
}

// startKillWorker starts a worker, killed when the test ends. Its stdin is
// a pipe it reads until the parent closes it, so a worker whose parent
// dies ends too.
func startKillWorker(t *testing.T, env []string) *killWorker {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestBackfillKillWorker$", "-test.count=1", "-test.timeout=5m") // #nosec G204 -- this test binary
	w := &killWorker{cmd: cmd, out: &testenv.Buffer{}, done: make(chan struct{})}
	cmd.Env, cmd.Stdout, cmd.Stderr = env, w.out, w.out
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	w.stdin = stdin
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		w.err = cmd.Wait()
		close(w.done)
	}()
	t.Cleanup(func() {
		w.kill()
		if strings.Contains(w.out.String(), "DATA RACE") {
			t.Errorf("a worker found a data race:\n%s", w.out.String())
		}
	})
	return w
}

// waitFor waits until ok, at most killWait, failing if the worker exits
// first.
func (w *killWorker) waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(killWait)
	for !ok() {
		select {
		case <-w.done:
			t.Fatalf("waiting for %s, the worker exited: %v\n%s", what, w.err, w.out.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s\nworker output:\n%s", what, killWait, w.out.String())
		}
	}
}

// stop asks the worker to stop gracefully (App.Stop) and returns how it
// exited.
func (w *killWorker) stop() error {
	_ = w.stdin.Close()
	<-w.done
	return w.err
}

// kill SIGKILLs the worker (no shutdown, no flush) and waits until it is gone.
func (w *killWorker) kill() {
	_ = w.cmd.Process.Kill()
	<-w.done
}

// TestBackfillKillWorker is the worker process of TestBackfillKill: it runs
// the backfill until its stdin closes or it is killed. Run alone it skips.
func TestBackfillKillWorker(t *testing.T) {
	url, simURL := os.Getenv(killDBEnv), os.Getenv(killSimEnv)
	if url == "" {
		t.Skip("the worker process of TestBackfillKill, which starts it")
	}
	ctx := context.Background()
	db, err := openAppDB(url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	limits := governor.Limits{governor.TPM: 10_000_000, governor.RPM: 100_000}
	app, err := sluice.New(ctx, sluice.Config{
		DatabaseURL:  url,
		AppVersion:   "backfill-kill-test",
		PollInterval: 20 * time.Millisecond,
		RetryBase:    10 * time.Millisecond, RetryMax: 200 * time.Millisecond,
		Logger:    slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Providers: []sluice.Provider{{Name: "sim", LLM: llm.Config{BaseURL: simURL, Profile: llm.Groq}, Limits: limits}},
	})
	if err != nil {
		t.Fatal(err)
	}
	type headline struct {
		Text string `json:"text"`
	}
	err = sluice.RegisterBackfill(app, sluice.Backfill[headline]{
		Backfill: run.Backfill{
			ID:            killBackfillID,
			PendingSQL:    `SELECT i.key FROM kill_items i WHERE i.key > $1 AND NOT EXISTS (SELECT 1 FROM kill_saves s WHERE s.key = i.key) ORDER BY i.key LIMIT $2`,
			MaxBatch:      killBatch,
			BatchesPerRun: 7, // several runs, each handing on to the next, killed mid-run
			InFlight:      killInFlight,
			Poll:          500 * time.Millisecond,
		},
		Load: func(ctx context.Context, keys []string) (map[string]headline, error) {
			marks, args := make([]string, len(keys)), make([]any, len(keys))
			for i, k := range keys {
				marks[i], args[i] = "$"+strconv.Itoa(i+1), k
			}
			rows, err := db.QueryContext(ctx, "SELECT key, text FROM kill_items WHERE key IN ("+strings.Join(marks, ", ")+")", args...)
			if err != nil {
				return nil, err
			}
			defer rows.Close()
			out := map[string]headline{}
			for rows.Next() {
				var key string
				var h headline
				if err := rows.Scan(&key, &h.Text); err != nil {
					return nil, err
				}
				out[key] = h
			}
			return out, rows.Err()
		},
		Request: func(items []sluice.Item[headline]) (*llm.ChatRequest, error) {
			var b strings.Builder
			b.WriteString("Translate each headline into English, one per line.\n")
			for _, it := range items {
				fmt.Fprintf(&b, "%s%s: %s\n", killRequestLine, it.Key, it.Data.Text)
			}
			return &llm.ChatRequest{Model: "sim-model", MaxTokens: 10 * len(items),
				Messages: []llm.Message{{Role: "user", Content: b.String()}}}, nil
		},
		Parse: func(resp *llm.ChatResponse, items []sluice.Item[headline]) ([]string, error) {
			out := make([]string, len(items))
			for i, it := range items {
				out[i] = killOutput(resp.ID, it.Key)
			}
			return out, nil
		},
		Save: func(ctx context.Context, tx sluice.Tx, it sluice.Item[headline], output string) error {
			_, err := tx.Exec(ctx, "INSERT INTO kill_saves (key, output, saved_at) VALUES ($1, $2, $3)", it.Key, output, time.Now().UnixMilli())
			return err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := app.Start(ctx); err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent goes, or stops it
	if err := app.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}
