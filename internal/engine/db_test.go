package engine

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/store/postgres"
	"github.com/sluice-dev/sluice/internal/store/sqlite"
	"github.com/sluice-dev/sluice/internal/testenv"
)

func TestOpenDBRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, url, want string
	}{
		{"in-memory sqlite", "sqlite::memory:", "in-memory"},
		{"no scheme or suffix", "sluice", "not a database URL"},
		{"unknown scheme", "mysql://db/x", "unsupported scheme"},
		{"password kept out", "postgres://u:hunter2@127.0.0.1:1/x?connect_timeout=1", "xxxxx"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, err := openDB(context.Background(), tc.url)
			if err == nil {
				d.close()
				t.Fatalf("opened %q, want an error saying %q", tc.url, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("error %q: want it to say %q and never show the password", err, tc.want)
			}
		})
	}
}

// The store, the engine's tables and DBOS live in one database, and what
// runs leave in memory can still be written when the engine stops: the
// BeforeClose functions run after the last run returned, before DBOS closes
// the shared handle.
func TestOneDatabaseAndFlushBeforeClose(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		e, err := New(context.Background(), Config{DatabaseURL: url, PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		inStep := make(chan struct{})
		var returned atomic.Bool
		err = e.Register(&Function{ID: "hold", Event: "go", Handler: func(r *Run, ev Event) (any, error) {
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
		if err := e.Shutdown(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		if flushes.Load() == 0 || sawRunning.Load() {
			t.Fatalf("BeforeClose ran %d times, while a run was executing: %v; want it after the run returned", flushes.Load(), sawRunning.Load())
		}
		st, err := store.Open(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
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
		if err := queryOne(st, q, &n); err != nil || n != 3 {
			t.Fatalf("%d of DBOS's, the engine's and the store's tables in one database (%v), want 3", n, err)
		}
	})
}

// queryOne scans one row of q on the store's own handle.
func queryOne(st store.Store, q string, dest ...any) error {
	switch s := st.(type) {
	case *sqlite.Store:
		return s.DB().QueryRow(q).Scan(dest...)
	case *postgres.Store:
		return s.Pool().QueryRow(context.Background(), q).Scan(dest...)
	}
	return fmt.Errorf("no handle in %T", st)
}
