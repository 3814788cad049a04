package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/sim"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/llm"
	"github.com/sluice-dev/sluice/run"
)

// The worker is this same binary, started with the job as JSON in this
// variable, so that each side's peak memory is its own process's.
const backfillWorkerEnv = "SLUICE_BENCH_BACKFILL_WORKER"

// The app's table both sides work through: an item needs the backfill while
// its output is NULL; writes counts the saves of its output, so an item
// saved twice shows. The partial index is what the app's own query for
// pending items needs, on both sides.
const (
	backfillCreate = `CREATE TABLE bench_items (id TEXT PRIMARY KEY, body TEXT NOT NULL, output TEXT, writes INTEGER NOT NULL DEFAULT 0)`
	backfillIndex  = `CREATE INDEX bench_items_pending ON bench_items (id) WHERE output IS NULL`
	backfillSave   = `UPDATE bench_items SET output = $1, writes = writes + 1 WHERE id = $2`
	// backfillPending is sluice's PendingSQL and, with the bodies, the plain
	// DBOS side's query for the next batch.
	backfillPending = `SELECT id FROM bench_items WHERE output IS NULL AND id > $1 ORDER BY id LIMIT $2`
	backfillLeft    = `SELECT COUNT(*) FROM (SELECT 1 FROM bench_items WHERE output IS NULL LIMIT 1) AS t`
	backfillID      = "bench"
	// backfillTokensPerItem is each item's share of a call's max_tokens:
	// the simulator answers between half of it and all of it.
	backfillTokensPerItem = 8
	// backfillSamples is how many times the stall check and GET /v1/flows
	// are timed.
	backfillSamples = 50
)

func init() {
	registerBench(&command{
		name:    "backfill",
		summary: "items/s, store bytes and peak memory of a backfill vs the same work as plain DBOS workflows",
		run:     runBenchBackfill,
	})
}

type backfillReport struct {
	Items        int          `json:"items"`
	Batch        int          `json:"batch"`
	Rounds       int          `json:"rounds"`
	DatabaseKind string       `json:"database"`
	Concurrency  int          `json:"concurrency"`
	Sluice       backfillSide `json:"sluice"`
	DBOS         backfillSide `json:"dbos"`
	// Ratio is sluice's items/s ÷ plain DBOS's.
	Ratio float64 `json:"ratio"`
	// StallCheck times the health evaluation the app's monitor runs, and
	// Flows GET /v1/flows over HTTP, once all items are in the store.
	StallCheck latency `json:"stall_check_ms"`
	Flows      latency `json:"flows_ms"`
}

// backfillSide is one side's figures over all its rounds.
type backfillSide struct {
	ItemsPerS   float64 `json:"items_per_s"`
	WallSeconds float64 `json:"wall_seconds"`
	// Processed counts the items that have an output after each round, and
	// Saves the outputs written: both items × rounds when every item was
	// saved exactly once.
	Processed int64 `json:"processed"`
	Saves     int64 `json:"saves"`
	// StoreBytesPerItem is what every table and index but the app's own
	// takes per item: the engine's and the store's records.
	StoreBytesPerItem float64 `json:"store_bytes_per_item"`
	// DatabaseBytesPerItem is how much the whole database (SQLite: file and
	// WAL) grew during the run per item, the outputs saved included.
	DatabaseBytesPerItem float64 `json:"database_bytes_per_item"`
	PeakRSSMB            float64 `json:"peak_rss_mb"`
	// PeakHeapMB is the most the Go heap's objects took at once (sampled
	// every 10 ms), the part of the RSS the side's own code decides.
	PeakHeapMB float64 `json:"peak_heap_mb"`
	// PeakLiveMB is the most a garbage collection found still live: the
	// collector lets the heap grow to about twice that before the next one.
	PeakLiveMB float64 `json:"peak_live_mb"`
}

// latency is the median and 95th percentile of a measured call, in ms.
type latency struct {
	P50     float64 `json:"p50"`
	P95     float64 `json:"p95"`
	Samples int     `json:"samples"`
}

// backfillJob is what a worker is asked to do.
type backfillJob struct {
	Side        string `json:"side"` // "sluice" or "dbos"
	DB          string `json:"db"`
	Provider    string `json:"provider"`
	Items       int    `json:"items"`
	Batch       int    `json:"batch"`
	Concurrency int    `json:"concurrency"` // the backfill's InFlight; the DBOS queue's worker concurrency
	Result      string `json:"result"`      // the file the worker writes its backfillResult to
	CPUProfile  string `json:"cpu_profile,omitempty"`
	MemProfile  string `json:"mem_profile,omitempty"`
	PeakProfile string `json:"peak_profile,omitempty"`
}

