package sluice_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/internal/testenv"
)

func newApp(t *testing.T, cfg sluice.Config) *sluice.App {
	t.Helper()
	cfg.PollInterval = 20 * time.Millisecond
	cfg.RetryBase, cfg.RetryMax = time.Millisecond, 5*time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	app, err := sluice.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = app.Stop(context.Background()) })
	return app
}

type doc struct {
	DocumentID string `json:"documentId"`
	Text       string `json:"text"`
}

func TestAppRunsTypedFunction(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		app := newApp(t, sluice.Config{DatabaseURL: url})
		var fetched, failures atomic.Int32
		err := sluice.Register(app, sluice.FunctionConfig{ID: "summarize-doc", Event: "doc/uploaded", Retries: 2, Idempotency: "event.data.documentId"},
			func(ctx *sluice.Context, ev sluice.Event[doc]) (map[string]any, error) {
				text, err := sluice.Step(ctx, "fetch", func(context.Context) (string, error) {
					fetched.Add(1)
					return ev.Data.Text, nil
				})
				if err != nil {
					return nil, err
				}
				words, err := sluice.Step(ctx, "count", func(context.Context) (int, error) {
					if failures.Add(1) == 1 {
						return 0, sluice.RetryAfter(errors.New("busy"), time.Millisecond)
					}
					return len(text), nil
				})
				if err != nil {
					return nil, err
				}
				saved, err := sluice.Transaction(ctx, "save", func(ctx context.Context, tx sluice.Tx) (int64, error) {
					if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS test_docs (id TEXT PRIMARY KEY, n INTEGER)`); err != nil {
						return 0, err
					}
					res, err := tx.Exec(ctx, `INSERT INTO test_docs (id, n) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING`, ev.Data.DocumentID, words)
					if err != nil {
						return 0, err
					}
					return res.RowsAffected()
				})
				return map[string]any{"run": ctx.RunID(), "fn": ctx.FunctionID(), "n": words, "saved": saved}, err
			})
		if err != nil {
			t.Fatal(err)
		}
		if err := app.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		sent, err := app.Send(context.Background(), "doc/uploaded", "e1", doc{DocumentID: "d1", Text: "hello"})
		if err != nil || len(sent) != 1 || sent[0].Status != "queued" {
			t.Fatalf("send: %v %+v", err, sent)
		}
		again, _ := app.Send(context.Background(), "doc/uploaded", "e2", doc{DocumentID: "d1", Text: "other"})
		if again[0].Status != "existing" || again[0].RunID != sent[0].RunID {
			t.Fatalf("same idempotency key: %+v", again)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		st, err := app.Wait(ctx, sent[0].RunID)
		if err != nil || st.Status != "completed" {
			t.Fatalf("run: %v %+v", err, st)
		}
		if fetched.Load() != 1 || failures.Load() != 2 {
			t.Fatalf("fetch ran %d times, count %d attempts; want 1 and 2", fetched.Load(), failures.Load())
		}
	})
}

func TestRegisterRejectsBadConfig(t *testing.T) {
	t.Parallel()
	app := newApp(t, sluice.Config{DatabaseURL: filepath.Join(t.TempDir(), "s.db")})
	h := func(*sluice.Context, sluice.Event[struct{}]) (int, error) { return 0, nil }
	for _, tc := range []struct {
		name string
		cfg  sluice.FunctionConfig
	}{
		{"no trigger", sluice.FunctionConfig{ID: "a"}},
		{"bad retries", sluice.FunctionConfig{ID: "a", Event: "e", Retries: -5}},
		{"unknown provider", sluice.FunctionConfig{ID: "a", Event: "e", Provider: "nope"}},
		{"bad cron", sluice.FunctionConfig{ID: "a", Cron: "every day"}},
	} {
		if err := sluice.Register(app, tc.cfg, h); err == nil {
			t.Errorf("%s: registered, want an error", tc.name)
		}
	}
	if _, err := app.Stats(""); err == nil {
		t.Error("stats of an app without providers: want an error")
	}
}
