package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/httpapi"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/run"
)

func setup(t *testing.T, dbURL, token string) (*httptest.Server, *engine.Engine) {
	t.Helper()
	e := launch(t, dbURL, &engine.Function{Function: run.Function{ID: "greet", Event: "user/signup", Retries: 1}, Handler: func(r *engine.Run, ev engine.Event) (any, error) {
		long, err := engine.Step(r, "long", func(context.Context) (string, error) { return strings.Repeat("x", 100), nil })
		if err != nil {
			return nil, err
		}
		return engine.Step(r, "fail-if-asked", func(context.Context) (int, error) {
			if strings.Contains(string(ev.Data), "fail") {
				return 0, engine.NonRetriable(errors.New("asked to fail"))
			}
			return len(long), nil
		})
	}})
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Engine: e, Token: token, MaxEventBytes: 256, OutputLimit: 10}))
	t.Cleanup(srv.Close)
	return srv, e
}

// launch opens an engine on dbURL with fast polling and millisecond
// backoff, registers fns and launches it; it stops when the test ends.
func launch(t *testing.T, dbURL string, fns ...*engine.Function) *engine.Engine {
	t.Helper()
	e, err := engine.New(context.Background(), engine.Config{Store: testenv.OpenStore(t, dbURL), PollInterval: 20 * time.Millisecond,
		RetryBase: time.Millisecond, RetryMax: time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Shutdown(5 * time.Second) })
	for _, f := range fns {
		if err := e.Register(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Launch(context.Background()); err != nil {
		t.Fatal(err)
	}
	return e
}

func do(t *testing.T, srv *httptest.Server, method, path, token, body string, out any) int {
	t.Helper()
	req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %s: %v", method, path, b, err)
		}
	}
	return resp.StatusCode
}

func TestAPI(t *testing.T) {
	t.Parallel()
	for _, db := range []string{"sqlite", "postgres"} {
		t.Run(db, func(t *testing.T) {
			t.Parallel()
			url := filepath.Join(t.TempDir(), "s.db")
			if db == "postgres" {
				url = testenv.Postgres(t)
			}
			srv, e := setup(t, url, "s3cret")

			var sent struct{ Runs []run.Sent }
			if code := do(t, srv, "POST", "/v1/events", "s3cret", `{"name":"user/signup","id":"e1","data":{"user":"a"}}`, &sent); code != 202 || len(sent.Runs) != 1 {
				t.Fatalf("post event: %d %+v", code, sent)
			}
			id := sent.Runs[0].RunID
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, _, err := e.Wait(ctx, id); err != nil {
				t.Fatal(err)
			}
			var rd engine.RunDetail
			if code := do(t, srv, "GET", "/v1/runs/"+escape(id), "s3cret", "", &rd); code != 200 {
				t.Fatalf("get run: %d", code)
			}
			if rd.Status != run.Completed || len(rd.Steps) != 2 || rd.Steps[0].Attempts != 1 || rd.Event == nil || rd.Event.ID != "e1" {
				t.Fatalf("run %+v", rd)
			}
			if st := rd.Steps[0]; st.OutputBytes != 102 || !strings.Contains(st.OutputTruncated, "output limit 10 bytes") {
				t.Fatalf("long output not cut with the limit named: %+v", st)
			}

			var list struct{ Runs []run.Summary }
			if code := do(t, srv, "GET", "/v1/runs?function=greet&status=completed&since=1h", "s3cret", "", &list); code != 200 || len(list.Runs) != 1 {
				t.Fatalf("list: %d %+v", code, list)
			}

			// A failed run can be re-run; a completed one cannot.
			do(t, srv, "POST", "/v1/events", "s3cret", `{"name":"user/signup","id":"e2","data":{"mode":"fail"}}`, &sent)
			failed := sent.Runs[0].RunID
			if st, _, _ := e.Wait(ctx, failed); st.Status != run.Failed {
				t.Fatalf("run %s: %s", failed, st.Status)
			}
			var rr map[string]string
			if code := do(t, srv, "POST", "/v1/runs/"+escape(failed)+"/rerun", "s3cret", "", &rr); code != 202 || rr["rerun_of"] != failed {
				t.Fatalf("rerun: %d %v", code, rr)
			}
			var e409 map[string]string
			if code := do(t, srv, "POST", "/v1/runs/"+escape(id)+"/rerun", "s3cret", "", &e409); code != 409 {
				t.Fatalf("rerun of a completed run: %d %v", code, e409)
			}

			for _, tc := range []struct {
				method, path, token, body string
				code                      int
				says                      string
			}{
				{"GET", "/v1/runs", "", "", 401, "bearer token"},
				{"GET", "/v1/runs", "wrong", "", 401, "bearer token"},
				{"POST", "/v1/events", "s3cret", `{"name":"user/signup","data":{"pad":"` + strings.Repeat("p", 300) + `"}}`, 413, "limit of 256 bytes"},
				{"POST", "/v1/events", "s3cret", `{"data":{}}`, 400, `"name": is missing`},
				{"POST", "/v1/events", "s3cret", `{"name":"x","data":[1]}`, 400, "JSON object"},
				{"POST", "/v1/events", "s3cret", `{"name":"nobody/listens"}`, 404, "no function"},
				{"GET", "/v1/runs?status=weird", "s3cret", "", 400, "not one of"},
				{"GET", "/v1/runs?since=yesterday", "s3cret", "", 400, "since"},
				{"GET", "/v1/runs/nope", "s3cret", "", 404, "not found"},
				{"POST", "/v1/runs/nope/cancel", "s3cret", "", 404, "not found"},
			} {
				var body map[string]string
				code := do(t, srv, tc.method, tc.path, tc.token, tc.body, &body)
				if code != tc.code || !strings.Contains(body["error"], tc.says) {
					t.Errorf("%s %s: %d %q, want %d saying %q", tc.method, tc.path, code, body["error"], tc.code, tc.says)
				}
				if strings.Contains(body["error"], "s3cret") {
					t.Errorf("%s %s: the token leaked into the response", tc.method, tc.path)
				}
			}
			_ = bytes.MinRead
		})
	}
}

func escape(id string) string { return url.PathEscape(id) }
