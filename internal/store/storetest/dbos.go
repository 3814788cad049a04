package storetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	// The suite runs DBOS because sharing the handle with DBOS is part of
	// what a Store promises (Store.Handle), and only a real DBOS shows the
	// handle will do. Importing DBOS here costs nothing outside tests: only
	// the drivers' tests import this package, and sluice links DBOS anyway.
	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/store"
)

// exerciseDBOS runs DBOS on the store's own handle, with workflow steps and
// the store writing the one database at the same time, as sluice does, and
// settles a backfill's batch in a DBOS transaction.
func exerciseDBOS(t *testing.T, open func(t *testing.T) store.Store) {
	t.Run("SharedWithDBOS", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		s := open(t)
		h := mustHandle(t, s)
		if (h.SQLite == nil) == (h.Postgres == nil) {
			t.Fatalf("Handle = %+v: want exactly one of SQLite and Postgres", h)
		}
		if (h.SQLite != nil) != (h.File != "") {
			t.Fatalf("Handle = %+v: want File set with SQLite, and only then", h)
		}
		dctx := newDBOS(t, h)
		// A step records a charge through the store, inside a DBOS workflow.
		admit := func(dctx dbos.Context, id string) (string, error) {
			return dbos.RunAsStep(dctx, func(ctx context.Context) (string, error) {
				c := store.Charge{ID: id, Flow: "wf", At: base, Cost: governor.Cost{Requests: 1, Input: 100, Output: 50}}
				return id, s.UpsertCharges(ctx, "groq", []store.Charge{c})
			})
		}
		dbos.RegisterWorkflow(dctx, admit)
		if err := dbos.Launch(dctx); err != nil {
			t.Fatalf("launch DBOS: %v", err)
		}
		const n = 8
		var wg sync.WaitGroup
		errs := make(chan error, 2*n)
		for i := range n {
			wg.Go(func() {
				h, err := dbos.RunWorkflow(dctx, admit, fmt.Sprintf("wf-%d", i))
				if err == nil {
					_, err = h.GetResult()
				}
				if err != nil {
					errs <- fmt.Errorf("workflow %d: %w", i, err)
				}
			})
			wg.Go(func() {
				c := store.Charge{ID: fmt.Sprintf("direct-%d", i), Flow: "direct", At: base, Cost: governor.Cost{Requests: 1}}
				if err := s.UpsertCharges(ctx, "groq", []store.Charge{c}); err != nil {
					errs <- fmt.Errorf("direct upsert %d: %w", i, err)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if got := mustCharges(t, s, "groq", base); len(got) != 2*n {
			t.Errorf("%d charges after %d workflows and %d direct writes, want %d", len(got), n, n, 2*n)
		}
		// DBOS's tables are in the store's database.
		var dbosTables int
		var err error
		if h.SQLite != nil {
			err = h.SQLite.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'dbos_migrations'`).Scan(&dbosTables)
		} else {
			err = h.Postgres.QueryRow(ctx, `SELECT count(*) FROM information_schema.tables WHERE table_schema = 'dbos' AND table_name = 'workflow_status'`).Scan(&dbosTables)
		}
		if err != nil || dbosTables != 1 {
			t.Errorf("DBOS's tables are not in the store's database (count %d, %v)", dbosTables, err)
		}
		// DBOS closes the handle it was given when it shuts down, so a
		// program shuts DBOS down after its last store call; the store's
		// Close is then a no-op. This pins that behaviour: if DBOS stops
		// closing it, the documentation of store.Handle must change.
		if err := dbos.Shutdown(dctx, 10*time.Second); err != nil {
			t.Fatalf("shut DBOS down: %v", err)
		}
		if h.SQLite != nil {
			err = h.SQLite.PingContext(ctx)
		} else {
			err = h.Postgres.Ping(ctx)
		}
		if err == nil {
			t.Error("the handle is still open after DBOS shut down: update the documentation of store.Handle")
		}
		if err := s.Close(); err != nil {
			t.Errorf("Close after DBOS closed the handle: %v", err)
		}
	})
	t.Run("SettleInDBOSTransaction", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		s := open(t)
		h := mustHandle(t, s)
		dctx := newDBOS(t, h)
		var ds *dbos.DataSource
		var err error
		if h.SQLite != nil {
			ds, err = dbos.NewDataSource(dctx, h.SQLite)
		} else {
			ds, err = dbos.NewDataSource(dctx, h.Postgres)
		}
		if err != nil {
			t.Fatalf("DBOS data source on the store's handle: %v", err)
		}
		mustAdd(t, s, "titles", base, "", "k1", "k2", "k3")
		st := settlement("titles", "run-1", "req-1", base.Add(time.Minute), saved("k1"), rejected("k2", "too long"))
		st.Then = []string{"summaries"}
		// The step saves its outputs, settles the batch and adds the items
		// of another backfill in one transaction, then fails or not.
		errFail := errors.New("the step failed after settling")
		save := func(dctx dbos.Context, fail bool) (string, error) {
			return dbos.RunAsTransaction(dctx, ds, func(ctx context.Context, tx dbos.Tx) (string, error) {
				if err := s.Settle(ctx, tx, st); err != nil {
					return "", err
				}
				if n, err := s.AddItemsIn(ctx, tx, "found", []string{"f1", "f2"}, base, ""); err != nil || n != 2 {
					return "", fmt.Errorf("AddItemsIn: %d added, %v; want 2", n, err)
				}
				if fail {
					return "", errFail
				}
				return "settled", nil
			}, dbos.WithStepName("save"))
		}
		dbos.RegisterWorkflow(dctx, save)
		if err := dbos.Launch(dctx); err != nil {
			t.Fatalf("launch DBOS: %v", err)
		}
		// DBOS closes the store's handle when it shuts down: last.
		t.Cleanup(func() { _ = dbos.Shutdown(dctx, 10*time.Second) })
		run := func(fail bool) error {
			h, err := dbos.RunWorkflow(dctx, save, fail)
			if err == nil {
				_, err = h.GetResult()
			}
			return err
		}

		items, job := mustItems(t, s, "titles", "k1", "k2", "k3"), mustJob(t, s, "titles")
		if err := run(true); err == nil || !strings.Contains(err.Error(), errFail.Error()) {
			t.Fatalf("the failing step: error = %v, want %v", err, errFail)
		}
		// Rolled back with the step: nothing of the batch is recorded.
		assertItems(t, mustItems(t, s, "titles", "k1", "k2", "k3"), items...)
		assertJob(t, mustJob(t, s, "titles"), job)
		if _, err := s.Job(ctx, "summaries"); !errors.Is(err, store.ErrNoJob) {
			t.Fatalf("a rolled-back batch made the job of its Then: %v", err)
		}
		if _, err := s.Job(ctx, "found"); !errors.Is(err, store.ErrNoJob) {
			t.Fatalf("items added in a rolled-back transaction made their job: %v", err)
		}

		if err := run(false); err != nil {
			t.Fatalf("the step that commits: %v", err)
		}
		assertKeys(t, mustNext(t, s, "titles", base.Add(time.Hour), 10), "k2", "k3")
		if got := mustItems(t, s, "titles", "k1"); got[0].State != store.ItemSaved || got[0].RequestID != "req-1" {
			t.Fatalf("k1 after the step committed: %+v, want saved by req-1", got[0])
		}
		assertKeys(t, mustItems(t, s, "summaries", "k1", "k2"), "k1")
		assertKeys(t, mustItems(t, s, "found", "f1", "f2"), "f1", "f2")
		assertCounts(t, s, "titles", "summaries", "found")
	})
}

// newDBOS returns a DBOS context on the store's handle h, not launched.
func newDBOS(t *testing.T, h store.Handle) dbos.Context {
	t.Helper()
	dctx, err := dbos.NewContext(context.Background(), dbos.Config{
		AppName:        "sluice-store-test",
		SQLiteSystemDB: h.SQLite,
		SystemDBPool:   h.Postgres,
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatalf("DBOS on the store's handle: %v", err)
	}
	return dctx
}

func mustHandle(t *testing.T, s store.Store) store.Handle {
	t.Helper()
	h, err := s.Handle()
	if err != nil {
		t.Fatalf("Handle: %v", err)
	}
	return h
}
