package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/testenv"
)

// One live engine per executor ID and database: a second is refused with
// ErrExecutorRunning while the first runs, and an engine launched the
// moment the one before it shut down finds the lock free, every time.
func TestExecutorLock(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		launch := func() (*Engine, error) {
			e, err := New(context.Background(), Config{Store: testenv.OpenStore(t, url), PollInterval: 20 * time.Millisecond,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				return nil, err
			}
			if err := e.Launch(context.Background()); err != nil {
				_ = e.Shutdown(5 * time.Second)
				return nil, err
			}
			return e, nil
		}
		first, err := launch()
		if err != nil {
			t.Fatal(err)
		}
		if second, err := launch(); !errors.Is(err, ErrExecutorRunning) {
			if second != nil {
				_ = second.Shutdown(5 * time.Second)
			}
			t.Fatalf("a second engine of the same executor: %v, want ErrExecutorRunning", err)
		}
		e := first
		for i := range 10 {
			if err := e.Shutdown(5 * time.Second); err != nil {
				t.Fatalf("shutdown %d: %v", i, err)
			}
			if e, err = launch(); err != nil {
				t.Fatalf("launch right after shutdown %d: %v", i, err)
			}
		}
		_ = e.Shutdown(5 * time.Second)
	})
}

// Processes that start together on a new PostgreSQL database each migrate
// DBOS's system tables: New serializes them, so every one starts (DBOS alone
// fails all but one, each creating the dbos schema at once).
func TestEnginesStartTogetherOnANewDatabase(t *testing.T) {
	t.Parallel()
	url := testenv.Postgres(t)
	const n = 6
	errs := make([]error, n)
	engines := make([]*Engine, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			st, err := store.Open(context.Background(), url)
			if err != nil {
				errs[i] = err
				return
			}
			t.Cleanup(func() { _ = st.Close() })
			<-start
			engines[i], errs[i] = New(context.Background(), Config{Store: st, AppName: "together", ExecutorID: fmt.Sprintf("node-%d", i),
				PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if errs[i] == nil {
				errs[i] = engines[i].Launch(context.Background())
			}
		})
	}
	time.Sleep(100 * time.Millisecond) // the stores open, then all start at once
	close(start)
	wg.Wait()
	for i, e := range engines {
		if e != nil {
			t.Cleanup(func() { _ = e.Shutdown(5 * time.Second) })
		}
		if errs[i] != nil {
			t.Errorf("engine %d: %v", i, errs[i])
		}
	}
}
