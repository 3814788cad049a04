package postgres_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/store/postgres"
	"github.com/sluice-dev/sluice/internal/testenv"
)

// TestSharedWithDBOS runs DBOS on the store's own pool, with workflow
// steps and the store writing the one database at the same time.
func TestSharedWithDBOS(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	s, err := postgres.Open(ctx, testenv.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dctx, err := dbos.NewContext(ctx, dbos.Config{
		AppName:      "sluice-store-test",
		SystemDBPool: s.Pool(),
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatalf("DBOS on the store's handle: %v", err)
	}
	at := time.Date(2026, 10, 18, 7, 0, 0, 0, time.UTC)
	// A step records a charge through the store, inside a DBOS workflow.
	admit := func(dctx dbos.Context, id string) (string, error) {
		return dbos.RunAsStep(dctx, func(ctx context.Context) (string, error) {
			c := store.Charge{ID: id, Flow: "wf", At: at, Cost: governor.Cost{Requests: 1, Input: 100, Output: 50}}
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
			c := store.Charge{ID: fmt.Sprintf("direct-%d", i), Flow: "direct", At: at, Cost: governor.Cost{Requests: 1}}
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
	got, err := s.Charges(ctx, "groq", at)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2*n {
		t.Errorf("%d charges after %d workflows and %d direct writes, want %d", len(got), n, n, 2*n)
	}
	var dbosTables int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM information_schema.tables WHERE table_schema = 'dbos' AND table_name = 'workflow_status'`).Scan(&dbosTables); err != nil || dbosTables != 1 {
		t.Errorf("DBOS's tables are not in the store's database (count %d, %v)", dbosTables, err)
	}
	// DBOS closes the pool it was given when it shuts down, so a program
	// shuts DBOS down after its last store call; the store's Close is then
	// a no-op. This pins that behaviour: if DBOS stops closing it, the
	// documentation of DB must change.
	if err := dbos.Shutdown(dctx, 10*time.Second); err != nil {
		t.Fatalf("shut DBOS down: %v", err)
	}
	if err := s.Pool().Ping(ctx); err == nil {
		t.Error("the pool is still open after DBOS shut down: update the documentation of postgres.Store.Pool")
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close after DBOS closed the handle: %v", err)
	}
}
