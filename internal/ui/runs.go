package ui

import (
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/httpapi"
	"github.com/sluice-dev/sluice/internal/httperr"
	"github.com/sluice-dev/sluice/run"
)

type runsView struct {
	// The filters as given, by query parameter.
	Function, Status, EventKey, Reason, Since, Until, Limit string
	Statuses                                                []run.State
	Error                                                   string
	Runs                                                    []runRow
	Versions                                                []versionView // the notice of other versions' runs
}

type runRow struct {
	run.Summary
	Duration time.Duration
}

func (h *Handler) runs(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	v := runsView{Function: q.Get("function"), Status: q.Get("status"), EventKey: q.Get("event_key"), Reason: q.Get("reason"),
		Since: q.Get("since"), Until: q.Get("until"), Limit: q.Get("limit"), Statuses: engine.RunStates}
	var err error
	if v.Versions, err = h.otherVersions(r.Context()); err != nil {
		return err
	}
	// The search and the runs are on the app's clock, as the Engine
	// takes and shows them.
	now := h.cfg.AppNow()
	f, err := httpapi.ParseRunFilter(q, now)
	if err == nil {
		var runs []run.Summary
		if runs, err = h.cfg.Engine.Runs(r.Context(), f); err == nil {
			for _, s := range runs {
				v.Runs = append(v.Runs, runRow{Summary: s, Duration: runDuration(s, now)})
			}
		}
	}
	if err != nil {
		// A filter the engine refuses is shown with the form, to fix.
		if httperr.Status(err) != http.StatusBadRequest {
			return err
		}
		v.Error = err.Error()
		h.render(w, r, http.StatusBadRequest, "runs", "Runs", "runs", v)
		return nil
	}
	h.renderLive(w, r, "runs", "Runs", "runs", v)
	return nil
}

// runDuration is how long s ran: to its end, or to now while it runs.
func runDuration(s run.Summary, now time.Time) time.Duration {
	if s.StartedAt.IsZero() {
		return 0
	}
	end := s.EndedAt
	if end.IsZero() {
		if s.Status.Ended() {
			return 0
		}
		end = now
	}
	return max(end.Sub(s.StartedAt), 0)
}

type runView struct {
	*engine.RunDetail
	Duration   time.Duration
	EventData  string
	OutputText string
	Steps      []stepView
	CanCancel  bool
	CanRerun   bool
	// CanRerunFrom: the run has ended, so it can be re-run from any of its
	// steps; CanReplay: its event is recorded, so it can be sent again.
	CanRerunFrom, CanReplay bool
	History                 historyView
}

// stepView is a step with its place on the run's timeline (out of 1000).
type stepView struct {
	engine.StepView
	OutputText string
	X, W       float64
	Y          int
}

func (h *Handler) run(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	d, err := h.cfg.Engine.RunDetail(r.Context(), id, h.cfg.OutputLimit)
	if err != nil {
		return err
	}
	now := h.cfg.AppNow()
	v := runView{RunDetail: d, Duration: runDuration(d.Summary, now),
		CanCancel:    !d.Status.Ended(),
		CanRerun:     d.Status == run.Failed || d.Status == run.Cancelled || d.Status == run.TimedOut,
		CanRerunFrom: d.Status.Ended(),
		CanReplay:    d.Event != nil,
		History:      newHistoryView(d.History(), now)}
	if d.Event != nil && len(d.Event.Data) > 0 {
		v.EventData = fmtJSON(d.Event.Data)
	}
	if len(d.Output) > 0 {
		v.OutputText = fmtJSON(d.Output)
	}
	// The timeline runs from the run's start (or the first step's) to its
	// end (or the last step's, or now).
	t0, t1 := d.StartedAt, d.EndedAt
	if t0.IsZero() {
		t0 = d.CreatedAt
	}
	if t1.IsZero() {
		t1 = now
	}
	for _, s := range d.Steps {
		if !s.StartedAt.IsZero() && s.StartedAt.Before(t0) {
			t0 = s.StartedAt
		}
		if s.EndedAt.After(t1) {
			t1 = s.EndedAt
		}
	}
	span := t1.Sub(t0)
	for i, s := range d.Steps {
		sv := stepView{StepView: s, Y: i * 22}
		if len(s.Output) > 0 {
			sv.OutputText = fmtJSON(s.Output)
		}
		if span > 0 && !s.StartedAt.IsZero() {
			end := s.EndedAt
			if end.IsZero() {
				end = t1
			}
			sv.X = clamp(float64(s.StartedAt.Sub(t0))/float64(span)*1000, 0, 998)
			sv.W = clamp(float64(end.Sub(s.StartedAt))/float64(span)*1000, 2, 1000-sv.X)
		}
		v.Steps = append(v.Steps, sv)
	}
	title := "Run " + shorten(id, 64)
	if d.Status.Ended() {
		h.render(w, r, http.StatusOK, "run", title, "runs", v)
	} else {
		h.renderLive(w, r, "run", title, "runs", v)
	}
	return nil
}

func clamp(v, lo, hi float64) float64 { return min(max(v, lo), hi) }

// timelineHeight is the height of a run's timeline of n steps.
func timelineHeight(n int) int { return max(n, 1) * 22 }

func (h *Handler) cancel(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := h.cfg.Engine.Cancel(r.Context(), id); err != nil {
		return err
	}
	http.Redirect(w, r, "/runs/"+url.PathEscape(id), http.StatusSeeOther)
	return nil
}

// rerun re-runs the run from the step its form's from_step names (the
// step's number, from 1, or its name), or from the first step that did
// not complete.
func (h *Handler) rerun(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	var newID string
	var err error
	if from := r.FormValue("from_step"); from != "" {
		newID, err = h.cfg.Engine.RerunFrom(r.Context(), id, from)
	} else {
		newID, err = h.cfg.Engine.Rerun(r.Context(), id)
	}
	if err != nil {
		return err
	}
	return toRun(w, r, newID, "re-run")
}

// replay sends the run's event again under a new ID and shows the run it
// started.
func (h *Handler) replay(w http.ResponseWriter, r *http.Request) error {
	rep, err := h.cfg.Engine.Replay(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	return toRun(w, r, rep.RunID, "replay")
}

// toRun sends the browser to the page of run id, which what started.
func toRun(w http.ResponseWriter, r *http.Request, id, what string) error {
	if id == "" {
		return fmt.Errorf("the engine started a %s without an ID", what)
	}
	http.Redirect(w, r, "/runs/"+url.PathEscape(id), http.StatusSeeOther)
	return nil
}
