package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// recordHandler keeps every record's attributes, as a handler receives
// them, and writes each record as JSON too.
type recordHandler struct {
	mu    *sync.Mutex
	attrs *[][]slog.Attr
	json  slog.Handler
}

func (h recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recordHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h recordHandler) WithGroup(string) slog.Handler            { return h }
func (h recordHandler) Handle(ctx context.Context, r slog.Record) error {
	var as []slog.Attr
	r.Attrs(func(a slog.Attr) bool { as = append(as, a); return true })
	h.mu.Lock()
	*h.attrs = append(*h.attrs, as)
	h.mu.Unlock()
	return h.json.Handle(ctx, r)
}

// TestLogDurationsHaveUnits: the line a gateway request writes gives its
// durations with a unit — a number in a key ending _ms — never as a
// time.Duration, which the JSON handler writes as a bare count of
// nanoseconds.
func TestLogDurationsHaveUnits(t *testing.T) {
	t.Parallel()
	b, _ := manualKey(t)
	var (
		mu    sync.Mutex
		attrs [][]slog.Attr
		out   bytes.Buffer
	)
	b.gw.cfg.Logger = slog.New(recordHandler{mu: &mu, attrs: &attrs, json: slog.NewJSONHandler(&out, nil)})
	if resp, body := b.do(t, "POST", "/v1/chat/completions", chatBody("logged", 5, ""), nil); status(resp) != 200 {
		t.Fatalf("request: %d %s", status(resp), body)
	}
	// A second request cannot be admitted within its max wait: it waited.
	if resp, body := b.do(t, "POST", "/v1/chat/completions", chatBody("logged again", 5, ""), map[string]string{MaxWaitHeader: "1ms"}); status(resp) != 429 {
		t.Fatalf("second request: %d %s", status(resp), body)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(attrs) < 2 {
		t.Fatalf("%d log lines, want one per request", len(attrs))
	}
	for i, as := range attrs {
		for _, a := range as {
			if a.Value.Kind() == slog.KindDuration {
				t.Errorf("line %d: %s is a time.Duration (%v), written as bare nanoseconds in JSON", i, a.Key, a.Value)
			}
		}
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if m["msg"] != "chat" {
			continue
		}
		for _, k := range []string{"waited_ms", "took_ms"} {
			if _, ok := m[k].(float64); !ok {
				t.Errorf("line %s: %s is %v, want a number of milliseconds", l, k, m[k])
			}
		}
		for _, k := range []string{"waited", "took"} {
			if v, ok := m[k]; ok {
				t.Errorf("line %s: %s=%v has no unit", l, k, v)
			}
		}
	}
}
