package sluice_test

import (
	"context"
	"encoding/json"
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
	testenv.Databases(t, func(t *testing.T, url string) {
		app := newApp(t, sluice.Config{DatabaseURL: url, HealthEvery: 50 * time.Millisecond, Providers: []sluice.Provider{{Name: "p", LLM: llm.Config{BaseURL: "http://127.0.0.1:1/v1"}}}})
		var listed atomic.Int32
		err := sluice.RegisterBackfill(app, sluice.Backfill[string]{
			Backfill: run.Backfill{ID: "notes", MaxBatch: 1, Poll: time.Hour},
			Pending: func(_ context.Context, after string, limit int) ([]string, error) {
				listed.Add(1)
				return []string{"b", "a"}, nil
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
		if msg := flow["last_error"].(string); !strings.Contains(msg, `the page after "" is not in increasing key order`) {
			t.Errorf("last error %q: want it to say the page is out of order", msg)
		}
		if n := listed.Load(); n != 1 {
			t.Errorf("the source was listed %d times: want once (a source out of order is not retried)", n)
		}
		if flow["pending"] != nil && flow["pending"] != float64(0) {
			t.Errorf("pending %v: want no item recorded", flow["pending"])
		}
	})
}
