package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-dev/sluice/examples/summarize"
	"github.com/sluice-dev/sluice/internal/sim"
)

// The worker is this same binary, started with these variables set; the
// simulator stays in the parent so its counts survive the kills.
const (
	crashWorkerEnv   = "SLUICE_BENCH_CRASH_WORKER"
	crashDBEnv       = "SLUICE_BENCH_CRASH_DB"
	crashProviderEnv = "SLUICE_BENCH_CRASH_PROVIDER"
	crashEventsEnv   = "SLUICE_BENCH_CRASH_EVENTS"
)

func init() {
	registerBench(&command{
		name:    "crash",
		summary: "SIGKILL a worker running the summarize pipeline N times; count lost runs, duplicate saves, re-billed calls",
		run:     runBenchCrash,
	})
}

type crashReport struct {
	Kills          int `json:"kills"`
	Runs           int `json:"runs"`
	Completed      int `json:"completed"`
	Lost           int `json:"lost"`
	DuplicateSaves int `json:"duplicate_saves"`
	LLMCalls       int `json:"llm_calls"`
	RebilledCalls  int `json:"rebilled_calls"`
}

func runBenchCrash(ctx context.Context, env *cmdEnv, args []string) error {
	if env.getenv(crashWorkerEnv) != "" {
		return crashWorker(ctx, env)
	}
	fs := newFlagSet(env, "bench crash", "[flags]",
		"Runs examples/summarize on many events against the provider simulator in a worker process,\n"+
			"SIGKILLs the worker N times at random points and restarts it, then lets it finish. Counts\n"+
			"come from the simulator and the save target: lost runs and duplicate saves should be 0,\n"+
			"re-billed LLM calls (calls whose result a kill discarded) at most one per kill.")
	kills := fs.Int("kills", 10, "how many times to SIGKILL the worker")
	events := fs.Int("events", 40, "documents to summarize (one run each)")
	dbURL := fs.String("db", "", "database: postgres://… URL, or an SQLite path (default: a new SQLite file in a temporary folder)")
	latency := fs.Duration("latency", 20*time.Millisecond, "mean response time of the simulated provider")
	seed := fs.Uint64("seed", 1, "seed of the kill times")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := parseFlags(fs, env, args); err != nil {
		return err
	}
	if *kills < 0 || *events < 1 {
		return errors.New("--kills must be ≥ 0 and --events ≥ 1")
	}
	db := *dbURL
	if db == "" {
		dir, err := os.MkdirTemp("", "sluice-crash")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		db = filepath.Join(dir, "sluice.db")
	}
	model, err := sim.NewModel(sim.Config{Profile: "groq", Latency: *latency, Seed: int64(*seed), Wire: true})
	if err != nil {
		return err
	}
	provider := sim.NewServer(model, sim.ServerConfig{})
	if err := provider.Start(ctx); err != nil {
		return err
	}
	defer provider.Stop(context.Background())

	exe, err := os.Executable()
	if err != nil {
		return err
	}
	workerEnv := append(os.Environ(),
		crashWorkerEnv+"=1",
		crashDBEnv+"="+db,
		crashProviderEnv+"=http://"+provider.Addr()+"/v1",
		crashEventsEnv+"="+strconv.Itoa(*events))
	rng := rand.New(rand.NewPCG(*seed, 7)) // #nosec G404 -- kill times need no secrecy
	rep := crashReport{}
	for rep.Kills < *kills {
		cmd := exec.CommandContext(ctx, exe, "bench", "crash")
		cmd.Env = workerEnv
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start worker: %w", err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		// A random point of the worker's life: past its start-up, within the work.
		delay := 300*time.Millisecond + time.Duration(rng.Int64N(int64(900*time.Millisecond)))
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("worker failed before kill %d: %v\n%s", rep.Kills+1, err, out.String())
			}
			// It finished every run before the kill: nothing left to interrupt.
			*kills = rep.Kills
		case <-time.After(delay):
			_ = cmd.Process.Kill() // SIGKILL: no shutdown, no flush
			<-done
			rep.Kills++
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			<-done
			return ctx.Err()
		}
	}
	// The last worker finishes every run and reports what the database holds.
	cmd := exec.CommandContext(ctx, exe, "bench", "crash")
	cmd.Env = workerEnv
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("final worker: %v\n%s", err, stderr.String())
	}
	var w crashReport
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &w); err != nil {
		return fmt.Errorf("final worker report %q: %w", out, err)
	}
	st := model.Stats()
	rep.Runs, rep.Completed, rep.DuplicateSaves = w.Runs, w.Completed, w.DuplicateSaves
	rep.Lost = *events - w.Completed
	rep.LLMCalls = int(st.Succeeded)
	rep.RebilledCalls = rep.LLMCalls - 2*w.Completed // each run needs exactly two calls
	if *asJSON {
		return json.NewEncoder(env.stdout).Encode(rep)
	}
	fmt.Fprintf(env.stdout, "kills %d  runs %d  completed %d  lost %d  duplicate saves %d  LLM calls %d  re-billed %d\n",
		rep.Kills, rep.Runs, rep.Completed, rep.Lost, rep.DuplicateSaves, rep.LLMCalls, rep.RebilledCalls)
	return nil
}

