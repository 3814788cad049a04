package benchcmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/internal/store/sqlite"
	"github.com/sluice-dev/sluice/run"
)

func newEngineCommand(Config) *cli.Command {
	return &cli.Command{
		Name:    "engine",
		Summary: "throughput of a 3-step run through the sluice SDK vs bare DBOS, side by side",
		Run:     runBenchEngine,
	}
}

type engineReport struct {
	Runs         int     `json:"runs"`
	Rounds       int     `json:"rounds"`
	SluiceRunsPS float64 `json:"sluice_runs_per_s"`
	DBOSRunsPS   float64 `json:"dbos_runs_per_s"`
	Ratio        float64 `json:"ratio"`
	// Ratios are each round's: bare DBOS's time over sluice's, for the
	// same runs; RatioMedian is their median.
	Ratios       []float64 `json:"ratios"`
	RatioMedian  float64   `json:"ratio_median"`
	DatabaseKind string    `json:"database"`
	// On SQLite, a third side: bare DBOS on the handle sluice opens
	// (sqlite.OpenDB, whose connections keep the statements they
	// compiled) instead of its own. It is the ceiling of what sluice's
	// engine can do on that handle, so SameHandleRatios (sluice's
	// throughput over it, each round) measure what sluice itself adds.
	SameHandleRunsPS      float64   `json:"dbos_same_handle_runs_per_s,omitempty"`
	SameHandleRatios      []float64 `json:"same_handle_ratios,omitempty"`
	SameHandleRatioMedian float64   `json:"same_handle_ratio_median,omitempty"`
}

func runBenchEngine(ctx context.Context, env *cli.Env, args []string) error {
	fs := cli.NewFlagSet(env, "bench engine", "[flags]",
		"Runs the same 3-step run N times through the sluice SDK (event → queued run → three steps)\n"+
			"and through bare DBOS (enqueue → workflow → three RunAsStep), each on a fresh database,\n"+
			"with the same queue polling, and prints both throughputs and their ratio. On SQLite a\n"+
			"third side runs bare DBOS on the handle sluice opens (whose connections keep the\n"+
			"statements they compiled) instead of DBOS's own: the ceiling for sluice on that handle.\n"+
			"The sides take turns over several rounds (the first side rotates) so that none profits alone\n"+
			"from a quiet moment of the machine; each throughput is all its runs over all its time, and\n"+
			"each round's ratio (sluice's throughput over bare DBOS's) is printed with their median.")
	runs := fs.Int("runs", 200, "runs per side and round")
	rounds := fs.Int("rounds", 3, "rounds; each runs both sides once")
	dbURL := fs.String("db", "", "postgres://… URL to run on (default: SQLite files in a temporary folder)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the measured rounds to this file (read it with go tool pprof)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := cli.ParseFlags(fs, env, args); err != nil {
		return err
	}
	if *runs < 1 || *rounds < 1 {
		return errors.New("--runs and --rounds must be at least 1")
	}
	dir, remove, err := tempDir("sluice-bench-engine")
	if err != nil {
		return err
	}
	defer remove()
	// Run IDs are new in every invocation: on a PostgreSQL database kept
	// between invocations, an ID seen before would start nothing.
	tag := strconv.FormatInt(time.Now().UnixNano(), 36)
	dbFor := func(name string) string {
		if *dbURL != "" {
			return *dbURL
		}
		return filepath.Join(dir, name+".db")
	}
	rep := engineReport{Runs: *runs, Rounds: *rounds, DatabaseKind: "sqlite"}
	if *dbURL != "" {
		rep.DatabaseKind = "postgres"
	}
	stopProfile, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	var sluiceTime, dbosTime, sameTime time.Duration
	for r := range *rounds {
		prefix := tag + "-" + strconv.Itoa(r) + "-"
		var dbosRound, sluiceRound, sameRound time.Duration
		sides := []func() error{
			func() error {
				d, err := benchBareDBOS(ctx, dbFor("dbos"+strconv.Itoa(r)), prefix, *runs, false)
				dbosTime += d
				dbosRound = d
				if err != nil {
					return fmt.Errorf("bare DBOS: %w", err)
				}
				return nil
			},
			func() error {
				d, err := benchSluice(ctx, dbFor("sluice"+strconv.Itoa(r)), prefix, *runs)
				sluiceTime += d
				sluiceRound = d
				if err != nil {
					return fmt.Errorf("sluice: %w", err)
				}
				return nil
			},
		}
		if *dbURL == "" {
			sides = append(sides, func() error {
				d, err := benchBareDBOS(ctx, dbFor("same"+strconv.Itoa(r)), "same-"+prefix, *runs, true)
				sameTime += d
				sameRound = d
				if err != nil {
					return fmt.Errorf("bare DBOS on sluice's handle: %w", err)
				}
				return nil
			})
		}
		k := r % len(sides)
		for _, side := range slices.Concat(sides[k:], sides[:k]) {
			if err := side(); err != nil {
				return err
			}
		}
		rep.Ratios = append(rep.Ratios, round4(dbosRound.Seconds()/sluiceRound.Seconds()))
		if sameRound > 0 {
			rep.SameHandleRatios = append(rep.SameHandleRatios, round4(sameRound.Seconds()/sluiceRound.Seconds()))
		}
	}
	rep.RatioMedian = median(rep.Ratios)
	total := float64(*runs * *rounds)
	rep.SluiceRunsPS = total / sluiceTime.Seconds()
	rep.DBOSRunsPS = total / dbosTime.Seconds()
	rep.Ratio = rep.SluiceRunsPS / rep.DBOSRunsPS
	if sameTime > 0 {
		rep.SameHandleRunsPS = total / sameTime.Seconds()
		rep.SameHandleRatioMedian = median(rep.SameHandleRatios)
	}
	return printReport(env.Stdout, *asJSON, "", rep, func(w io.Writer) {
		fmt.Fprintf(w, "%d×%d runs of 3 steps on %s: sluice %.1f runs/s, bare DBOS %.1f runs/s, ratio %.2f\n",
			rep.Rounds, rep.Runs, rep.DatabaseKind, rep.SluiceRunsPS, rep.DBOSRunsPS, rep.Ratio)
		fmt.Fprintf(w, "ratio of each round: %v, median %.2f\n", rep.Ratios, rep.RatioMedian)
		if rep.SameHandleRunsPS > 0 {
			fmt.Fprintf(w, "bare DBOS on sluice's SQLite handle: %.1f runs/s; sluice's ratio to it each round: %v, median %.2f\n",
				rep.SameHandleRunsPS, rep.SameHandleRatios, rep.SameHandleRatioMedian)
		}
	})
}

