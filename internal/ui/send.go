package ui

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/httperr"
	"github.com/sluice-dev/sluice/run"
)

type sendView struct {
	SendOn bool
	// Events are the event names the app's functions are triggered by,
	// sorted: the form suggests them. EventsKnown says the sender can
	// list them.
	Events       []string
	EventsKnown  bool
	Name, ID     string
	Data         string
	MaxDataBytes int64
	Error        string
	Sent         []run.Sent // what the event started, after a send
	SentName     string
}

func (h *Handler) sendForm(w http.ResponseWriter, r *http.Request) error {
	h.render(w, r, http.StatusOK, "send", "Send an event", "send", h.sendView(sendView{}))
	return nil
}

// eventLister is a Sender that can say which events its functions are
// triggered by, as the engine can.
type eventLister interface {
	Functions() []*engine.Function
}

// sendView fills v's fields that come from the dashboard: whether it
// sends, the size bound, the events the functions listen to.
func (h *Handler) sendView(v sendView) sendView {
	v.SendOn, v.MaxDataBytes = h.cfg.Sender != nil, h.cfg.MaxEventBytes
	if l, ok := h.cfg.Sender.(eventLister); ok {
		v.EventsKnown = true
		seen := map[string]bool{}
		for _, f := range l.Functions() {
			// sluice's own events (a backfill's next run) are not a
			// client's to send.
			if f.Event != "" && !seen[f.Event] && !strings.HasPrefix(f.Event, engine.ReservedEventPrefix) {
				seen[f.Event] = true
				v.Events = append(v.Events, f.Event)
			}
		}
		slices.Sort(v.Events)
	}
	return v
}

// send sends the form's event and shows what it started; an event that
// cannot be sent is shown again with why.
func (h *Handler) send(w http.ResponseWriter, r *http.Request) error {
	f := r.PostForm
	v := h.sendView(sendView{Name: f.Get("name"), ID: f.Get("id"), Data: f.Get("data")})
	sent, err := h.sendEvent(r, v)
	if err != nil {
		status := httperr.Status(err)
		if status == http.StatusInternalServerError {
			return err
		}
		v.Error = err.Error()
		h.render(w, r, status, "send", "Send an event", "send", v)
		return nil
	}
	v.Sent, v.SentName = sent, v.Name
	h.render(w, r, http.StatusOK, "send", "Send an event", "send", v)
	return nil
}

func (h *Handler) sendEvent(r *http.Request, v sendView) ([]run.Sent, error) {
	if h.cfg.Sender == nil {
		return nil, httperr.NotFound(errors.New("sending events is not available on this dashboard"))
	}
	for _, field := range []struct{ name, value string }{{"name", v.Name}, {"id", v.ID}, {"data", v.Data}} {
		if !utf8.ValidString(field.value) {
			return nil, httperr.BadRequest(fmt.Errorf("event %q is not valid UTF-8", field.name))
		}
	}
	if n := int64(len(v.Data)); n > h.cfg.MaxEventBytes {
		return nil, httperr.TooLarge(fmt.Errorf("event \"data\" is %d bytes, over the limit of %d bytes (max event size)", n, h.cfg.MaxEventBytes))
	}
	ev := engine.Event{Name: v.Name, ID: v.ID}
	if data := bytes.TrimSpace([]byte(v.Data)); len(data) > 0 {
		if !json.Valid(data) {
			return nil, httperr.BadRequest(fmt.Errorf("event \"data\" is not valid JSON: %s", jsonProblem(data)))
		}
		ev.Data = data
	}
	// The name, the ID and that data is a JSON object are checked as the
	// API checks them, before anything is stored.
	if err := engine.CheckClientEvent(ev); err != nil {
		return nil, err
	}
	return h.cfg.Sender.Send(r.Context(), ev)
}

// jsonProblem says where data stops being JSON.
func jsonProblem(data []byte) string {
	var v any
	err := json.Unmarshal(data, &v)
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		return fmt.Sprintf("%s (at byte %d)", se.Error(), se.Offset)
	}
	if err != nil {
		return err.Error()
	}
	return "invalid"
}
