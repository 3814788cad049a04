package main

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/sim"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/testenv"
)

// jobsKillServeEnv, set, makes this test binary `sluice serve` with its
// arguments, as sluice's main runs it: the worker process of
// TestServeJobsKill. The test files' init functions run after every
// command has registered itself (see bench_multinode_test.go).
const jobsKillServeEnv = "SLUICE_TEST_JOBS_KILL_SERVE"

func init() {
	if os.Getenv(jobsKillServeEnv) == "" {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	env := &cli.Env{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
	code := runMain(ctx, env, os.Args[1:])
	stop()
	os.Exit(code)
}

const (
	jobsKillJob      = "kill"
	jobsKillItems    = 200
	jobsKillBatch    = 5
	jobsKillInFlight = 3 // batches in flight at once, so a kill cuts several short
	jobsKillKills    = 10
)

// The team's tables: the items, and the outputs, which take each item once
// (the unique constraint): a second save of an item fails its batch's
// transaction, and the job would never finish.
const jobsKillSchema = `
CREATE TABLE items (id TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE outputs (job TEXT NOT NULL, item_key TEXT NOT NULL, output TEXT NOT NULL, UNIQUE (job, item_key))`

// jobsKillItemRE finds the items a call carried in its prompt: prompt.item
// renders each as "item KEY: …".
var jobsKillItemRE = regexp.MustCompile(`item (k[0-9]{4}):`)

// kill -9 of `sluice serve --config` ten times during a job's run: every
// item is saved exactly once in the team's table (a plain INSERT into a
// table with a unique constraint, which a second save would violate), and
// no finished call is billed again: each kill re-bills at most the calls
// it cut short (the job's in_flight). Three layouts:
//   - sqlite: sluice's database and the team's are two SQLite files; each
//     batch is saved in one transaction on the team's file that records the
//     keys in sluice_job_saves;
//   - postgres: the team's tables are in sluice's own PostgreSQL database;
//     the output statement runs in sluice's save transaction;
//   - sqlite+postgres: sluice on SQLite, the team's tables on PostgreSQL
//     (sluice_job_saves on PostgreSQL).
func TestServeJobsKill(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("ten kills and restarts of sluice serve per database")
	}
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		team := filepath.Join(dir, "team.db")
		f, err := os.Create(team) // a job's SQLite file must exist
		if err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
		serveJobsKill(t, filepath.Join(dir, "sluice.db"), "sqlite:"+team, false)
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		url := testenv.Postgres(t)
		serveJobsKill(t, url, url, true)
	})
	t.Run("sqlite+postgres", func(t *testing.T) {
		t.Parallel()
		serveJobsKill(t, filepath.Join(t.TempDir(), "sluice.db"), testenv.Postgres(t), false)
	})
}

