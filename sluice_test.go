package sluice_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/run"
)

func newApp(t *testing.T, cfg sluice.Config) *sluice.App {
	t.Helper()
	cfg.PollInterval = cmp.Or(cfg.PollInterval, 20*time.Millisecond)
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
		err := sluice.Register(app, run.Function{ID: "summarize-doc", Event: "doc/uploaded", Retries: 2, Idempotency: "event.data.documentId"},
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

// An event whose data writes a key the function reads in another case is
// refused, by Send and with a 400 by the API, before any run starts: sluice
// reads the key exactly while the typed data matches it ignoring case, so
// the run would be named by one document and fetch another, or not be
// named by its idempotency key at all. A key repeated exactly is read the
// same by both: the last.
func TestSendRefusesAKeyWrittenInAnotherCase(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		app := newApp(t, sluice.Config{DatabaseURL: url})
		err := sluice.Register(app, run.Function{ID: "summarize-doc", Event: "doc/uploaded", Idempotency: "event.data.documentId"},
			func(ctx *sluice.Context, ev sluice.Event[doc]) (string, error) { return ev.Data.DocumentID, nil })
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), testenv.Budget)
		defer cancel()
		if err := app.Start(ctx); err != nil {
			t.Fatal(err)
		}
		h := app.Handler(sluice.HandlerConfig{})
		post := func(body string) (int, string) {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/events", strings.NewReader(body)))
			return w.Code, w.Body.String()
		}
		for _, tc := range []struct{ data, says string }{
			{`{"documentId":"cs-a","DOCUMENTID":"cs-b"}`, `\"documentId\" is also written \"DOCUMENTID\"`},
			{`{"DocumentId":"d1"}`, `\"documentId\" is written \"DocumentId\"`},
			{`{"DOCUMENTID":"cs-b","documentId":"cs-a","documentID":"cs-c"}`, `\"documentId\" is also written \"DOCUMENTID\"`},
		} {
			code, body := post(`{"name":"doc/uploaded","data":` + tc.data + `}`)
			if code != http.StatusBadRequest || !strings.Contains(body, tc.says) || !strings.Contains(body, "send the key only as") {
				t.Errorf("data %s: %d %s, want 400 saying %s and what to send", tc.data, code, body, tc.says)
			}
			if sent, err := app.Send(ctx, "doc/uploaded", "", json.RawMessage(tc.data)); err == nil {
				t.Errorf("Send of data %s: %+v, want it refused", tc.data, sent)
			}
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/runs", nil))
		if strings.Contains(w.Body.String(), "summarize-doc") {
			t.Fatalf("refused events started runs: %s", w.Body)
		}

		code, body := post(`{"name":"doc/uploaded","data":{"documentId":"a","documentId":"b"}}`)
		var got struct{ Runs []run.Sent }
		if err := json.Unmarshal([]byte(body), &got); code != http.StatusAccepted || err != nil || len(got.Runs) != 1 {
			t.Fatalf("a key repeated exactly: %d %s", code, body)
		}
		if id := got.Runs[0].RunID; id != "summarize-doc:key:b" {
			t.Errorf("a key repeated exactly names run %s, want the last value's (summarize-doc:key:b)", id)
		}
		if out, err := sluice.Result[string](ctx, app, got.Runs[0].RunID); err != nil || out != "b" {
			t.Errorf("a key repeated exactly: the handler read %q, %v; want the last value (b)", out, err)
		}
	})
}