// backfillResult is what a worker measured.
type backfillResult struct {
	Seconds    float64         `json:"seconds"`
	PeakHeapMB float64         `json:"peak_heap_mb"`
	PeakLiveMB float64         `json:"peak_live_mb"`
	StallCheck []time.Duration `json:"stall_check_ns,omitempty"`
	Flows      []time.Duration `json:"flows_ns,omitempty"`
}

func runBenchBackfill(ctx context.Context, env *cmdEnv, args []string) error {
	if job := env.getenv(backfillWorkerEnv); job != "" {
		return backfillWorker(ctx, job)
	}
	fs := newFlagSet(env, "bench backfill", "[flags]",
		"Pushes --items items of an app table through a backfill (one LLM call per batch of --batch)\n"+
			"against the provider simulator with no limits and no latency, and does the same work as plain\n"+
			"DBOS workflows (the pending keys read from the table, one workflow per batch on a DBOS queue:\n"+
			"a step calls the provider, a transaction saves the outputs). Each side runs in a process of its\n"+
			"own on a fresh database, with the same queue polling; with several rounds the first side\n"+
			"alternates. Prints items/s, store bytes per item and peak memory of each side, their ratio,\n"+
			"and how long the stall check and GET /v1/flows take with every item in sluice's store.\n"+
			"See docs/benchmarks.md.")
	items := fs.Int("items", 10_000, "items in the app table")
	batch := fs.Int("batch", 20, "items per LLM call: the backfill's MaxBatch, and each DBOS workflow's batch")
	rounds := fs.Int("rounds", 1, "rounds; each runs both sides once")
	dbURL := fs.String("db", "", "postgres://… URL of a server to create each side's database on (dropped after); default: SQLite files in a temporary folder")
	concurrency := fs.Int("concurrency", 10, "batches in flight at once on each side: the backfill's InFlight, and the worker concurrency of the plain DBOS side's queue")
	cpuProfile := fs.String("cpuprofile", "", "write CPU profiles of each side's worker to FILE.sluice and FILE.dbos (the last round's)")
	memProfile := fs.String("memprofile", "", "write heap profiles of each side's worker, taken when its work is done, to FILE.sluice and FILE.dbos (the last round's)")
	peakProfile := fs.String("peakprofile", "", "write heap profiles of each side's worker, taken after the collection that found the most live, to FILE.sluice and FILE.dbos (the last round's)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := parseFlags(fs, env, args); err != nil {
		return err
	}
	switch {
	case *items < 1 || *items > 10_000_000:
		return errors.New("--items must be between 1 and 10000000")
	case *batch < 1 || *batch > 1000:
		return errors.New("--batch must be between 1 and 1000")
	case *rounds < 1 || *rounds > 100:
		return errors.New("--rounds must be between 1 and 100")
	case *concurrency < 1 || *concurrency > 100:
		return errors.New("--concurrency must be between 1 and 100")
	case *dbURL != "" && !isPostgresURL(*dbURL):
		return errors.New("--db must be a postgres:// URL")
	}
	dir, err := os.MkdirTemp("", "sluice-bench-backfill")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	// No limits and no latency: what is measured is each side's own cost.
	model, err := forecast.NewModel(forecast.ModelConfig{Wire: true, Seed: 1})
	if err != nil {
		return err
	}
	provider := sim.NewServer(model, sim.ServerConfig{})
	if err := provider.Start(ctx); err != nil {
		return err
	}
	defer provider.Stop(context.Background())

	b := &backfillBench{dir: dir, exe: exe, admin: *dbURL, tag: strconv.FormatInt(time.Now().UnixNano(), 36),
		job: backfillJob{Provider: "http://" + provider.Addr() + "/v1", Items: *items, Batch: *batch, Concurrency: *concurrency}}
	rep := backfillReport{Items: *items, Batch: *batch, Rounds: *rounds, DatabaseKind: "sqlite", Concurrency: *concurrency}
	if *dbURL != "" {
		rep.DatabaseKind = "postgres"
	}
	var stall, flows []time.Duration
	for r := range *rounds {
		sides := []string{"dbos", "sluice"}
		if r%2 == 1 {
			sides[0], sides[1] = sides[1], sides[0]
		}
		for _, side := range sides {
			var profile profiles
			if r == *rounds-1 {
				profile = profiles{cpu: suffixed(*cpuProfile, side), mem: suffixed(*memProfile, side), peak: suffixed(*peakProfile, side)}
			}
			m, err := b.round(ctx, side, r, profile)
			if err != nil {
				return fmt.Errorf("%s, round %d: %w", side, r+1, err)
			}
			s := &rep.DBOS
			if side == "sluice" {
				s = &rep.Sluice
				stall, flows = append(stall, m.res.StallCheck...), append(flows, m.res.Flows...)
			}
			s.add(m, *rounds)
		}
	}
	total := float64(*items * *rounds)
	for _, s := range []*backfillSide{&rep.Sluice, &rep.DBOS} {
		s.ItemsPerS = total / s.WallSeconds
	}
	rep.Ratio = rep.Sluice.ItemsPerS / rep.DBOS.ItemsPerS
	rep.StallCheck, rep.Flows = latencyOf(stall), latencyOf(flows)
	if *asJSON {
		return json.NewEncoder(env.stdout).Encode(rep)
	}
	printBackfillReport(env.stdout, rep)
	return nil
}

