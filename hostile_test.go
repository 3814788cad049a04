package sluice_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/redact"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/llm"
	"github.com/sluice-dev/sluice/run"
)

type prompt struct {
	Say string `json:"say"`
}

// TestHostileUpstreamNeverShowsTheKey: a provider that echoes the key into
// every field of its errors, every header and its completions. The key
// shows in none of what the SDK's functions and a backfill leave: the
// errors a function gets, the runs' records, the API's answers, the
// dashboard's pages, the log, and any row of the database.
func TestHostileUpstreamNeverShowsTheKey(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		const key = testenv.HostileKey
		logs := &testenv.Buffer{}
		app, err := sluice.New(context.Background(), sluice.Config{
			DatabaseURL:  url,
			PollInterval: 20 * time.Millisecond,
			RetryBase:    time.Millisecond, RetryMax: 5 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			Providers: []sluice.Provider{{Name: "hostile", Limits: governor.Limits{governor.RPM: 100_000, governor.TPM: 10_000_000},
				LLM: llm.Config{BaseURL: testenv.HostileProvider(t), APIKey: key, Profile: llm.OpenAI}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = app.Stop(context.Background()) })

		var (
			mu       sync.Mutex
			callErrs strings.Builder // every error sluice.LLM returned, printed every way
		)
		err = sluice.Register(app, run.Function{ID: "ask", Event: "ask", Retries: 1},
			func(ctx *sluice.Context, ev sluice.Event[prompt]) (string, error) {
				resp, err := sluice.LLM(ctx, "call", &llm.ChatRequest{Model: "m", MaxTokens: 5,
					Messages: []llm.Message{{Role: "user", Content: ev.Data.Say}}})
				if err != nil {
					mu.Lock()
					fmt.Fprintf(&callErrs, "%v\n%+v\n%#v\n", err, err, err)
					mu.Unlock()
					return "", err
				}
				return resp.Text() + " " + resp.ID, nil
			})
		if err != nil {
			t.Fatal(err)
		}

		// A backfill of two items: the first is answered, the second's call
		// fails with the key in every field, every time.
		saved := make(chan string, 1)
		var once sync.Once
		err = sluice.RegisterBackfill(app, sluice.Backfill[string]{
			Backfill: run.Backfill{ID: "titles", MaxBatch: 1, InFlight: 1, Poll: 20 * time.Millisecond},
			Pending: func(_ context.Context, after string, limit int) ([]string, error) {
				var out []string
				for _, k := range []string{"a-fine", "b-say-400"} {
					if k > after && len(out) < limit {
						out = append(out, k)
					}
				}
				return out, nil
			},
			Load: func(_ context.Context, keys []string) (map[string]string, error) {
				out := map[string]string{}
				for _, k := range keys {
					out[k] = k
				}
				return out, nil
			},
			Request: func(items []sluice.Item[string]) (*llm.ChatRequest, error) {
				return &llm.ChatRequest{Model: "m", MaxTokens: 5, Messages: []llm.Message{{Role: "user", Content: items[0].Data}}}, nil
			},
			Save: func(_ context.Context, _ sluice.Tx, it sluice.Item[string], output string) error {
				once.Do(func() { saved <- output })
				return nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := app.Start(context.Background()); err != nil {
			t.Fatal(err)
		}

		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var seen strings.Builder // everything a user of the app can be shown
		want := map[string]run.State{"say-400": run.Failed, "say-quota": run.Failed, "say-500": run.Failed,
			"say-429-once": run.Completed, "hello": run.Completed}
		var ids []string
		for say, state := range want {
			sent, err := app.Send(ctx, "ask", say, prompt{Say: say})
			if err != nil {
				t.Fatal(err)
			}
			id := sent[0].RunID
			ids = append(ids, id)
			out, err := sluice.Result[string](ctx, app, id)
			fmt.Fprintf(&seen, "result of %s: %q %v\n", say, out, err)
			st, werr := app.Wait(ctx, id)
			if werr != nil || st.Status != state {
				t.Errorf("run %s: %s %q (%v), want %s", say, st.Status, st.Error, werr, state)
			}
			fmt.Fprintf(&seen, "run %s: %+v\n", say, st)
			if say == "say-400" && !strings.Contains(st.Error, redact.KeyMark) {
				t.Errorf("the 400's error lost the provider's fields rather than the key in them: %s", st.Error)
			}
		}

		select {
		case out := <-saved:
			fmt.Fprintf(&seen, "backfill output: %s\n", out)
		case <-ctx.Done():
			t.Fatal("the backfill saved nothing")
		}
		api := app.Handler(sluice.HandlerConfig{})
		get := func(h http.Handler, path string) string {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
			b, _ := io.ReadAll(rec.Body)
			return fmt.Sprintf("GET %s: %d\n%s\n", path, rec.Code, b)
		}
		for !strings.Contains(get(api, "/v1/runs?function=titles&status=failed"), `"titles`) {
			if ctx.Err() != nil {
				t.Fatal("no run of the backfill failed")
			}
			time.Sleep(20 * time.Millisecond) // poll interval: until a run of the backfill has failed (ctx's two minutes bound it)
		}
		runs := get(api, "/v1/runs?limit=1000")
		seen.WriteString(runs)
		for _, line := range strings.Split(runs, `"id":"`)[1:] {
			ids = append(ids, line[:strings.IndexByte(line, '"')])
		}
		dash, err := app.Dashboard(sluice.DashboardConfig{})
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			seen.WriteString(get(api, "/v1/runs/"+id))
			seen.WriteString(get(dash, "/runs/"+id))
		}
		for _, page := range []string{"/", "/runs", "/flows", "/flows/titles"} {
			seen.WriteString(get(dash, page))
		}
		seen.WriteString(get(api, "/v1/flows"))

		mu.Lock()
		testenv.AssertNoKey(t, "an error sluice.LLM returned", callErrs.String(), key)
		mu.Unlock()
		testenv.AssertNoKey(t, "what the app shows", seen.String(), key)
		testenv.AssertNoKey(t, "the log", logs.String(), key)
		testenv.AssertNoKey(t, "the database", testenv.DatabaseText(t, url), key)
	})
}
