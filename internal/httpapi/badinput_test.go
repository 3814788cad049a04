package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/httpapi"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/run"
)

// badInput is what clients have sent that a database might answer in its
// own way: every case must get the same status and error from SQLite and
// PostgreSQL, never a 500 and never the database's words.
var badInput = []struct {
	name, method, path, body string
	status                   int
	says                     string
}{
	{"NUL in the event id", "POST", "/v1/events", `{"name":"doc/uploaded","id":"a\u0000b","data":{"documentId":"d"}}`, 400, `control character U+0000`},
	{"NUL in the idempotency key", "POST", "/v1/events", `{"name":"doc/uploaded","data":{"documentId":"a\u0000b"}}`, 400, `control character U+0000`},
	{"10 KB event id", "POST", "/v1/events", `{"name":"doc/uploaded","id":"` + strings.Repeat("i", 10240) + `","data":{"documentId":"d"}}`, 400, "10240 bytes is over the limit of 256"},
	{"10 KB idempotency key", "POST", "/v1/events", `{"name":"doc/uploaded","data":{"documentId":"` + strings.Repeat("k", 10240) + `"}}`, 400, "over the limit of 256"},
	{"numeric documentId", "POST", "/v1/events", `{"name":"doc/uploaded","data":{"documentId":42}}`, 400, "does not decode as the event type of function summarize"},
	{"object documentId", "POST", "/v1/events", `{"name":"doc/uploaded","data":{"documentId":{"a":1}}}`, 400, "must be a string or a number, not an object"},
	{"documentId also in another case", "POST", "/v1/events", `{"name":"doc/uploaded","data":{"documentId":"cs-a","DOCUMENTID":"cs-b"}}`, 400, `"documentId" is also written "DOCUMENTID"`},
	{"documentId only in another case", "POST", "/v1/events", `{"name":"doc/uploaded","data":{"DocumentId":"d1"}}`, 400, `"documentId" is written "DocumentId"`},
	{"empty documentId", "POST", "/v1/events", `{"name":"doc/uploaded","data":{"documentId":""}}`, 400, "is empty"},
	{"priority not an integer", "POST", "/v1/events", `{"name":"doc/uploaded","data":{"documentId":"d","priority":"high"}}`, 400, "must be an integer"},
	{"tenant an array", "POST", "/v1/events", `{"name":"doc/uploaded","data":{"documentId":"d","tenant":[1]}}`, 400, "concurrency key"},
	{"trailing garbage", "POST", "/v1/events", `{"name":"doc/uploaded","data":{"documentId":"d"}} xyz`, 400, "trailing data"},
	{"invalid UTF-8", "POST", "/v1/events", "{\"name\":\"doc/uploaded\",\"id\":\"\xff\"}", 400, "not valid UTF-8 (at byte 29)"},
	{"id a number", "POST", "/v1/events", `{"name":"doc/uploaded","id":7}`, 400, `event "id" must be a string`},
	{"data a string", "POST", "/v1/events", `{"name":"doc/uploaded","data":"x"}`, 400, "must be a JSON object"},
	{"name with a newline", "POST", "/v1/events", `{"name":"doc\nuploaded"}`, 400, "control character U+000A"},
	{"run id not UTF-8", "GET", "/v1/runs/%ff", "", 400, "run id: is not valid UTF-8"},
	{"run id with NUL", "GET", "/v1/runs/a%00b", "", 400, "control character U+0000"},
	{"10 KB run id", "GET", "/v1/runs/" + strings.Repeat("r", 10240), "", 400, "over the limit of 512"},
	{"cancel of a run id not UTF-8", "POST", "/v1/runs/%ff/cancel", "", 400, "not valid UTF-8"},
	{"rerun of a 10 KB run id", "POST", "/v1/runs/" + strings.Repeat("r", 10240) + "/rerun", "", 400, "over the limit of 512"},
	{"unknown run", "GET", "/v1/runs/summarize:nope", "", 404, "not found"},
	{"unknown function filter", "GET", "/v1/runs?function=%ff", "", 400, "not a registered function"},
	{"status filter", "GET", "/v1/runs?status=lost", "", 400, "not one of"},
	{"until filter", "GET", "/v1/runs?until=tomorrow", "", 400, `until "tomorrow" is neither an RFC 3339 time nor a duration`},
	{"until before since", "GET", "/v1/runs?since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z", "", 400, `until "2026-01-01T00:00:00Z" is before since`},
	{"10 KB event key", "GET", "/v1/runs?event_key=" + strings.Repeat("k", 10240), "", 400, "event_key of 10240 bytes is over the limit of 512"},
	{"NUL in the event key", "GET", "/v1/runs?event_key=a%00b", "", 400, "event_key: has the control character U+0000"},
	{"reason over its limit", "GET", "/v1/runs?reason=" + strings.Repeat("r", 300), "", 400, "reason of 300 bytes is over the limit of 256"},
	{"reason not UTF-8", "GET", "/v1/runs?reason=%ff", "", 400, "reason: is not valid UTF-8"},
	{"history of a 10 KB run id", "GET", "/v1/runs/" + strings.Repeat("r", 10240) + "/history", "", 400, "over the limit of 512"},
	{"history of an unknown run", "GET", "/v1/runs/summarize:nope/history", "", 404, "not found"},
	{"replay of an unknown run", "POST", "/v1/runs/summarize:nope/replay", "", 404, "not found"},
	{"rerun from a step of an unknown run", "POST", "/v1/runs/summarize:nope/rerun?from_step=2", "", 404, "not found"},
	{"rerun body not JSON", "POST", "/v1/runs/summarize:nope/rerun", "{", 400, "re-run body is not"},
	{"rerun from_step a list", "POST", "/v1/runs/summarize:nope/rerun", `{"from_step":[1]}`, 400, `from_step "[1]" is neither`},
	{"rerun from_step empty", "POST", "/v1/runs/summarize:nope/rerun", `{"from_step":""}`, 400, "from_step is empty"},
	{"rerun body with trailing data", "POST", "/v1/runs/summarize:nope/rerun", `{"from_step":1} garbage`, 400, "re-run body: trailing data"},
	{"rerun body over its bound", "POST", "/v1/runs/summarize:nope/rerun", `{"from_step":"` + strings.Repeat("s", 5000) + `"}`, 413, "re-run body is larger than the limit of 4096 bytes"},
	{"lone high surrogate in the event id", "POST", "/v1/events", `{"name":"doc/uploaded","id":"\ud800","data":{"documentId":"d"}}`, 400, `escape \ud800 at byte 29, half of a UTF-16 surrogate pair`},
	{"lone low surrogate in the idempotency key", "POST", "/v1/events", `{"name":"doc/uploaded","data":{"documentId":"x\uDC00"}}`, 400, `escape \uDC00 at byte 46`},
	{"high surrogate before a letter", "POST", "/v1/events", `{"name":"doc/uploaded","data":{"documentId":"\ud83dx"}}`, 400, "without its other half"},
	{"name in another case", "POST", "/v1/events", `{"name":"nobody","Name":"doc/uploaded","data":{"documentId":"d"}}`, 400, `event field "Name": write it "name", in lower case`},
	{"data in upper case", "POST", "/v1/events", `{"name":"doc/uploaded","DATA":{"documentId":"d"}}`, 400, `event field "DATA": write it "data"`},
	{"sluice's own event", "POST", "/v1/events", `{"name":"sluice/backfill/titles","id":"../../x/next-99"}`, 400, `begins "sluice/", which only sluice's own events may`},
	{"dropped of a function with NUL", "GET", "/v1/dropped?function=%00", "", 400, "function: has the control character U+0000"},
	{"dropped of a function not UTF-8", "GET", "/v1/dropped?function=%ff", "", 400, "function: is not valid UTF-8"},
	{"until the zero time, before since", "GET", "/v1/runs?since=2026-01-02T00:00:00Z&until=0001-01-01T00:00:00Z", "", 400, `until "0001-01-01T00:00:00Z" is before since`},
}

