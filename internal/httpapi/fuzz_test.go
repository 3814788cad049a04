package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"unicode/utf8"

	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/httpapi"
	"github.com/sluice-dev/sluice/run"
)

// fakeEngine records what the API passes on; its Func fields answer.
type fakeEngine struct {
	SendFunc          func(ev engine.Event) ([]run.Sent, error)
	OtherVersionsFunc func() ([]run.VersionRuns, error)
	ResumeVersionFunc func(from string) (run.VersionReport, error)
	CancelVersionFunc func(from string) (run.VersionReport, error)
}

var _ httpapi.Engine = (*fakeEngine)(nil)

func (f *fakeEngine) Send(_ context.Context, ev engine.Event) ([]run.Sent, error) {
	return f.SendFunc(ev)
}
func (f *fakeEngine) Runs(context.Context, engine.RunFilter) ([]run.Summary, error) {
	return nil, nil
}
func (f *fakeEngine) RunDetail(context.Context, string, int) (*engine.RunDetail, error) {
	return nil, engine.ErrRunNotFound
}
func (f *fakeEngine) Cancel(context.Context, string) error          { return engine.ErrRunNotFound }
func (f *fakeEngine) Rerun(context.Context, string) (string, error) { return "", engine.ErrRunNotFound }
func (f *fakeEngine) RerunFrom(context.Context, string, string) (string, error) {
	return "", engine.ErrRunNotFound
}
func (f *fakeEngine) RunHistory(context.Context, string) (*engine.RunHistory, error) {
	return nil, engine.ErrRunNotFound
}
func (f *fakeEngine) Replay(context.Context, string) (engine.Replayed, error) {
	return engine.Replayed{}, engine.ErrRunNotFound
}
func (f *fakeEngine) Dropped(context.Context, string, int) ([]engine.DroppedEvent, error) {
	return nil, nil
}
func (f *fakeEngine) AppVersion() string { return "current" }
func (f *fakeEngine) OtherVersions(context.Context) ([]run.VersionRuns, error) {
	return f.OtherVersionsFunc()
}
func (f *fakeEngine) ResumeVersion(_ context.Context, from string) (run.VersionReport, error) {
	return f.ResumeVersionFunc(from)
}
func (f *fakeEngine) CancelVersion(_ context.Context, from string) (run.VersionReport, error) {
	return f.CancelVersionFunc(from)
}

// FuzzPostEvent: whatever a client posts, the API answers 202, 400 or 413,
// never 5xx; it passes an event on only when the body is exactly one JSON
// object with a name, and passes it on as sent.
func FuzzPostEvent(f *testing.F) {
	for _, s := range []string{
		`{"name":"doc/uploaded","id":"e1","data":{"documentId":"d1"}}`,
		`{"name":"doc/uploaded","data":null}`,
		`{"name":"x"} {"name":"y"}`,
		`{"name":"x"}garbage`,
		`{"name":"","data":{}}`,
		`{"name":"x","data":[1]}`,
		`{"name":"x","ts":"yesterday"}`,
		"{\"name\":\"\xff\"}",
		`[`, ``, `null`, `{"name":"x","data":{"a":` + string(bytes.Repeat([]byte("["), 300)),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var got *engine.Event
		fe := &fakeEngine{SendFunc: func(ev engine.Event) ([]run.Sent, error) {
			got = &ev
			return []run.Sent{{Function: "f", RunID: "f:" + ev.ID, Status: "started"}}, nil
		}}
		h := httpapi.New(httpapi.Config{Engine: fe, MaxEventBytes: 4096})
		w := httptest.NewRecorder()
		r := httptest.NewRequest("POST", "/v1/events", bytes.NewReader(body))
		h.ServeHTTP(w, r)
		switch w.Code {
		case http.StatusAccepted:
			if got == nil {
				t.Fatal("202 without an event passed on")
			}
			var one struct {
				Name string `json:"name"`
				ID   string `json:"id"`
			}
			dec := json.NewDecoder(bytes.NewReader(body))
			if err := dec.Decode(&one); err != nil || dec.More() {
				t.Fatalf("202 for a body that is not one JSON object: %q", body)
			}
			if got.Name == "" || got.Name != one.Name || got.ID != one.ID {
				t.Fatalf("passed on %+v for %q", got, body)
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			if got != nil {
				t.Fatalf("%d, yet the event was passed on: %q", w.Code, body)
			}
			var e struct{ Error string }
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error == "" {
				t.Fatalf("refusal without an error message: %q", w.Body.String())
			}
			if !utf8.ValidString(w.Body.String()) {
				t.Fatalf("refusal is not valid UTF-8: %q", w.Body.String())
			}
		default:
			t.Fatalf("status %d for %q: %s", w.Code, body, w.Body.String())
		}
	})
}

func TestEventBodyRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body string
		status     int
		want       string
	}{
		{"two objects", `{"name":"a"} {"name":"b"}`, 400, "trailing data"},
		{"garbage after", `{"name":"a"}x`, 400, "trailing data"},
		{"not JSON", `{"name":`, 400, "not valid JSON"},
		{"no name", `{"id":"1"}`, 400, "is missing or empty"},
		{"data not an object", `{"name":"a","data":[1]}`, 400, "must be a JSON object"},
		{"too large", `{"name":"a","data":{"x":"` + string(bytes.Repeat([]byte("x"), 5000)) + `"}}`, 413, "larger than the limit"},
		{"one object and white space", "{\"name\":\"a\"}\n\t ", 202, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fe := &fakeEngine{SendFunc: func(ev engine.Event) ([]run.Sent, error) { return nil, nil }}
			w := httptest.NewRecorder()
			httpapi.New(httpapi.Config{Engine: fe, MaxEventBytes: 4096}).ServeHTTP(w, httptest.NewRequest("POST", "/v1/events", bytes.NewReader([]byte(tc.body))))
			if w.Code != tc.status || !bytes.Contains(w.Body.Bytes(), []byte(tc.want)) {
				t.Fatalf("status %d %s; want %d naming %q", w.Code, w.Body.String(), tc.status, tc.want)
			}
		})
	}
}