// serveJobsKill runs the test with sluice's database appDB and the team's
// teamDB; inTx says the two are one, where the output statement runs in
// sluice's own transaction.
func serveJobsKill(t *testing.T, appDB, teamDB string, inTx bool) {
	ctx := context.Background()
	model, err := forecast.NewModel(forecast.ModelConfig{Profile: "groq", Latency: 150 * time.Millisecond, Wire: true, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	provider := &jobsKillProvider{calls: map[uint64]jobsKillCall{}}
	provider.sim = sim.NewServer(model, sim.ServerConfig{OnFinish: provider.finished})
	srv := httptest.NewServer(provider)
	t.Cleanup(srv.Close)

	// The team's database.
	var team *sql.DB
	if p, ok := strings.CutPrefix(teamDB, "sqlite:"); ok {
		team, err = sql.Open("sqlite", "file:"+p+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	} else {
		team, err = sql.Open("pgx", teamDB)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = team.Close() })
	keys := make([]string, jobsKillItems)
	values := make([]string, jobsKillItems)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%04d", i)
		values[i] = fmt.Sprintf("('%s', 'headline number %d')", keys[i], i)
	}
	for q := range strings.SplitSeq(jobsKillSchema, ";") {
		if _, err := team.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := team.ExecContext(ctx, "INSERT INTO items (id, body) VALUES "+strings.Join(values, ", ")); err != nil {
		t.Fatal(err)
	}
	saved := func() int {
		t.Helper()
		var n int
		if err := team.QueryRowContext(ctx, "SELECT COUNT(*) FROM outputs").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	savedKeys := func() map[string]bool {
		t.Helper()
		rows, err := team.QueryContext(ctx, "SELECT item_key FROM outputs")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]bool{}
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				t.Fatal(err)
			}
			out[k] = true
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	st := testenv.OpenStore(t, appDB)
	recorded := func() map[string]store.Item {
		t.Helper()
		items, err := st.Items(ctx, jobsKillJob, keys)
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

	// The config file, as a team writes it. The query lists the items that
	// still need the job, as docs/jobs.md says a source query does.
	config := filepath.Join(t.TempDir(), "sluice.yaml")
	yaml := fmt.Sprintf(`db: %q
profile: groq
limits: rpm=100000,tpm=100000000
model: sim-model
app_version: serve-jobs-kill-test
log_level: info
log_format: text
stop_grace: 30s
source_db: %q
jobs:
  - name: %s
    source:
      query: >-
        SELECT id, body FROM items
        WHERE NOT EXISTS (SELECT 1 FROM outputs o WHERE o.job = '%s' AND o.item_key = items.id)
      key: id
    prompt:
      system: Translate each headline into English.
      item: "item {{.id}}: {{.body}}"
      batch_max: %d
      fallback: words
    max_tokens: 20
    checks: {max_tokens: 1000}
    in_flight: %d
    poll: 1s
    output:
      sql: INSERT INTO outputs (job, item_key, output) VALUES (:job, :key, :output)
`, appDB, teamDB, jobsKillJob, jobsKillJob, jobsKillBatch, jobsKillInFlight)
	if err := os.WriteFile(config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}

	// Worker w calls the provider under /w<w>/, so every call is known by
	// the worker that made it.
	start := func(w int) *jobsKillServe {
		return startJobsKillServe(t, "serve", "--config", config, "--addr", "127.0.0.1:0",
			"--provider-url", fmt.Sprintf("%s/w%d/v1", srv.URL, w))
	}
	var (
		snapshots []map[string]bool // the items each kill found saved
		servers   []*jobsKillServe
		inFlight  []int32 // the calls in flight at each kill
	)
	began := time.Now()
	last := 0
	for k := range jobsKillKills {
		w := start(k)
		servers = append(servers, w)
		// A different share of the work each time, and at least one more
		// item saved than at the last kill.
		want := max((k+1)*jobsKillItems/(jobsKillKills+1), last+1)
		w.waitFor(t, fmt.Sprintf("%d items saved in the team's table", want), func() (bool, string) {
			n := saved()
			return n >= want, fmt.Sprintf("%d saved", n)
		})
		// And a different point of a batch's progress.
		switch k % 3 {
		case 0: // in a call: its answer is lost, and the call made again
			w.waitFor(t, "a call in flight", func() (bool, string) {
				return provider.inFlight(k) > 0 && saved() < jobsKillItems, "no call in flight"
			})
		case 1: // right after a save
		case 2: // right after an answer, which serve may not have recorded yet
			ended := provider.ended(k)
			w.waitFor(t, "a call answered", func() (bool, string) {
				return provider.ended(k) > ended, "no call answered since"
			})
		}
		snap := savedKeys()
		inFlight = append(inFlight, provider.inFlight(k))
		w.kill()
		snapshots = append(snapshots, snap)
		last = len(snap)
		t.Logf("kill %d at %s: %d of %d items saved before it, %d calls in flight", k+1, time.Since(began).Round(time.Millisecond), len(snap), jobsKillItems, inFlight[k])
	}
	w := start(jobsKillKills)
	servers = append(servers, w)
	w.waitFor(t, "every item saved in the team's table, and recorded", func() (bool, string) {
		n, r := saved(), len(recorded())
		return n == jobsKillItems && r == jobsKillItems, fmt.Sprintf("%d saved in the team's table, %d recorded saved by sluice", n, r)
	})
	if err := w.stop(); err != nil {
		t.Errorf("the last serve did not stop cleanly at SIGTERM: %v", err)
	}
	t.Logf("every item saved at %s", time.Since(began).Round(time.Millisecond))
	srv.Close() // once every call has ended, and is logged

	// Every item saved exactly once: as many rows as items, one per key,
	// and the constraint never refused a second save.
	if n := saved(); n != jobsKillItems {
		t.Errorf("%d rows in the team's table, want the %d items", n, jobsKillItems)
	}
	if got := savedKeys(); len(got) != jobsKillItems {
		t.Errorf("%d items saved, want %d", len(got), jobsKillItems)
	}
	for i, s := range servers {
		out := s.out.String()
		// A second save of an item fails its batch on the constraint
		// (SQLite's "UNIQUE constraint failed", PostgreSQL's "duplicate
		// key"); a run that a restart cannot replay as it ran fails on
		// DBOS's UnexpectedStep, its items left to later runs.
		for _, bad := range []string{"UNIQUE", "duplicate key", "UnexpectedStep", "DATA RACE"} {
			if at := strings.Index(out, bad); at >= 0 {
				line := out[strings.LastIndexByte(out[:at], '\n')+1:]
				line, _, _ = strings.Cut(line, "\n")
				t.Errorf("serve %d says %q: %s", i+1, bad, line)
				break
			}
		}
	}
	if !inTx {
		var n int
		if err := team.QueryRowContext(ctx, "SELECT COUNT(*) FROM sluice_job_saves WHERE job = $1", jobsKillJob).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != jobsKillItems {
			t.Errorf("%d keys in sluice_job_saves, want %d", n, jobsKillItems)
		}
	}
	final := recorded()
	for _, key := range keys {
		if it, ok := final[key]; !ok || it.State != store.ItemSaved {
			t.Errorf("item %s: state %q, want saved", key, it.State)
		}
	}
	checkJobsKillCalls(t, provider.log(), final, snapshots, inFlight)
}

// checkJobsKillCalls checks the provider's log of calls against sluice's
// records, as TestBackfillKill (backfill_kill_test.go) does: a batch's
// request is fixed once it is selected, so every call of a batch carries
// the same text, and one of them is the answered call its items' records
// name (the call whose answer was saved). Any other call of that batch was
// billed again, and must have been made by a serve killed before the one
// whose call was saved: it is counted against that kill. Each kill may
// re-bill at most the calls in flight (in_flight, jobsKillInFlight: a call
// cut short, or answered but not yet recorded); the last serve, never
// killed, none; and no serve calls for an item saved before it started.
func checkJobsKillCalls(t *testing.T, calls map[uint64]jobsKillCall, final map[string]store.Item, snapshots []map[string]bool, inFlight []int32) {
	t.Helper()
	recorded := map[string]jobsKillCall{} // request text → the call whose answer was saved
	for key, it := range final {
		pid := it.RequestID[strings.LastIndexByte(it.RequestID, ' ')+1:]
		id, err := strconv.ParseUint(strings.TrimPrefix(pid, "chatcmpl-sim-"), 10, 64)
		c, ok := calls[id]
		if err != nil || !ok || !c.Answered || !slices.Contains(c.keys, key) {
			t.Errorf("item %s: its record names request %q, which is no answered call carrying it", key, it.RequestID)
			continue
		}
		recorded[c.text] = c
	}
	carried := map[string]string{} // item → request text
	rebilled := make([]int, len(snapshots)+1)
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
				if snapshots[k][key] {
					t.Errorf("call %d of serve %d carried item %s, saved before kill %d", c.ID, c.worker+1, key, k+1)
				}
			}
		}
		switch rec, ok := recorded[c.text]; {
		case !ok:
			t.Errorf("call %d of serve %d: no item records the batch it was for", c.ID, c.worker+1)
		case c.ID == rec.ID:
		case c.worker >= rec.worker:
			t.Errorf("call %d of serve %d was billed for a batch whose saved answer is call %d of serve %d", c.ID, c.worker+1, rec.ID, rec.worker+1)
		default:
			rebilled[c.worker]++
		}
	}
	if len(carried) != len(final) {
		t.Errorf("calls carried %d items, want %d", len(carried), len(final))
	}
	total := 0
	for k, n := range rebilled {
		total += n
		switch {
		case k == len(snapshots) && n > 0:
			t.Errorf("the last serve, never killed, re-billed %d calls", n)
		case n > jobsKillInFlight:
			t.Errorf("kill %d re-billed %d calls, want at most the %d in flight", k+1, n, jobsKillInFlight)
		}
	}
	if len(calls) != len(recorded)+total {
		t.Errorf("%d calls for %d batches, %d re-billed: some call is counted nowhere", len(calls), len(recorded), total)
	}
	t.Logf("%d kills, %d items, %d calls for %d batches; re-billed %d in all, by each kill %v (at most %d each); calls in flight at each kill %v; %d calls cut short",
		len(snapshots), len(final), len(calls), len(recorded), total, rebilled[:len(snapshots)], jobsKillInFlight, inFlight, cut)
}

