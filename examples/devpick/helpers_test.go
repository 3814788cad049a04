package devpick

import (
	"context"
	"database/sql"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/govtext"
	"github.com/sluice-dev/sluice/internal/sim"
)

// vclock is a virtual clock: Sleep moves it on at once, so a scheduler of
// 30-minute periods runs hours in milliseconds.
type vclock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *vclock { return &vclock{t: time.Date(2026, 10, 18, 7, 1, 49, 0, time.UTC)} }

func (c *vclock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *vclock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d > 0 {
		c.t = c.t.Add(d)
	}
}

func (c *vclock) Sleep(ctx context.Context, d time.Duration) error {
	c.Advance(d)
	return ctx.Err()
}

// tempDB opens a new SQLite file as OpenDB opens an app's database.
func tempDB(t *testing.T) (*sql.DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "devpick.db")
	db, err := OpenDB(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db, path
}

func seedLimits(t *testing.T) governor.Limits {
	t.Helper()
	l, err := govtext.Limits(Limits)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// simServer starts the provider simulator (Groq's profile) on clock now
// (nil: the wall clock).
func simServer(t *testing.T, cfg forecast.ModelConfig, now func() time.Time) (*forecast.Model, string) {
	t.Helper()
	cfg.Profile, cfg.Wire = "groq", true
	model, err := forecast.NewModel(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := sim.NewServer(model, sim.ServerConfig{Now: now})
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	return model, "http://" + srv.Addr() + "/v1"
}
