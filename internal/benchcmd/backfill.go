package benchcmd

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/sim"
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

func newBackfillCommand(Config) *cli.Command {
	return &cli.Command{
		Name:    "backfill",
		Summary: "items/s, store bytes and peak memory of a backfill vs the same work as plain DBOS workflows",
		Run:     runBenchBackfill,
	}
}

type backfillReport struct {
	Items        int          `json:"items"`
	Batch        int          `json:"batch"`
	Rounds       int          `json:"rounds"`
	DatabaseKind string       `json:"database"`
	Concurrency  int          `json:"concurrency"`
	Sluice       backfillSide `json:"sluice"`
	DBOS         backfillSide `json:"dbos"`
	// Ratio is sluice's items/s ÷ plain DBOS's, over all the rounds.
	Ratio float64 `json:"ratio"`
	// Ratios are each round's: plain DBOS's time over sluice's, for the
	// same items, the two sides minutes apart on the same machine; and
	// RatioMedian is their median.
	Ratios      []float64 `json:"ratios"`
	RatioMedian float64   `json:"ratio_median"`
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
	// StoreTables is StoreBytesPerItem by table, its indexes included.
	StoreTables map[string]float64 `json:"store_bytes_per_item_by_table"`
	// VacuumedBytesPerItem is, on PostgreSQL, StoreBytesPerItem after
	// VACUUM FULL: the live rows only, without the versions that updates
	// leave behind until VACUUM.
	VacuumedBytesPerItem float64 `json:"store_bytes_per_item_vacuumed,omitempty"`
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

func runBenchBackfill(ctx context.Context, env *cli.Env, args []string) error {
	if job := env.Getenv(backfillWorkerEnv); job != "" {
		return backfillWorker(ctx, job)
	}
	fs := cli.NewFlagSet(env, "bench backfill", "[flags]",
		"Pushes --items items of an app table through a backfill (one LLM call per batch of --batch)\n"+
			"against the provider simulator with no limits and no latency, and does the same work as plain\n"+
			"DBOS workflows (the pending keys read from the table, one workflow per batch on a DBOS queue:\n"+
			"a step calls the provider, a transaction saves the outputs). Each side runs in a process of its\n"+
			"own on a fresh database, with the same queue polling; with several rounds the first side\n"+
			"alternates. Prints items/s, store bytes per item and peak memory of each side, their ratio\n"+
			"(over all rounds, and each round's with their median), and how long the stall check and\n"+
			"GET /v1/flows take with every item in sluice's store.\n"+
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
	if err := cli.ParseFlags(fs, env, args); err != nil {
		return err
	}
	err := cmp.Or(
		between("items", *items, 1, 10_000_000),
		between("batch", *batch, 1, 1000),
		between("rounds", *rounds, 1, 100),
		between("concurrency", *concurrency, 1, 100),
		refuseIf(*dbURL != "" && !cli.IsPostgresURL(*dbURL), "--db must be a postgres:// URL"),
	)
	if err != nil {
		return err
	}
	dir, remove, err := tempDir("sluice-bench-backfill")
	if err != nil {
		return err
	}
	defer remove()
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	// No limits and no latency: what is measured is each side's own cost.
	_, provider, err := startSim(ctx, forecast.ModelConfig{Wire: true, Seed: 1}, sim.ServerConfig{})
	if err != nil {
		return err
	}
	defer provider.Stop(context.Background())

	b := &backfillBench{dir: dir, exe: exe, admin: *dbURL, tag: strconv.FormatInt(time.Now().UnixNano(), 36),
		job: backfillJob{Provider: simURL(provider), Items: *items, Batch: *batch, Concurrency: *concurrency}}
	rep := backfillReport{Items: *items, Batch: *batch, Rounds: *rounds, DatabaseKind: "sqlite", Concurrency: *concurrency}
	if *dbURL != "" {
		rep.DatabaseKind = "postgres"
	}
	var stall, flows []time.Duration
	for r := range *rounds {
		took := map[string]float64{} // the round's seconds, by side
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
			took[side] = m.res.Seconds
			s := &rep.DBOS
			if side == "sluice" {
				s = &rep.Sluice
				stall, flows = append(stall, m.res.StallCheck...), append(flows, m.res.Flows...)
			}
			s.add(m, *rounds)
		}
		rep.Ratios = append(rep.Ratios, round4(took["dbos"]/took["sluice"]))
	}
	rep.RatioMedian = median(rep.Ratios)
	total := float64(*items * *rounds)
	for _, s := range []*backfillSide{&rep.Sluice, &rep.DBOS} {
		s.ItemsPerS = total / s.WallSeconds
	}
	rep.Ratio = rep.Sluice.ItemsPerS / rep.DBOS.ItemsPerS
	rep.StallCheck, rep.Flows = latencyOf(stall), latencyOf(flows)
	return printReport(env.Stdout, *asJSON, "", rep, func(w io.Writer) { printBackfillReport(w, rep) })
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
	if rep.Sluice.VacuumedBytesPerItem > 0 {
		fmt.Fprintf(w, "store B/item after VACUUM FULL: sluice %.0f, plain DBOS %.0f\n", rep.Sluice.VacuumedBytesPerItem, rep.DBOS.VacuumedBytesPerItem)
	}
	fmt.Fprintf(w, "ratio of each round: %v, median %.2f\n", rep.Ratios, rep.RatioMedian)
	fmt.Fprintf(w, "ratio sluice/DBOS %.2f; stall check p50 %.2f ms, p95 %.2f ms; GET /v1/flows p50 %.2f ms, p95 %.2f ms\n",
		rep.Ratio, rep.StallCheck.P50, rep.StallCheck.P95, rep.Flows.P50, rep.Flows.P95)
}

// itemsBackfill is the backfill of the app table's items that the backfill
// and dashboard benches run, with b's settings: each batch's text read with
// src, one call for the batch, each output saved in the transaction that
// records it. reject, if set, may refuse an item's output (sluice.Reject).
func itemsBackfill(b run.Backfill, src *benchDB, reject func(key string) error) sluice.Backfill[string] {
	return sluice.Backfill[string]{
		Backfill: b,
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
			if reject != nil {
				if err := reject(it.Key); err != nil {
					return err
				}
			}
			_, err := tx.Exec(ctx, backfillSave, output, it.Key)
			return err
		},
	}
}