// crashWorker is the child: it sends every event (sending again is a no-op:
// the event IDs and idempotency keys deduplicate), waits for every run, and
// prints what the database holds.
func crashWorker(ctx context.Context, env *cmdEnv) error {
	n, err := strconv.Atoi(env.getenv(crashEventsEnv))
	if err != nil {
		return fmt.Errorf("%s: %w", crashEventsEnv, err)
	}
	db := env.getenv(crashDBEnv)
	app, err := newSummarizeApp(ctx, env, summarizeOptions{
		db: db, providerURL: env.getenv(crashProviderEnv), profile: "groq", limits: "",
		// One run at a time: a kill can then discard at most one call in flight.
		concurrency: 1, retryBase: 50 * time.Millisecond,
	})
	if err != nil {
		return err
	}
	defer app.Stop(context.Background())
	if err := app.Start(ctx); err != nil {
		return err
	}
	ids := make([]string, 0, n)
	for i := range n {
		doc := fmt.Sprintf("doc-%04d", i)
		sent, err := app.Send(ctx, summarize.Event, "upload-"+doc, summarize.Doc{DocumentID: doc})
		if err != nil {
			return err
		}
		ids = append(ids, sent[0].RunID)
	}
	rep := crashReport{Runs: n}
	for _, id := range ids {
		st, err := app.Wait(ctx, id)
		if err != nil {
			return err
		}
		if st.Status == "completed" {
			rep.Completed++
		}
	}
	dup, err := duplicateSaves(ctx, db)
	if err != nil {
		return err
	}
	rep.DuplicateSaves = dup
	w := bufio.NewWriter(env.stdout)
	defer w.Flush()
	return json.NewEncoder(w).Encode(rep)
}

// duplicateSaves counts saves beyond the first of each document: rows of a
// document under more than one key, and repeated writes of one key.
func duplicateSaves(ctx context.Context, dbURL string) (int, error) {
	const q = `SELECT COALESCE(SUM(writes), 0) - COUNT(DISTINCT document_id) FROM sluice_summaries`
	var n int64
	if strings.HasPrefix(dbURL, "postgres://") || strings.HasPrefix(dbURL, "postgresql://") {
		conn, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			return 0, err
		}
		defer conn.Close(ctx)
		err = conn.QueryRow(ctx, q).Scan(&n)
		return int(n), err
	}
	h, err := sql.Open("sqlite", strings.TrimPrefix(dbURL, "sqlite:"))
	if err != nil {
		return 0, err
	}
	defer h.Close()
	err = h.QueryRowContext(ctx, q).Scan(&n)
	return int(n), err
}