func printBackfillReport(w io.Writer, rep backfillReport) {
	fmt.Fprintf(w, "%d×%d items in batches of %d on %s, %d batches in flight on each side\n",
		rep.Rounds, rep.Items, rep.Batch, rep.DatabaseKind, rep.Concurrency)
	fmt.Fprintf(w, "%-10s %10s %9s %10s %11s %14s %12s %13s %13s\n", "side", "items/s", "wall s", "processed", "saves", "store B/item", "peak RSS MB", "peak heap MB", "peak live MB")
	for _, s := range []struct {
		name string
		backfillSide
	}{{"sluice", rep.Sluice}, {"plain DBOS", rep.DBOS}} {
		fmt.Fprintf(w, "%-10s %10.1f %9.1f %10d %11d %14.0f %12.1f %13.1f %13.1f\n",
			s.name, s.ItemsPerS, s.WallSeconds, s.Processed, s.Saves, s.StoreBytesPerItem, s.PeakRSSMB, s.PeakHeapMB, s.PeakLiveMB)
	}
	fmt.Fprintf(w, "ratio sluice/DBOS %.2f; stall check p50 %.2f ms, p95 %.2f ms; GET /v1/flows p50 %.2f ms, p95 %.2f ms\n",
		rep.Ratio, rep.StallCheck.P50, rep.StallCheck.P95, rep.Flows.P50, rep.Flows.P95)
}

// backfillMeasure is what one round of one side measured.
type backfillMeasure struct {
	res                       backfillResult
	rssMB                     float64
	processed, saves          int64
	storeBytes, databaseBytes int64
}

// add counts one round of rounds in s.
func (s *backfillSide) add(m backfillMeasure, rounds int) {
	items := float64(m.processed)
	s.WallSeconds += m.res.Seconds
	s.Processed += m.processed
	s.Saves += m.saves
	s.StoreBytesPerItem += float64(m.storeBytes) / items / float64(rounds)
	s.DatabaseBytesPerItem += float64(m.databaseBytes) / items / float64(rounds)
	s.PeakRSSMB = max(s.PeakRSSMB, m.rssMB)
	s.PeakHeapMB = max(s.PeakHeapMB, m.res.PeakHeapMB)
	s.PeakLiveMB = max(s.PeakLiveMB, m.res.PeakLiveMB)
}

func latencyOf(ds []time.Duration) latency {
	return latency{P50: percentile(ds, 0.50) / 1000, P95: percentile(ds, 0.95) / 1000, Samples: len(ds)}
}

type backfillBench struct {
	dir, exe string
	admin    string // the PostgreSQL server's URL; empty for SQLite
	tag      string // new in every invocation: names its databases
	job      backfillJob
}

// round runs one side once on a fresh database: seeds the app table, runs
// the worker, and checks and measures what it left.
func (b *backfillBench) round(ctx context.Context, side string, r int, profile profiles) (backfillMeasure, error) {
	var m backfillMeasure
	db, drop, err := b.freshDB(ctx, side+strconv.Itoa(r))
	if err != nil {
		return m, err
	}
	defer drop()
	seeded, err := seedBackfill(ctx, db, b.job.Items)
	if err != nil {
		return m, fmt.Errorf("seed %d items: %w", b.job.Items, err)
	}
	job := b.job
	job.Side, job.DB, job.CPUProfile, job.MemProfile, job.PeakProfile = side, db, profile.cpu, profile.mem, profile.peak
	job.Result = filepath.Join(b.dir, side+strconv.Itoa(r)+".json")
	if m.res, m.rssMB, err = b.worker(ctx, job); err != nil {
		return m, err
	}
	if err := measureBackfill(ctx, db, seeded, &m); err != nil {
		return m, err
	}
	if m.processed != int64(job.Items) || m.saves != m.processed {
		return m, fmt.Errorf("%d of %d items have an output, saved %d times: want each saved once", m.processed, job.Items, m.saves)
	}
	return m, nil
}

