package sluice_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice"
)

// New opens the database DatabaseURL names and refuses one it cannot use
// with an error that says why and never shows a password.
func TestNewRefusesDatabase(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, url, want string
	}{
		{"in-memory sqlite", "sqlite::memory:", "in-memory SQLite database lives in one connection and cannot be shared with DBOS"},
		{"no scheme or suffix", "sluice", "not a database URL"},
		{"unknown scheme", "mysql://db/x", "unsupported scheme"},
		{"password kept out", "postgres://u:hunter2@127.0.0.1:1/x?connect_timeout=1", "xxxxx"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			app, err := sluice.New(context.Background(), sluice.Config{DatabaseURL: tc.url})
			if err == nil {
				_ = app.Stop(context.Background())
				t.Fatalf("New on %q: no error, want one saying %q", tc.url, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("New on %q: %v; want it to say %q and never show the password", tc.url, err, tc.want)
			}
		})
	}
}

// Stop releases the database and the executor's lock, twice safely: a new
// app starts on the same file at once.
func TestStopReleasesDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := filepath.Join(t.TempDir(), "sluice.db")
	for i := range 2 {
		app := newApp(t, sluice.Config{DatabaseURL: url})
		if err := app.Start(ctx); err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		stop, cancel := context.WithTimeout(ctx, 5*time.Second)
		for j := range 2 {
			if err := app.Stop(stop); err != nil {
				t.Fatalf("app %d, stop %d: %v", i, j, err)
			}
		}
		cancel()
	}
}
