package engine

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/run"
)

// New refuses a store whose database DBOS cannot share, and no store.
func TestNewRefusesStore(t *testing.T) {
	t.Parallel()
	if e, err := New(context.Background(), Config{}); err == nil || err.Error() != "engine config: no store" {
		if e != nil {
			_ = e.Shutdown(time.Second)
		}
		t.Fatalf("New without a store: %v, want engine config: no store", err)
	}
	// An in-memory SQLite database lives in one connection.
	e, err := New(context.Background(), Config{Store: testenv.OpenStore(t, "sqlite::memory:")})
	const want = "open sqlite::memory:: an in-memory SQLite database lives in one connection and cannot be shared with DBOS; use a file"
	if err == nil || err.Error() != want {
		if e != nil {
			_ = e.Shutdown(time.Second)
		}
		t.Fatalf("New on an in-memory SQLite store: %v, want %q", err, want)
	}
}

// The store, the engine's tables and DBOS live in one database, and what
// runs leave in memory can still be written when the engine stops: the
// BeforeClose functions run after the last run returned, before DBOS closes
// the shared handle.
func TestOneDatabaseAndFlushBeforeClose(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		// The step ends only when DBOS stops: a short grace ends it soon.
		e, err := New(context.Background(), Config{Store: testenv.OpenStore(t, url), PollInterval: 20 * time.Millisecond, StopGrace: 50 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		inStep := make(chan struct{})
		var returned atomic.Bool
		err = e.Register(&Function{Function: run.Function{ID: "hold", Event: "go"}, Handler: func(r *Run, ev Event) (any, error) {
			defer returned.Store(true)
			return Step(r, "hold", func(ctx context.Context) (int, error) {
				close(inStep)
				<-ctx.Done() // until the engine stops
				return 0, ctx.Err()
			})
		}})
		if err != nil {
			t.Fatal(err)
		}
		at := time.Now().UTC().Truncate(time.Millisecond)
		var flushes atomic.Int32
		var sawRunning atomic.Bool
		e.BeforeClose(func(ctx context.Context) error {
			flushes.Add(1)
			if !returned.Load() {
				sawRunning.Store(true)
			}
			return e.Store().UpsertCharges(ctx, "groq", []store.Charge{{ID: "late", Flow: "f", At: at, Cost: governor.Cost{Requests: 1, Input: 7}}})
		})
		if err := e.Launch(context.Background()); err != nil {
			t.Fatal(err)
		}
		send(t, e, "go", "a", nil)
		<-inStep
		if err := e.Shutdown(budget); err != nil {
			t.Fatal(err)
		}
		if flushes.Load() == 0 || sawRunning.Load() {
			t.Fatalf("BeforeClose ran %d times, while a run was executing: %v; want it after the run returned", flushes.Load(), sawRunning.Load())
		}
		st := testenv.OpenStore(t, url)
		got, err := st.Charges(context.Background(), "groq", at)
		if err != nil || len(got) != 1 || got[0].Cost.Input != 7 {
			t.Fatalf("the charge written before close: %+v, %v", got, err)
		}
		// DBOS's tables and the engine's are in the store's database.
		var n int
		q := `SELECT count(*) FROM sqlite_master WHERE name IN ('dbos_migrations', 'sluice_rate_counts', 'sluice_migrations')`
		if strings.HasPrefix(url, "postgres") {
			q = `SELECT count(*) FROM information_schema.tables WHERE (table_schema = 'dbos' AND table_name = 'dbos_migrations') OR table_name IN ('sluice_rate_counts', 'sluice_migrations')`
		}
		if err := queryRow(t, st, q).Scan(&n); err != nil || n != 3 {
			t.Fatalf("%d of DBOS's, the engine's and the store's tables in one database (%v), want 3", n, err)
		}
	})
}

// queryRow runs q on the store's own handle, with $N placeholders, which
// both databases accept.
func queryRow(t *testing.T, st store.Store, q string, args ...any) interface{ Scan(dest ...any) error } {
	t.Helper()
	h, err := st.Handle()
	if err != nil {
		t.Fatal(err)
	}
	if h.Postgres != nil {
		return h.Postgres.QueryRow(context.Background(), q, args...)
	}
	return h.SQLite.QueryRow(q, args...)
}