// TestBadInputSameOnBothDatabases sends the table to an engine on SQLite
// and one on PostgreSQL and expects the same answers from both.
func TestBadInputSameOnBothDatabases(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	answers := map[string][]string{}
	t.Cleanup(func() {
		if len(answers) == 2 && strings.Join(answers["sqlite"], "\n") != strings.Join(answers["postgres"], "\n") {
			t.Errorf("SQLite and PostgreSQL answer differently:\nsqlite:\n%s\npostgres:\n%s",
				strings.Join(answers["sqlite"], "\n"), strings.Join(answers["postgres"], "\n"))
		}
	})
	testenv.Databases(t, func(t *testing.T, url string) {
		logs := &testenv.Buffer{}
		e, err := engine.New(context.Background(), engine.Config{Store: testenv.OpenStore(t, url), PollInterval: 20 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Shutdown(5 * time.Second) })
		type doc struct {
			DocumentID string `json:"documentId"`
		}
		err = e.Register(&engine.Function{Function: run.Function{ID: "summarize", Event: "doc/uploaded", Idempotency: "documentId", Priority: "priority", Concurrency: []run.Concurrency{{Limit: 2, Key: "tenant"}}}, Decode: func(data json.RawMessage) error { var d doc; return json.Unmarshal(data, &d) }, Handler: func(r *engine.Run, ev engine.Event) (any, error) { return "ok", nil }})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Launch(context.Background()); err != nil {
			t.Fatal(err)
		}
		h := httpapi.New(httpapi.Config{Engine: e, Logger: slog.New(slog.NewTextHandler(logs, nil))})
		var got []string
		for _, tc := range badInput {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(tc.method, tc.path, bytes.NewReader([]byte(tc.body))))
			var body struct{ Error string }
			_ = json.Unmarshal(w.Body.Bytes(), &body)
			if w.Code != tc.status || !strings.Contains(body.Error, tc.says) {
				t.Errorf("%s: %d %q, want %d saying %q", tc.name, w.Code, body.Error, tc.status, tc.says)
			}
			if len(w.Body.Bytes()) > 1024 {
				t.Errorf("%s: an error of %d bytes repeats what the client sent", tc.name, w.Body.Len())
			}
			got = append(got, fmt.Sprintf("%s: %d %s", tc.name, w.Code, body.Error))
		}
		// Nothing of it reached the database: no run exists.
		runs, err := e.Runs(context.Background(), engine.RunFilter{})
		if err != nil || len(runs) != 0 {
			t.Errorf("after refused input: runs %v, %v; want none", runs, err)
		}
		// A good event still works, and its run is found by ID.
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", "/v1/events", strings.NewReader(`{"name":"doc/uploaded","data":{"documentId":"d1","priority":3,"tenant":"t"}}`)))
		if w.Code != http.StatusAccepted {
			t.Fatalf("a good event: %d %s", w.Code, w.Body)
		}
		// A pair of surrogate escapes is one character, and is taken.
		w = httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", "/v1/events", strings.NewReader(`{"name":"doc/uploaded","id":"\ud83d\ude00","data":{"documentId":"d\\ud800"}}`)))
		if w.Code != http.StatusAccepted || !strings.Contains(w.Body.String(), `d\\ud800`) {
			t.Fatalf("an event with a surrogate pair and an escaped backslash: %d %s", w.Code, w.Body)
		}
		// No run is older than the zero time: until then finds none.
		w = httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/v1/runs?until=0001-01-01T00:00:00Z", nil))
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"runs":[]`) {
			t.Errorf("runs until the zero time: %d %s, want none", w.Code, w.Body)
		}
		if logs.String() != "" {
			t.Errorf("the server logged errors for input it should have refused: %s", logs)
		}
		mu.Lock()
		answers[strings.TrimPrefix(t.Name(), "TestBadInputSameOnBothDatabases/")] = got
		mu.Unlock()
	})
}

// A 500 says where the log line is, never the error's own text.
func TestInternalErrorHidesCause(t *testing.T) {
	t.Parallel()
	logs := &testenv.Buffer{}
	fe := &fakeEngine{SendFunc: func(ev engine.Event) ([]run.Sent, error) {
		return nil, fmt.Errorf(`start run: ERROR: index row size 10264 exceeds btree version 4 maximum 2704 for index "workflow_status_pkey" (SQLSTATE 54000)`)
	}}
	h := httpapi.New(httpapi.Config{Engine: fe, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("POST", "/v1/events", strings.NewReader(`{"name":"x"}`)))
	if w.Code != http.StatusInternalServerError || strings.Contains(w.Body.String(), "btree") || !strings.Contains(w.Body.String(), "reference") {
		t.Fatalf("500 answer %d %s: want a reference and no database text", w.Code, w.Body)
	}
	var body struct{ Error string }
	_ = json.Unmarshal(w.Body.Bytes(), &body)
	ref := strings.Fields(strings.TrimPrefix(body.Error, "internal error (reference "))[0]
	if !strings.Contains(logs.String(), "ref="+ref) || !strings.Contains(logs.String(), "btree") {
		t.Fatalf("the log %q does not hold reference %s with the cause", logs, ref)
	}
}

// timeoutBody fails its read as a connection past its read deadline does.
type timeoutBody struct{}

func (timeoutBody) Read([]byte) (int, error) { return 0, timeoutError{} }

type timeoutError struct{}

func (timeoutError) Error() string   { return "read tcp 127.0.0.1:8080->127.0.0.1:50000: i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// A body that does not arrive in time is a 408 naming the server's body
// timeout, not the connection's addresses.
func TestSlowBodyNamesTheTimeout(t *testing.T) {
	t.Parallel()
	h := httpapi.New(httpapi.Config{Engine: &fakeEngine{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	for _, path := range []string{"/v1/events", "/v1/runs/summarize:x/rerun"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", path, io.NopCloser(timeoutBody{})))
		if w.Code != http.StatusRequestTimeout || !strings.Contains(w.Body.String(), "did not arrive within the server's body timeout (--body-timeout)") ||
			strings.Contains(w.Body.String(), "127.0.0.1") {
			t.Errorf("POST %s with a body past its deadline: %d %s", path, w.Code, w.Body)
		}
	}
}