// freshDB returns a new database: an SQLite file, or a database created on
// the --db server; drop removes the latter.
func (b *backfillBench) freshDB(ctx context.Context, name string) (db string, drop func(), err error) {
	if b.admin == "" {
		return filepath.Join(b.dir, name+".db"), func() {}, nil
	}
	u, err := url.Parse(b.admin)
	if err != nil {
		return "", nil, fmt.Errorf("--db: %w", err)
	}
	dbName := "sluice_bench_backfill_" + b.tag + "_" + name
	admin := func(ctx context.Context, q string) error {
		c, err := pgx.Connect(ctx, b.admin)
		if err != nil {
			return err
		}
		defer c.Close(context.Background())
		_, err = c.Exec(ctx, q)
		return err
	}
	if err := admin(ctx, "CREATE DATABASE "+dbName); err != nil {
		return "", nil, fmt.Errorf("create database %s: %w", dbName, err)
	}
	u.Path = "/" + dbName
	// Dropped also when the bench is interrupted: not on its context.
	drop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = admin(ctx, "DROP DATABASE IF EXISTS "+dbName+" WITH (FORCE)")
	}
	return u.String(), drop, nil
}

// seedBackfill creates the app table with n items of small deterministic
// text, and returns the database's size then.
func seedBackfill(ctx context.Context, dbURL string, n int) (int64, error) {
	db, err := openBenchDB(ctx, dbURL)
	if err != nil {
		return 0, err
	}
	defer db.close()
	if err := db.exec(ctx, backfillCreate); err != nil {
		return 0, err
	}
	if err := db.exec(ctx, backfillIndex); err != nil {
		return 0, err
	}
	key := func(i int) string { return fmt.Sprintf("item-%08d", i) }
	body := func(i int) string { return sim.Words(16, uint64(i)) }
	if db.pg != nil {
		_, err = db.pg.CopyFrom(ctx, pgx.Identifier{"bench_items"}, []string{"id", "body"},
			pgx.CopyFromFunc(func() func() ([]any, error) {
				i := -1
				return func() ([]any, error) {
					if i++; i == n {
						return nil, nil
					}
					return []any{key(i), body(i)}, nil
				}
			}()))
		if err != nil {
			return 0, err
		}
		return databaseSize(ctx, db, dbURL)
	}
	tx, err := db.lite.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	ins, err := tx.PrepareContext(ctx, `INSERT INTO bench_items (id, body) VALUES ($1, $2)`)
	if err != nil {
		return 0, err
	}
	for i := range n {
		if _, err := ins.ExecContext(ctx, key(i), body(i)); err != nil {
			return 0, err
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	return databaseSize(ctx, db, dbURL)
}

// databaseSize is the size of the database: on SQLite its file and WAL.
func databaseSize(ctx context.Context, db *benchDB, dbURL string) (int64, error) {
	if db.pg != nil {
		var n int64
		err := db.each(ctx, `SELECT pg_database_size(current_database())`, nil, func(scan func(...any) error) error { return scan(&n) })
		return n, err
	}
	var n int64
	for _, f := range []string{dbURL, dbURL + "-wal"} {
		if fi, err := os.Stat(f); err == nil {
			n += fi.Size()
		}
	}
	return n, nil
}

// measureBackfill counts the outputs the worker saved, and measures the
// database's growth since seeded and what the tables other than the app's
// take: on PostgreSQL their relations' sizes (indexes and TOAST included),
// on SQLite the pages left in use once the app table is dropped.
func measureBackfill(ctx context.Context, dbURL string, seeded int64, m *backfillMeasure) error {
	db, err := openBenchDB(ctx, dbURL)
	if err != nil {
		return err
	}
	defer db.close()
	err = db.each(ctx, `SELECT COUNT(output), COALESCE(SUM(writes), 0) FROM bench_items`, nil,
		func(scan func(...any) error) error { return scan(&m.processed, &m.saves) })
	if err != nil {
		return fmt.Errorf("count the outputs: %w", err)
	}
	size, err := databaseSize(ctx, db, dbURL)
	if err != nil {
		return err
	}
	m.databaseBytes = size - seeded
	if db.pg != nil {
		return db.each(ctx, `SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c
			JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE c.relkind IN ('r', 'm') AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND c.relname <> 'bench_items'`,
			nil, func(scan func(...any) error) error { return scan(&m.storeBytes) })
	}
	if err := db.exec(ctx, `DROP TABLE bench_items`); err != nil {
		return err
	}
	return db.each(ctx, `SELECT (page_count - freelist_count) * page_size FROM pragma_page_count(), pragma_freelist_count(), pragma_page_size()`,
		nil, func(scan func(...any) error) error { return scan(&m.storeBytes) })
}

// worker runs job in a child process and returns what it measured and its
// peak resident memory.
func (b *backfillBench) worker(ctx context.Context, job backfillJob) (backfillResult, float64, error) {
	var res backfillResult
	raw, err := json.Marshal(job)
	if err != nil {
		return res, 0, err
	}
	cmd := exec.CommandContext(ctx, b.exe, "bench", "backfill") // #nosec G204 -- this binary
	cmd.Env = append(os.Environ(), backfillWorkerEnv+"="+string(raw))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return res, 0, fmt.Errorf("worker: %v\n%s", err, out.String())
	}
	f, err := os.ReadFile(job.Result)
	if err != nil {
		return res, 0, fmt.Errorf("worker's result: %w\n%s", err, out.String())
	}
	if err := json.Unmarshal(f, &res); err != nil {
		return res, 0, fmt.Errorf("worker's result: %w", err)
	}
	return res, peakRSSMB(cmd.ProcessState), nil
}

// backfillWorker is the child: it runs one side and writes what it
// measured to the job's result file.
func backfillWorker(ctx context.Context, raw string) error {
	var job backfillJob
	if err := json.Unmarshal([]byte(raw), &job); err != nil {
		return fmt.Errorf("%s: %w", backfillWorkerEnv, err)
	}
	var res backfillResult
	var err error
	if job.MemProfile != "" || job.PeakProfile != "" {
		runtime.MemProfileRate = 4 << 10 // finer than the default 512 KiB: the heap is small
	}
	peak := watchHeap(job.PeakProfile)
	switch job.Side {
	case "sluice":
		res, err = backfillSluice(ctx, job)
	case "dbos":
		res, err = backfillDBOS(ctx, job)
	default:
		err = fmt.Errorf("%s: unknown side %q", backfillWorkerEnv, job.Side)
	}
	if err != nil {
		return err
	}
	objects, live := peak()
	res.PeakHeapMB, res.PeakLiveMB = float64(objects)/(1<<20), float64(live)/(1<<20)
	out, err := json.Marshal(res)
	if err != nil {
		return err
	}
	return os.WriteFile(job.Result, out, 0o600)
}

// watchHeap samples the heap every 10 ms until the returned function is
// called, which returns the most its objects took at once and the most a
// collection found live. With a path, every time a collection finds more
// live than any before it writes a heap profile there, replacing the last:
// a heap profile's in-use figures are those of the latest collection, so
// the one left is what was live at the peak.
func watchHeap(path string) func() (objects, live uint64) {
	done := make(chan struct{})
	type peaks struct{ objects, live uint64 }
	last := make(chan peaks)
	go func() {
		sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/live:bytes"}}
		var most peaks
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(sample)
			most.objects = max(most.objects, sample[0].Value.Uint64())
			if l := sample[1].Value.Uint64(); l > most.live {
				most.live = l
				if path != "" {
					writeHeapProfile(path)
				}
			}
			select {
			case <-done:
				last <- most
				return
			case <-t.C:
			}
		}
	}()
	return func() (uint64, uint64) { close(done); p := <-last; return p.objects, p.live }
}

