package benchcmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/examples/summarize"
	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/internal/serveapp"
	"github.com/sluice-dev/sluice/llm"
)

// crashWorker is the child. In "send" mode it sends new documents, keeping
// about two runs queued per run in flight, until it is stopped; in "drain"
// mode it sends documents up to the --events minimum, then waits for every
// run to end. Sending again is a no-op (the idempotency keys deduplicate),
// so a worker numbers its documents on from the runs already in the
// database. SIGTERM ends ctx, as in sluice's main: the worker stops sending
// and returns, and the app stops gracefully, as a pause.
func crashWorker(ctx context.Context, env *cli.Env, mode, stamp string) (err error) {
	st, err := readCrashSettings(env)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "%s%s\n", crashBuild, stamp)
	dbURL := env.Getenv(crashDBEnv)
	app, err := serveapp.New(ctx, env.Getenv, serveapp.Options{
		DB: dbURL, ProviderURL: env.Getenv(crashProviderEnv), Profile: "groq", Limits: "",
		Concurrency: st.concurrency, Retries: st.retries, RetryBase: 50 * time.Millisecond,
		Timeouts:   llm.Timeouts{FirstByte: st.firstByte},
		AppVersion: env.Getenv(crashAppVersionEnv), StopGrace: serveapp.StopGrace(st.grace),
	})
	if err != nil {
		return err
	}
	// The stop a deploy makes: no new work, the calls in flight finish
	// within the grace, unfinished runs wait for the next worker.
	defer func() {
		if serr := app.Stop(context.Background()); serr != nil {
			err = errors.Join(err, fmt.Errorf("stop: %w", serr))
		}
	}()
	// The pipeline's saves create its table if missing, but on PostgreSQL
	// the first saves of a new database would race to: create it before
	// any run starts, and so that the check can count saves when none was
	// made.
	if err := createSummarizeTable(ctx, dbURL); err != nil {
		return err
	}
	if err := app.Start(ctx); err != nil {
		return err
	}
	// DBOS's tables exist once the app has started.
	runs, err := openDBOSRuns(ctx, dbURL)
	if err != nil {
		return err
	}
	defer runs.close()
	fmt.Fprintln(env.Stdout, crashReady)
	s := &crashSender{app: app, runs: runs}
	return s.send(ctx, env.Stdout, mode, st)
}

// createSummarizeTable creates the pipeline's table in the database dbURL
// names, if missing.
func createSummarizeTable(ctx context.Context, dbURL string) error {
	db, err := openBenchDB(ctx, dbURL)
	if err != nil {
		return err
	}
	defer db.close()
	if err := db.exec(ctx, summarize.Schema); err != nil {
		return fmt.Errorf("create %s: %w", summarize.Table, err)
	}
	return nil
}

// crashSettings are what the parent tells a worker in its variables.
type crashSettings struct {
	minEvents, concurrency, retries int
	firstByte, grace                time.Duration
}

func readCrashSettings(env *cli.Env) (crashSettings, error) {
	var st crashSettings
	for _, v := range []struct {
		name string
		n    *int
	}{{crashEventsEnv, &st.minEvents}, {crashConcurrencyEnv, &st.concurrency}, {crashRetriesEnv, &st.retries}} {
		n, err := strconv.Atoi(env.Getenv(v.name))
		if err != nil {
			return st, fmt.Errorf("%s: %w", v.name, err)
		}
		*v.n = n
	}
	for _, v := range []struct {
		name string
		d    *time.Duration
	}{{crashFirstByteEnv, &st.firstByte}, {crashStopGraceEnv, &st.grace}} {
		d, err := time.ParseDuration(env.Getenv(v.name))
		if err != nil {
			return st, fmt.Errorf("%s: %w", v.name, err)
		}
		*v.d = d
	}
	return st, nil
}

// crashSender sends a worker's documents and reads their runs' progress.
type crashSender struct {
	app  *sluice.App
	runs *dbosRuns
}

// count counts the pipeline's runs, and those of them not ended.
func (s *crashSender) count() (runs, pending int, err error) {
	n, err := s.runs.countByStatus(summarize.FunctionID)
	return n.total(), n.notEnded(), err
}

// retry waits before the next try: DBOS's client retries a call a database
// restart broke until it reconnects, but a send the restart broke returns
// its error. It reports false once ctx has ended: a stop was asked for, and
// the worker returns without an error.
func (s *crashSender) retry(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(100 * time.Millisecond):
	}
	return true
}

// send sends documents as mode says, printing how many in all after
// each, until the worker is done or stopped.
func (s *crashSender) send(ctx context.Context, out io.Writer, mode string, st crashSettings) error {
	next, _, err := s.count()
	for err != nil {
		if !s.retry(ctx) {
			return nil
		}
		next, _, err = s.count()
	}
	backlog := 2 * st.concurrency
	last, lastChange := -1, time.Now()
	for {
		_, pending, err := s.count()
		if err != nil {
			if !s.retry(ctx) {
				return nil
			}
			continue
		}
		switch {
		case mode == "drain" && next >= st.minEvents && pending == 0:
			return nil
		case pending < backlog && (mode == "send" || next < st.minEvents):
			doc := fmt.Sprintf("doc-%06d", next)
			if _, err := s.app.Send(ctx, summarize.Event, "upload-"+doc, summarize.Doc{DocumentID: doc}); err != nil {
				if !s.retry(ctx) {
					return nil
				}
				continue
			}
			next++
			fmt.Fprintf(out, "%s%d\n", crashSent, next)
			continue
		}
		if pending != last {
			last, lastChange = pending, time.Now()
		} else if time.Since(lastChange) > crashStall {
			return nil // the parent lists the runs that are stuck
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(20 * time.Millisecond):
		}
	}
}