// benchSluice sends n events and waits for their runs, and returns how long
// that took (set-up and shut-down not included).
func benchSluice(ctx context.Context, db, prefix string, n int) (time.Duration, error) {
	app, err := sluice.New(ctx, sluice.Config{DatabaseURL: db, PollInterval: benchPoll, Logger: quietLogger(), AppVersion: "bench"})
	if err != nil {
		return 0, err
	}
	defer app.Stop(context.Background())
	err = sluice.Register(app, run.Function{ID: "three-steps", Event: "bench/go"}, func(ctx *sluice.Context, ev sluice.Event[struct{ I int }]) (int, error) {
		a, err := sluice.Step(ctx, "one", func(context.Context) (int, error) { return ev.Data.I, nil })
		if err != nil {
			return 0, err
		}
		b, err := sluice.Step(ctx, "two", func(context.Context) (int, error) { return a + 1, nil })
		if err != nil {
			return 0, err
		}
		return sluice.Step(ctx, "three", func(context.Context) (int, error) { return b + 1, nil })
	})
	if err != nil {
		return 0, err
	}
	if err := app.Start(ctx); err != nil {
		return 0, err
	}
	start := time.Now()
	ids := make([]string, n)
	for i := range n {
		sent, err := app.Send(ctx, "bench/go", prefix+strconv.Itoa(i), struct{ I int }{i})
		if err != nil {
			return 0, err
		}
		ids[i] = sent[0].RunID
	}
	for _, id := range ids {
		st, err := app.Wait(ctx, id)
		if err != nil {
			return 0, err
		}
		if st.Status != "completed" {
			return 0, fmt.Errorf("run %s: %s %s", id, st.Status, st.Error)
		}
	}
	return time.Since(start), nil
}

func benchWorkflow(ctx dbos.Context, i int) (int, error) {
	a, err := dbos.RunAsStep(ctx, func(context.Context) (int, error) { return i, nil }, dbos.WithStepName("one"))
	if err != nil {
		return 0, err
	}
	b, err := dbos.RunAsStep(ctx, func(context.Context) (int, error) { return a + 1, nil }, dbos.WithStepName("two"))
	if err != nil {
		return 0, err
	}
	return dbos.RunAsStep(ctx, func(context.Context) (int, error) { return b + 1, nil }, dbos.WithStepName("three"))
}

// benchBareDBOS enqueues n runs of the same workflow on a DBOS queue and
// waits for them, and returns how long that took. DBOS opens its database
// itself, or, with sameHandle on SQLite, runs on the handle sluice opens.
func benchBareDBOS(ctx context.Context, db, prefix string, n int, sameHandle bool) (time.Duration, error) {
	cfg := dbos.Config{AppName: "bench-dbos", Logger: quietLogger(), ApplicationVersion: "bench"}
	switch {
	case cli.IsPostgresURL(db):
		cfg.DatabaseURL = db
	case sameHandle:
		h, err := sqlite.OpenDB(db)
		if err != nil {
			return 0, err
		}
		defer h.Close()
		cfg.SQLiteSystemDB = h
	default:
		cfg.DatabaseURL = "sqlite:" + db
	}
	dctx, err := dbos.NewContext(ctx, cfg)
	if err != nil {
		return 0, err
	}
	defer dbos.Shutdown(dctx, 10*time.Second)
	dbos.RegisterWorkflow(dctx, benchWorkflow)
	q, err := dbos.RegisterQueue(dctx, "bench-dbos", dbos.WithQueueBasePollingInterval(benchPoll))
	if err != nil {
		return 0, err
	}
	if err := dbos.Launch(dctx); err != nil {
		return 0, err
	}
	start := time.Now()
	handles := make([]dbos.WorkflowHandle[int], n)
	for i := range n {
		h, err := dbos.RunWorkflow(dctx, benchWorkflow, i, dbos.WithQueue(q), dbos.WithWorkflowID("dbos-"+prefix+strconv.Itoa(i)))
		if err != nil {
			return 0, err
		}
		handles[i] = h
	}
	for _, h := range handles {
		if _, err := h.GetResult(dbos.WithHandlePollingInterval(20 * time.Millisecond)); err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}
