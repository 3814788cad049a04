package engine

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

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