// writeHeapProfile writes the heap profile to path; a profile that cannot
// be written is left out, as the profiles of startProfile are.
func writeHeapProfile(path string) {
	f, err := os.Create(path)
	if err != nil {
		return
	}
	defer f.Close()
	_ = pprof.Lookup("heap").WriteTo(f, 0)
}

// profiles names the files a worker writes its profiles to; empty: none.
type profiles struct{ cpu, mem, peak string }

// suffixed is path.side, or empty when path is.
func suffixed(path, side string) string {
	if path == "" {
		return ""
	}
	return path + "." + side
}

// startProfile starts the job's CPU profile, if it asks for one, and returns
// what stops it and writes the heap profile it asks for.
func startProfile(job backfillJob) (func(), error) {
	stopCPU := func() {}
	if job.CPUProfile != "" {
		f, err := os.Create(job.CPUProfile)
		if err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, err
		}
		stopCPU = func() { pprof.StopCPUProfile(); f.Close() }
	}
	return func() {
		stopCPU()
		if job.MemProfile != "" {
			writeHeapProfile(job.MemProfile)
		}
	}, nil
}

// backfillRequest is the one call for a batch: every item's text, one per
// line, and max_tokens for a short answer per item.
func backfillRequest(bodies []string) *llm.ChatRequest {
	var b strings.Builder
	for i, body := range bodies {
		fmt.Fprintf(&b, "%d. %s\n", i+1, body)
	}
	return &llm.ChatRequest{Model: "sim-model", MaxTokens: backfillTokensPerItem * len(bodies), Messages: []llm.Message{
		{Role: "system", Content: "Translate each numbered line into English; answer one line per item."},
		{Role: "user", Content: b.String()}}}
}

