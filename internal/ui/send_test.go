package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/ui"
	"github.com/sluice-dev/sluice/run"
)

func TestSendEvent(t *testing.T) {
	t.Parallel()
	var sent []engine.Event
	s := &fakeSender{SendFunc: func(_ context.Context, ev engine.Event) ([]run.Sent, error) {
		if ev.Name == "nobody.listens" {
			return nil, fmt.Errorf("event %s: %w", ev.Name, engine.ErrNoFunction)
		}
		sent = append(sent, ev)
		return []run.Sent{
			{Function: "summarize", RunID: "summarize:doc-1", Status: "queued"},
			{Function: "index", RunID: "index:doc-1", Status: "existing"},
			{Function: "notify", Status: "dropped", Reason: "rate limit of 1 per 1m0s is full"},
		}, nil
	}}
	h := newUI(t, ui.Config{Sender: s, MaxEventBytes: 64}, nil)
	_, page := get(t, h, "/send")
	form := page.one(t, "form", classed("send"))
	for _, name := range []string{"name", "id", "data", "csrf"} {
		form.one(t, "field "+name, with("name", name))
	}
	_, body := do(t, h, req{path: "/send"})
	csrf := csrfOf(t, body)

	for _, tc := range []struct {
		name   string
		form   url.Values
		status int
		want   string
	}{
		{"no name", url.Values{"data": {`{}`}}, http.StatusBadRequest, `event "name": is missing or empty`},
		{"data not JSON", url.Values{"name": {"document.created"}, "data": {`{"a": }`}}, http.StatusBadRequest, `event "data" is not valid JSON: invalid character '}' looking for beginning of value (at byte 7)`},
		{"data not an object", url.Values{"name": {"document.created"}, "data": {`[1, 2]`}}, http.StatusBadRequest, `event "data": must be a JSON object`},
		{"data too large", url.Values{"name": {"document.created"}, "data": {`{"text": "` + strings.Repeat("x", 64) + `"}`}}, http.StatusRequestEntityTooLarge,
			`event "data" is 76 bytes, over the limit of 64 bytes`},
		{"data not UTF-8", url.Values{"name": {"document.created"}, "data": {"{\"a\": \"\xff\"}"}}, http.StatusBadRequest, `event "data" is not valid UTF-8`},
		{"no function listens", url.Values{"name": {"nobody.listens"}}, http.StatusNotFound, "no function"},
		{"sluice's own event", url.Values{"name": {"sluice/backfill/titles"}, "id": {"../next-9"}}, http.StatusBadRequest, `begins "sluice/", which only sluice's own events may`},
		{"data with a lone surrogate", url.Values{"name": {"document.created"}, "data": {`{"documentId": "\ud800"}`}}, http.StatusBadRequest, `escape \ud800 at byte 16, half of a UTF-16 surrogate pair`},
		{"an event", url.Values{"name": {"document.created"}, "id": {"doc-1"}, "data": {` {"documentId": "doc-1"} `}}, http.StatusOK, "Event document.created sent"},
		{"an event without data", url.Values{"name": {"document.created"}}, http.StatusOK, "Event document.created sent"},
	} {
		tc.form.Set("csrf", csrf)
		res, body := do(t, h, req{method: "POST", path: "/send", form: tc.form})
		page := parse(t, body)
		if res.StatusCode != tc.status || !strings.Contains(page.text(), tc.want) {
			t.Errorf("send %s: %d, want %d with %q:\n%s", tc.name, res.StatusCode, tc.status, tc.want, page.text())
			continue
		}
		if tc.status != http.StatusOK {
			// The form comes back as it was sent, to fix.
			if got := page.one(t, "data", with("name", "data")).text(); got != strings.TrimSpace(tc.form.Get("data")) && !strings.Contains(tc.name, "UTF-8") {
				t.Errorf("send %s: the form's data is %q", tc.name, got)
			}
			continue
		}
		for _, r := range []struct{ id, want string }{{"summarize:doc-1", "summarize summarize:doc-1 queued"}, {"index:doc-1", "index index:doc-1 existing"}} {
			row := page.one(t, "sent "+r.id, func(n node) bool { return n.Name == "tr" && n.Attrs["data-run"] == r.id })
			if row.text() != r.want {
				t.Errorf("sent row %q, want %q", row.text(), r.want)
			}
			if a := row.one(t, "link", func(n node) bool { return n.Name == "a" }); a.Attrs["href"] != "/runs/"+r.id {
				t.Errorf("sent run links to %q", a.Attrs["href"])
			}
		}
		hasText(t, "dropped", page, "notify — dropped rate limit of 1 per 1m0s is full")
	}
	if len(sent) != 2 || sent[0].Name != "document.created" || sent[0].ID != "doc-1" || string(sent[0].Data) != `{"documentId": "doc-1"}` || sent[1].Data != nil {
		t.Errorf("sent %+v", sent)
	}
	// A form larger than any event could be is refused before it is read.
	big := url.Values{"csrf": {csrf}, "name": {"x"}, "data": {strings.Repeat("x", 300<<10)}}
	if res, _ := do(t, h, req{method: "POST", path: "/send", form: big}); res.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("a form of 300 KiB: %d, want 413", res.StatusCode)
	}
}

func TestSendWithoutSender(t *testing.T) {
	t.Parallel()
	h := newUI(t, ui.Config{}, nil)
	_, page := get(t, h, "/send")
	hasText(t, "send page", page, "Sending events is not available")
	if n := page.all(classed("send")); len(n) != 0 {
		t.Errorf("a send form without a sender")
	}
}

// listeningSender is a sender whose functions listen to events, as the
// engine's do.
type listeningSender struct {
	fakeSender
	fns []*engine.Function
}

func (s *listeningSender) Functions() []*engine.Function { return s.fns }

// TestSendSuggestsTheEventsListenedTo: the form suggests the events the
// app's functions are triggered by, and says when none is.
func TestSendSuggestsTheEventsListenedTo(t *testing.T) {
	t.Parallel()
	fn := func(id, event string) *engine.Function {
		return &engine.Function{Function: run.Function{ID: id, Event: event}}
	}
	s := &listeningSender{fns: []*engine.Function{fn("title", ""), fn("summarize", "article.published"), fn("index", "article.published"), fn("purge", "article.deleted"), fn("backfill:titles", "sluice/backfill/titles")}}
	_, page := get(t, newUI(t, ui.Config{Sender: s}, nil), "/send")
	name := page.one(t, "name field", with("name", "name"))
	if name.Attrs["placeholder"] != "article.deleted" || name.Attrs["list"] != "event-names" {
		t.Errorf("the name field suggests %q (list %q), want an event a function listens to", name.Attrs["placeholder"], name.Attrs["list"])
	}
	var options []string
	for _, o := range page.one(t, "datalist", with("id", "event-names")).all(func(n node) bool { return n.Name == "option" }) {
		options = append(options, o.Attrs["value"])
	}
	if strings.Join(options, " ") != "article.deleted article.published" {
		t.Errorf("suggested events %q", options)
	}
	if strings.Contains(page.text(), "document.created") {
		t.Errorf("the page suggests an event no function listens to:\n%s", page.text())
	}

	_, page = get(t, newUI(t, ui.Config{Sender: &listeningSender{fns: []*engine.Function{fn("title", "")}}}, nil), "/send")
	hasText(t, "send page", page, "No function of this app is triggered by an event")
	if _, ok := page.one(t, "name field", with("name", "name")).Attrs["placeholder"]; ok {
		t.Error("the name field suggests an event though no function listens to one")
	}
}