// backfillMeasure is what one round of one side measured.
type backfillMeasure struct {
	res                       backfillResult
	rssMB                     float64
	processed, saves          int64
	storeBytes, databaseBytes int64
	tables                    map[string]int64
	vacuumedBytes             int64 // PostgreSQL: storeBytes after VACUUM FULL
}

// add counts one round of rounds in s.
func (s *backfillSide) add(m backfillMeasure, rounds int) {
	items := float64(m.processed)
	s.WallSeconds += m.res.Seconds
	s.Processed += m.processed
	s.Saves += m.saves
	s.StoreBytesPerItem += float64(m.storeBytes) / items / float64(rounds)
	s.DatabaseBytesPerItem += float64(m.databaseBytes) / items / float64(rounds)
	s.VacuumedBytesPerItem += float64(m.vacuumedBytes) / items / float64(rounds)
	if s.StoreTables == nil {
		s.StoreTables = make(map[string]float64, len(m.tables))
	}
	for t, n := range m.tables {
		s.StoreTables[t] += float64(n) / items / float64(rounds)
	}
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
	db, drop, err := freshDB(ctx, b.dir, b.admin, b.tag, side+strconv.Itoa(r))
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
	// sizes adds each row's bytes (table name, bytes) to tables and total.
	sizes := func(tables map[string]int64, total *int64) func(scan func(...any) error) error {
		return func(scan func(...any) error) error {
			var name string
			var n int64
			if err := scan(&name, &n); err != nil {
				return err
			}
			tables[name] += n
			*total += n
			return nil
		}
	}
	m.tables = map[string]int64{}
	table := sizes(m.tables, &m.storeBytes)
	if db.pg != nil {
		const relations = `SELECT c.relname::text, pg_total_relation_size(c.oid)::bigint FROM pg_class c
			JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE c.relkind IN ('r', 'm') AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND c.relname <> 'bench_items'`
		if err := db.each(ctx, relations, nil, table); err != nil {
			return err
		}
		// The same once VACUUM FULL has rewritten every table with its
		// live rows only: what the records take without the row
		// versions updates leave behind until VACUUM (autovacuum may be
		// off on a bench server, as it is on a test one).
		if err := db.exec(ctx, `VACUUM FULL`); err != nil {
			return fmt.Errorf("vacuum: %w", err)
		}
		return db.each(ctx, relations, nil, sizes(map[string]int64{}, &m.vacuumedBytes))
	}
	if err := db.exec(ctx, `DROP TABLE bench_items`); err != nil {
		return err
	}
	// Every b-tree's pages by the table it belongs to (an index's by its
	// table's), and the schema's own page as "sqlite_schema".
	return db.each(ctx, `SELECT COALESCE(m.tbl_name, d.name), SUM(d.pgsize) FROM dbstat d
			LEFT JOIN sqlite_schema m ON m.name = d.name GROUP BY 1`, nil, table)
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