// jobsKillProvider serves the simulator to the serve processes, serve w
// under /w<w>/, and logs each call it charged with the serve that made it
// and the items it carried.
type jobsKillProvider struct {
	sim http.Handler

	mu     sync.Mutex
	calls  map[uint64]jobsKillCall // by the simulator's ID
	flying map[int]*atomic.Int32   // by serve: requests being served
	done   map[int]*atomic.Int64   // by serve: requests served to their end
}

// jobsKillCall is a call the simulator charged.
type jobsKillCall struct {
	sim.Call
	worker int
	text   string   // the request's messages
	keys   []string // the items it carried
}

func (p *jobsKillProvider) counters(worker int) (*atomic.Int32, *atomic.Int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.flying == nil {
		p.flying, p.done = map[int]*atomic.Int32{}, map[int]*atomic.Int64{}
	}
	if p.flying[worker] == nil {
		p.flying[worker], p.done[worker] = &atomic.Int32{}, &atomic.Int64{}
	}
	return p.flying[worker], p.done[worker]
}

func (p *jobsKillProvider) inFlight(worker int) int32 {
	f, _ := p.counters(worker)
	return f.Load()
}

func (p *jobsKillProvider) ended(worker int) int64 {
	_, d := p.counters(worker)
	return d.Load()
}