// Result gives a completed run's output typed, and a run that failed as a
// *RunError whose summary, and the step's *run.StepError, say why.
func TestResult(t *testing.T) {
	t.Parallel()
	app := newApp(t, sluice.Config{DatabaseURL: filepath.Join(t.TempDir(), "s.db")})
	type out struct {
		Words int    `json:"words"`
		Doc   string `json:"doc"`
	}
	var stepErr atomic.Pointer[run.StepError]
	err := sluice.Register(app, run.Function{ID: "count", Event: "doc", Retries: run.NoRetries},
		func(ctx *sluice.Context, ev sluice.Event[doc]) (out, error) {
			n, err := sluice.Step(ctx, "count", func(context.Context) (int, error) {
				if ev.Data.Text == "" {
					return 0, sluice.NonRetriable(errors.New("empty document"))
				}
				return len(ev.Data.Text), nil
			})
			var se *run.StepError
			if errors.As(err, &se) {
				stepErr.Store(se)
			}
			return out{Words: n, Doc: ev.Data.DocumentID}, err
		})
	if err != nil {
		t.Fatal(err)
	}
	if err := app.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ok, _ := app.Send(ctx, "doc", "ok", doc{DocumentID: "d1", Text: "hello"})
	bad, _ := app.Send(ctx, "doc", "bad", doc{DocumentID: "d2"})

	got, err := sluice.Result[out](ctx, app, ok[0].RunID)
	if err != nil || got != (out{Words: 5, Doc: "d1"}) {
		t.Fatalf("result of the completed run: %+v, %v; want {5 d1}", got, err)
	}
	_, err = sluice.Result[out](ctx, app, bad[0].RunID)
	var re *sluice.RunError
	if !errors.As(err, &re) || re.Run.Status != run.Failed || !strings.Contains(re.Run.Error, "empty document") {
		t.Fatalf("result of the failed run: %v; want a *RunError, failed, naming the cause", err)
	}
	se := stepErr.Load()
	if se == nil || se.Step != "count" || se.Class != run.Fatal || !se.Final || se.Attempt != 1 || se.Class.String() != "fatal" {
		t.Fatalf("step error %+v: want step count, fatal, final at attempt 1", se)
	}
	if _, err := sluice.Result[out](ctx, app, "count:nope"); !errors.Is(err, sluice.ErrRunNotFound) {
		t.Fatalf("result of an unknown run: %v, want ErrRunNotFound", err)
	}
}

// The errors a caller meets are the root's, named with errors.Is.
func TestErrorsCallersMeet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "s.db")
	app := newApp(t, sluice.Config{DatabaseURL: db})
	if err := sluice.Register(app, run.Function{ID: "f", Event: "e"}, func(*sluice.Context, sluice.Event[doc]) (int, error) { return 0, nil }); err != nil {
		t.Fatal(err)
	}
	if err := app.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := app.Send(ctx, "nobody.listens", "", nil); !errors.Is(err, sluice.ErrNoFunction) {
		t.Errorf("Send to no function: %v, want ErrNoFunction", err)
	}
	if _, err := app.Wait(ctx, "f:missing"); !errors.Is(err, sluice.ErrRunNotFound) {
		t.Errorf("Wait for no run: %v, want ErrRunNotFound", err)
	}
	if _, err := app.ResumeVersion(ctx, app.AppVersion()); !errors.Is(err, sluice.ErrSameVersion) {
		t.Errorf("ResumeVersion of the app's own version: %v, want ErrSameVersion", err)
	}
	if _, err := app.CancelVersion(ctx, app.AppVersion()); !errors.Is(err, sluice.ErrSameVersion) {
		t.Errorf("CancelVersion of the app's own version: %v, want ErrSameVersion", err)
	}
	// A second app with the same (default) executor on the same database.
	twin := newApp(t, sluice.Config{DatabaseURL: db})
	if err := sluice.Register(twin, run.Function{ID: "f", Event: "e"}, func(*sluice.Context, sluice.Event[doc]) (int, error) { return 0, nil }); err != nil {
		t.Fatal(err)
	}
	if err := twin.Start(ctx); !errors.Is(err, sluice.ErrExecutorRunning) {
		t.Errorf("Start of a second app with the same executor: %v, want ErrExecutorRunning", err)
	}
}

func TestRegisterRejectsBadConfig(t *testing.T) {
	t.Parallel()
	app := newApp(t, sluice.Config{DatabaseURL: filepath.Join(t.TempDir(), "s.db")})
	h := func(*sluice.Context, sluice.Event[struct{}]) (int, error) { return 0, nil }
	for _, tc := range []struct {
		name string
		cfg  run.Function
	}{
		{"no trigger", run.Function{ID: "a"}},
		{"bad retries", run.Function{ID: "a", Event: "e", Retries: -5}},
		{"unknown provider", run.Function{ID: "a", Event: "e", Provider: "nope"}},
		{"bad cron", run.Function{ID: "a", Cron: "every day"}},
	} {
		if err := sluice.Register(app, tc.cfg, h); err == nil {
			t.Errorf("%s: registered, want an error", tc.name)
		}
	}
	if _, err := app.Stats(context.Background(), ""); err == nil {
		t.Error("stats of an app without providers: want an error")
	}
}
