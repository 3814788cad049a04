package benchcmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
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
	s := &crashSender{app: app, dbURL: dbURL}
	if s.db, err = openBenchDB(ctx, dbURL); err != nil {
		return err
	}
	defer func() { s.db.close() }()
	// The pipeline's saves create its table if missing, but on PostgreSQL
	// the first saves of a new database would race to: create it before
	// any run starts, and so that the check can count saves when none was
	// made.
	if err := s.db.exec(ctx, summarize.Schema); err != nil {
		return fmt.Errorf("create %s: %w", summarize.Table, err)
	}
	if err := app.Start(ctx); err != nil {
		return err
	}
	fmt.Fprintln(env.Stdout, crashReady)
	return s.send(ctx, env.Stdout, mode, st)
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
	app   *sluice.App
	db    *benchDB
	dbURL string
}

func (s *crashSender) count(ctx context.Context, q string) (int, error) {
	var n int64
	err := s.db.each(ctx, q, []any{summarize.FunctionID}, func(scan func(...any) error) error { return scan(&n) })
	return int(n), err
}

// retry opens another connection: a database restart breaks the reading
// one. It reports false once ctx has ended: a stop was asked for, and the
// worker returns without an error.
func (s *crashSender) retry(ctx context.Context) bool {
	s.db.close()
	if d, err := openBenchDB(ctx, s.dbURL); err == nil {
		s.db = d
	}
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
	runsQ := `SELECT COUNT(*) FROM ` + s.db.table("workflow_status") + ` WHERE name = $1`
	pendingQ := runsQ + fmt.Sprintf(` AND status NOT IN ('%s', '%s', '%s', '%s')`, dbos.WorkflowStatusSuccess, dbos.WorkflowStatusError,
		dbos.WorkflowStatusCancelled, dbos.WorkflowStatusMaxRecoveryAttemptsExceeded)
	next, err := s.count(ctx, runsQ)
	for err != nil {
		if !s.retry(ctx) {
			return nil
		}
		next, err = s.count(ctx, runsQ)
	}
	backlog := 2 * st.concurrency
	last, lastChange := -1, time.Now()
	for {
		pending, err := s.count(ctx, pendingQ)
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
