package sluice_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/llm"
	"github.com/sluice-dev/sluice/run"
)

// A source that lists its keys out of order fails the run that reads it,
// once, with an error that says so, and records no item: listing and
// recording a page are one step, which a broken source does not retry.
func TestBackfillRefusesASourceOutOfOrder(t *testing.T) {
	t.Parallel()
	failingSource(t, `list pending items: the page after "" is not in increasing key order`, 1,
		func(context.Context, string, int) ([]string, error) { return []string{"b", "a"}, nil })
}

// A source that fails says so in the job's last error, as the listing's.
func TestBackfillSourceErrorIsNamed(t *testing.T) {
	t.Parallel()
	failingSource(t, "list pending items: the source is down", 0,
		func(context.Context, string, int) ([]string, error) { return nil, errors.New("the source is down") })
}

// failingSource runs a backfill of pending on both databases until a run
// of it fails, and checks the job's last error holds want, that no item
// was recorded, and, when lists is not 0, how often the source was listed.
func failingSource(t *testing.T, want string, lists int32, pending func(context.Context, string, int) ([]string, error)) {
	testenv.Databases(t, func(t *testing.T, url string) {
		app := newApp(t, sluice.Config{DatabaseURL: url, HealthEvery: 50 * time.Millisecond, Providers: []sluice.Provider{{Name: "p", LLM: llm.Config{BaseURL: "http://127.0.0.1:1/v1"}}}})
		var listed atomic.Int32
		err := sluice.RegisterBackfill(app, sluice.Backfill[string]{
			Backfill: run.Backfill{ID: "notes", MaxBatch: 1, Poll: time.Hour},
			Pending: func(ctx context.Context, after string, limit int) ([]string, error) {
				listed.Add(1)
				return pending(ctx, after, limit)
			},
			Load: func(_ context.Context, keys []string) (map[string]string, error) {
				t.Error("Load was called: no item should have been recorded")
				return nil, nil
			},
			Request: func(items []sluice.Item[string]) (*llm.ChatRequest, error) {
				return &llm.ChatRequest{Model: "m", MaxTokens: 5, Messages: []llm.Message{{Role: "user", Content: items[0].Data}}}, nil
			},
			Save: func(context.Context, sluice.Tx, sluice.Item[string], string) error { return nil },
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := app.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		api := httptest.NewServer(app.Handler(sluice.HandlerConfig{}))
		t.Cleanup(api.Close)
		var flow map[string]any
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) { // poll interval: until the run ends (the deadline bounds it)
			resp, err := http.Get(api.URL + "/v1/flows")
			if err != nil {
				t.Fatal(err)
			}
			var body struct{ Flows []map[string]any }
			err = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range body.Flows {
				if f["name"] == "notes" {
					flow = f
				}
			}
			if flow != nil && flow["last_error"] != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no run of notes failed within a minute: %v", flow)
			}
		}
		if msg := flow["last_error"].(string); !strings.Contains(msg, want) {
			t.Errorf("last error %q: want it to hold %q", msg, want)
		}
		if n := listed.Load(); lists != 0 && n != lists {
			t.Errorf("the source was listed %d times: want %d (a source out of order is not retried)", n, lists)
		}
		if flow["pending"] != nil && flow["pending"] != float64(0) {
			t.Errorf("pending %v: want no item recorded", flow["pending"])
		}
	})
}
