package engine

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/run"
)

// said is a slog.Handler that hands every record's message to a channel.
type said chan string

func (s said) Enabled(context.Context, slog.Level) bool { return true }
func (s said) Handle(_ context.Context, r slog.Record) error {
	select {
	case s <- r.Message:
	default:
	}
	return nil
}
func (s said) WithAttrs([]slog.Attr) slog.Handler { return s }
func (s said) WithGroup(string) slog.Handler      { return s }

// Send to a rate-limited function while another process holds the SQLite
// database locked longer than its busy timeout: Send waits for the lock
// (it says so once) and starts the run once it is free, instead of
// failing; held past SendLockWait, Send's error is store.ErrLocked, which
// the API answers with 503, and nothing was started.
func TestSendWaitsForALockedDatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.db")
	url := "sqlite:" + path + "?_pragma=busy_timeout(20)"
	logs := make(said, 100)
	e, err := New(context.Background(), Config{Store: testenv.OpenStore(t, url), PollInterval: 20 * time.Millisecond, Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Shutdown(5 * time.Second) })
	if err := e.Register(&Function{Function: run.Function{ID: "rl", Event: "hit", RateLimit: &run.RateLimit{Limit: 10, Period: time.Hour}}, Handler: echo}); err != nil {
		t.Fatal(err)
	}
	if err := e.Launch(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The other process waits for the engine's own short writes (its
	// queues poll and record) to take the lock, as SQLite's clients do.
	other, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	lock := func() (release func()) {
		t.Helper()
		conn, err := other.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
			t.Fatal(err)
		}
		return func() {
			_, _ = conn.ExecContext(context.Background(), "ROLLBACK")
			_ = conn.Close()
		}
	}
	hit := func(id string) ([]run.Sent, error) {
		b, _ := json.Marshal(map[string]string{"n": id})
		return e.Send(context.Background(), Event{Name: "hit", ID: id, Data: b})
	}
	waitFor := func(msg string) {
		t.Helper()
		for {
			select {
			case m := <-logs:
				if strings.Contains(m, msg) {
					return
				}
			case <-time.After(testenv.Budget):
				t.Fatalf("no log %q", msg)
			}
		}
	}

	release := lock()
	type result struct {
		sent []run.Sent
		err  error
	}
	done := make(chan result, 1)
	go func() {
		s, err := hit("first")
		done <- result{s, err}
	}()
	waitFor("the database is locked; waiting for it")
	release()
	r := <-done
	if r.err != nil || len(r.sent) != 1 || r.sent[0].Status != "queued" {
		t.Fatalf("a send that waited for the lock: %+v, %v; want its run queued", r.sent, r.err)
	}

	// Held past the wait: an error that says so, and no run.
	sendLockWait = 200 * time.Millisecond
	t.Cleanup(func() { sendLockWait = SendLockWait })
	release = lock()
	_, err = hit("second")
	release()
	if !errors.Is(err, store.ErrLocked) || !strings.Contains(err.Error(), "waited 200ms for the database") {
		t.Fatalf("a send held past the wait: %v; want store.ErrLocked, saying how long it waited", err)
	}
	if _, err := e.RunDetail(context.Background(), "rl:second", 0); !errors.Is(err, ErrRunNotFound) {
		t.Fatalf("the run of the send that failed: %v, want none", err)
	}
}