// splitReply gives each of n items its share of the reply's words.
func splitReply(resp *llm.ChatResponse, n int) ([]string, error) {
	if len(resp.Choices) == 0 {
		return nil, errors.New("the reply has no choices")
	}
	words := strings.Fields(resp.Choices[0].Message.Content)
	if len(words) < n {
		return nil, fmt.Errorf("the reply has %d words for %d items", len(words), n)
	}
	out := make([]string, n)
	for i := range out {
		out[i] = strings.Join(words[i*len(words)/n:(i+1)*len(words)/n], " ")
	}
	return out, nil
}

// waitBackfilled polls the app table every benchPoll until no item lacks an
// output; every second it asks failed whether the side has failed.
func waitBackfilled(ctx context.Context, db *benchDB, failed func(context.Context) error) error {
	t := time.NewTicker(benchPoll)
	defer t.Stop()
	for i := 1; ; i++ {
		var left int64
		if err := db.each(ctx, backfillLeft, nil, func(scan func(...any) error) error { return scan(&left) }); err != nil {
			return fmt.Errorf("count the items left: %w", err)
		}
		if left == 0 {
			return nil
		}
		if i%int(time.Second/benchPoll) == 0 {
			if err := failed(ctx); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// backfillSluice runs the backfill through the sluice SDK: PendingSQL lists
// the items without an output, Load reads their text with the app's own
// handle, and Save writes each output in the transaction that records it.
func backfillSluice(ctx context.Context, job backfillJob) (backfillResult, error) {
	var res backfillResult
	src, err := openBenchPool(ctx, job.DB, 4)
	if err != nil {
		return res, err
	}
	defer src.close()
	app, err := sluice.New(ctx, sluice.Config{
		DatabaseURL: job.DB, PollInterval: benchPoll, HealthEvery: time.Second, Logger: quietLogger(), AppVersion: "bench",
		Providers: []sluice.Provider{{Name: "sim", LLM: llm.Config{BaseURL: job.Provider}}},
	})
	if err != nil {
		return res, err
	}
	defer app.Stop(context.Background())
	err = sluice.RegisterBackfill(app, sluice.Backfill[string]{
		Backfill: run.Backfill{ID: backfillID, MaxBatch: job.Batch, InFlight: job.Concurrency, PendingSQL: backfillPending},
		Load: func(ctx context.Context, keys []string) (map[string]string, error) {
			return loadBodies(ctx, src, keys)
		},
		Request: func(items []sluice.Item[string]) (*llm.ChatRequest, error) {
			bodies := make([]string, len(items))
			for i, it := range items {
				bodies[i] = it.Data
			}
			return backfillRequest(bodies), nil
		},
		Parse: func(resp *llm.ChatResponse, items []sluice.Item[string]) ([]string, error) {
			return splitReply(resp, len(items))
		},
		Save: func(ctx context.Context, tx sluice.Tx, it sluice.Item[string], output string) error {
			_, err := tx.Exec(ctx, backfillSave, output, it.Key)
			return err
		},
	})
	if err != nil {
		return res, err
	}
	// The store as the app's monitor reads it: for the stall check, and to
	// stop at a backfill that keeps failing.
	st, err := store.Open(ctx, job.DB)
	if err != nil {
		return res, err
	}
	defer st.Close()
	stop, err := startProfile(job)
	if err != nil {
		return res, err
	}
	start := time.Now()
	if err := app.Start(ctx); err != nil {
		stop()
		return res, err
	}
	err = waitBackfilled(ctx, src, func(ctx context.Context) error {
		j, err := st.Job(ctx, backfillID)
		if err == nil && j.ConsecutiveFailures >= 3 {
			return fmt.Errorf("the backfill failed %d runs in a row: %s", j.ConsecutiveFailures, j.LastError)
		}
		return nil
	})
	res.Seconds = time.Since(start).Seconds()
	stop()
	if err != nil {
		return res, err
	}
	if res.StallCheck, err = timeStallCheck(ctx, st); err != nil {
		return res, err
	}
	res.Flows, err = timeFlows(ctx, app, int64(job.Items))
	return res, err
}

// loadBodies reads the text of the items keys names.
func loadBodies(ctx context.Context, db *benchDB, keys []string) (map[string]string, error) {
	marks := make([]string, len(keys))
	args := make([]any, len(keys))
	for i, k := range keys {
		marks[i], args[i] = "$"+strconv.Itoa(i+1), k
	}
	out := make(map[string]string, len(keys))
	err := db.each(ctx, `SELECT id, body FROM bench_items WHERE id IN (`+strings.Join(marks, ", ")+`)`, args,
		func(scan func(...any) error) error {
			var k, body string
			if err := scan(&k, &body); err != nil {
				return err
			}
			out[k] = body
			return nil
		})
	return out, err
}

// timeStallCheck times the health evaluation the app's monitor runs every
// HealthEvery: read every job's record from the store and judge it.
func timeStallCheck(ctx context.Context, st store.Store) ([]time.Duration, error) {
	m, err := health.New(health.Config{Source: st, Thresholds: map[string]time.Duration{backfillID: health.DefaultThreshold}, Logger: quietLogger()})
	if err != nil {
		return nil, err
	}
	out := make([]time.Duration, backfillSamples)
	for i := range out {
		t := time.Now()
		if err := m.Poll(ctx); err != nil {
			return nil, err
		}
		out[i] = time.Since(t)
	}
	if v := m.Views(); len(v) != 1 || v[0].State != health.Done {
		return nil, fmt.Errorf("the stall check judged %+v, want the backfill done", v)
	}
	return out, nil
}

// timeFlows serves the app's HTTP API on loopback, waits until GET
// /v1/flows says the backfill is done with every item, then times it.
func timeFlows(ctx context.Context, app *sluice.App, items int64) ([]time.Duration, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: app.Handler(sluice.HandlerConfig{}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	u := "http://" + ln.Addr().String() + "/v1/flows"
	get := func() (health.Flow, error) {
		resp, err := http.Get(u) // #nosec G107 -- the app's own API on loopback
		if err != nil {
			return health.Flow{}, err
		}
		defer resp.Body.Close()
		var body struct{ Flows []health.Flow }
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			return health.Flow{}, fmt.Errorf("GET /v1/flows: %w", err)
		}
		if len(body.Flows) != 1 {
			return health.Flow{}, fmt.Errorf("GET /v1/flows: %d flows, want the backfill's", len(body.Flows))
		}
		return body.Flows[0], nil
	}
	// The monitor judges every second (HealthEvery).
	for deadline := time.Now().Add(30 * time.Second); ; {
		f, err := get()
		if err != nil {
			return nil, err
		}
		if f.State == health.Done && f.Done == items {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("GET /v1/flows still says %+v, want done with %d items", f, items)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	out := make([]time.Duration, backfillSamples)
	for i := range out {
		t := time.Now()
		if _, err := get(); err != nil {
			return nil, err
		}
		out[i] = time.Since(t)
	}
	return out, nil
}

// backfillBatch is one plain DBOS workflow's input: its items' keys and
// text.
type backfillBatch struct {
	Keys   []string `json:"keys"`
	Bodies []string `json:"bodies"`
}

// backfillDBOS does the same work the way a DBOS user would without
// sluice: one workflow per batch on a queue, a step that calls the provider
// with the same client and no governor, and a transaction that saves the
// outputs. The queue's worker concurrency is job.Concurrency: a backfill
// that calls an external API is given a bound, as DBOS's own examples of
// queues for API calls do. Its database handle is DBOS's system database,
// the transactions' data source and the app's own, as sluice's is.
func backfillDBOS(ctx context.Context, job backfillJob) (backfillResult, error) {
	var res backfillResult
	client, err := llm.NewClient(llm.Config{BaseURL: job.Provider})
	if err != nil {
		return res, err
	}
	// The pool DBOS would open itself: 20 connections on PostgreSQL; on
	// SQLite, the pragmas, lock mode and connections of DBOS's own.
	src, err := openBenchPool(ctx, dbosSQLite(job.DB), 20)
	if err != nil {
		return res, err
	}
	defer src.close()
	if src.lite != nil {
		src.lite.SetMaxOpenConns(8)
		src.lite.SetMaxIdleConns(4)
	}
	dctx, ds, err := newDBOSOn(ctx, dbos.Config{AppName: "bench-dbos-backfill", Logger: quietLogger(), ApplicationVersion: "bench"}, src)
	if err != nil {
		return res, err
	}
	defer dbos.Shutdown(dctx, 10*time.Second)
	var failure atomic.Pointer[error]
	workflow := func(ctx dbos.Context, b backfillBatch) (int, error) {
		n, err := backfillWorkflow(ctx, client, ds, b)
		if err != nil {
			failure.CompareAndSwap(nil, &err)
		}
		return n, err
	}
	dbos.RegisterWorkflow(dctx, workflow, dbos.WithWorkflowName("bench-backfill"))
	q, err := dbos.RegisterQueue(dctx, "bench-backfill", dbos.WithQueueBasePollingInterval(benchPoll), dbos.WithWorkerConcurrency(job.Concurrency))
	if err != nil {
		return res, err
	}
	if err := dbos.Launch(dctx); err != nil {
		return res, err
	}
	stop, err := startProfile(job)
	if err != nil {
		return res, err
	}
	start := time.Now()
	go func() {
		if err := enqueueBatches(dctx, src, q, workflow, job.Batch); err != nil {
			err = fmt.Errorf("enqueue: %w", err)
			failure.CompareAndSwap(nil, &err)
		}
	}()
	err = waitBackfilled(ctx, src, func(context.Context) error {
		if e := failure.Load(); e != nil {
			return *e
		}
		return nil
	})
	res.Seconds = time.Since(start).Seconds()
	stop()
	return res, err
}

// dbosSQLite is an SQLite path with the pragmas and lock mode DBOS applies
// to the handles it opens itself; a PostgreSQL URL is left as it is.
func dbosSQLite(db string) string {
	if isPostgresURL(db) {
		return db
	}
	return db + "?_txlock=immediate&_pragma=busy_timeout(5000)&_pragma=foreign_keys(ON)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)"
}

// newDBOSOn starts DBOS on src as its system database, and returns the data
// source its transactions run on: the same handle, so that a transaction
// and its step's record commit as one.
func newDBOSOn(ctx context.Context, cfg dbos.Config, src *benchDB) (dbos.Context, *dbos.DataSource, error) {
	cfg.SystemDBPool, cfg.SQLiteSystemDB = src.pool, src.lite
	dctx, err := dbos.NewContext(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	var ds *dbos.DataSource
	if src.pool != nil {
		ds, err = dbos.NewDataSource(dctx, src.pool)
	} else {
		ds, err = dbos.NewDataSource(dctx, src.lite)
	}
	if err != nil {
		_ = dbos.Shutdown(dctx, time.Second)
		return nil, nil, err
	}
	return dctx, ds, nil
}

// backfillWorkflow calls the provider about one batch in a step and saves
// the outputs in a transaction.
func backfillWorkflow(ctx dbos.Context, client *llm.Client, ds *dbos.DataSource, b backfillBatch) (int, error) {
	outputs, err := dbos.RunAsStep(ctx, func(ctx context.Context) ([]string, error) {
		resp, err := client.Chat(ctx, backfillRequest(b.Bodies))
		if err != nil {
			return nil, err
		}
		return splitReply(resp, len(b.Keys))
	}, dbos.WithStepName("call"), dbos.WithStepMaxRetries(5))
	if err != nil {
		return 0, err
	}
	return dbos.RunAsTransaction(ctx, ds, func(ctx context.Context, tx dbos.Tx) (int, error) {
		for i, k := range b.Keys {
			if _, err := tx.Exec(ctx, backfillSave, outputs[i], k); err != nil {
				return 0, err
			}
		}
		return len(b.Keys), nil
	}, dbos.WithStepName("save"))
}

// enqueueBatches reads the pending items a batch at a time, in key order,
// and enqueues a workflow for each batch, named by its first key.
func enqueueBatches(ctx dbos.Context, db *benchDB, q dbos.Queue, wf dbos.Workflow[backfillBatch, int], batch int) error {
	after := ""
	for {
		var b backfillBatch
		err := db.each(ctx, `SELECT id, body FROM bench_items WHERE output IS NULL AND id > $1 ORDER BY id LIMIT $2`, []any{after, batch},
			func(scan func(...any) error) error {
				var k, body string
				if err := scan(&k, &body); err != nil {
					return err
				}
				b.Keys, b.Bodies = append(b.Keys, k), append(b.Bodies, body)
				return nil
			})
		if err != nil || len(b.Keys) == 0 {
			return err
		}
		if _, err := dbos.RunWorkflow(ctx, wf, b, dbos.WithQueue(q), dbos.WithWorkflowID("backfill-"+b.Keys[0])); err != nil {
			return err
		}
		after = b.Keys[len(b.Keys)-1]
	}
}