func (p *jobsKillProvider) log() map[uint64]jobsKillCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.calls)
}

func (p *jobsKillProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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
	flying, done := p.counters(worker)
	flying.Add(1)
	defer flying.Add(-1)
	defer done.Add(1)
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
// the serve that made the call.
func (p *jobsKillProvider) finished(c sim.Call) {
	kc := jobsKillCall{Call: c, text: strings.Join(c.Messages, "\n")}
	for _, m := range jobsKillItemRE.FindAllStringSubmatch(kc.text, -1) {
		kc.keys = append(kc.keys, m[1])
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls[c.ID] = kc
}

// jobsKillServe is a `sluice serve` process of TestServeJobsKill.
type jobsKillServe struct {
	cmd  *exec.Cmd
	out  *testenv.Buffer
	done chan struct{} // closed when it has exited
	err  error         // how it exited, once done
}

// startJobsKillServe starts this test binary as `sluice` with args, killed
// when the test ends.
func startJobsKillServe(t *testing.T, args ...string) *jobsKillServe {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...) // #nosec G204 -- this test binary, as sluice
	s := &jobsKillServe{cmd: cmd, out: &testenv.Buffer{}, done: make(chan struct{})}
	cmd.Env = append(os.Environ(), jobsKillServeEnv+"=1", "SLUICE_DB=", "SLUICE_APP_VERSION=")
	cmd.Stdout, cmd.Stderr = s.out, s.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s.err = cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(s.kill)
	return s
}

// waitFor waits until ok holds, at most testenv.Budget, failing if serve
// exits first.
func (s *jobsKillServe) waitFor(t *testing.T, what string, ok func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(testenv.Budget)
	for {
		done, state := ok()
		if done {
			return
		}
		select {
		case <-s.done:
			t.Fatalf("waiting for %s (%s), serve exited: %v\n%s", what, state, s.err, s.out.String())
		case <-time.After(10 * time.Millisecond): // poll interval; the deadline bounds the wait
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s (%s)\nserve's output:\n%s", what, testenv.Budget, state, s.out.String())
		}
	}
}

// kill SIGKILLs serve (no shutdown, no flush) and waits until it is gone.
func (s *jobsKillServe) kill() {
	_ = s.cmd.Process.Kill()
	<-s.done
}

// stop sends SIGTERM, serve's graceful stop, and returns how it exited.
func (s *jobsKillServe) stop() error {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	<-s.done
	return s.err
}
