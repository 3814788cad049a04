package ui

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/httperr"
	"github.com/sluice-dev/sluice/run"
)

// maxRunsLimit bounds the runs page's limit, as GET /v1/runs does.
const maxRunsLimit = 1000

type runsView struct {
	Function, Status, Since, Limit string // the filters as given
	Statuses                       []run.State
	Error                          string
	Runs                           []runRow
	Versions                       []versionView // the notice of other versions' runs
}

type runRow struct {
	run.Summary
	Duration time.Duration
}

// parseRunFilter reads the runs page's filters with the checks and the
// words of GET /v1/runs: function, status, since (an RFC 3339 time or a
// duration back from now) and limit (1 to 1000).
func parseRunFilter(q url.Values, now time.Time) (engine.RunFilter, error) {
	f := engine.RunFilter{Function: q.Get("function"), Status: run.State(q.Get("status"))}
	if f.Status != "" && !slices.Contains(engine.RunStates, f.Status) {
		return f, httperr.BadRequest(fmt.Errorf("status %q is not one of %s", shorten(string(f.Status), 64), engine.StatesText()))
	}
	if s := q.Get("since"); s != "" {
		if t, err := time.Parse(time.RFC3339, s); err == nil {
			f.Since = t
		} else if d, err := time.ParseDuration(s); err == nil && d > 0 {
			f.Since = now.Add(-d)
		} else {
			return f, httperr.BadRequest(fmt.Errorf("since %q is neither an RFC 3339 time nor a duration like 1h", shorten(s, 64)))
		}
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxRunsLimit {
			return f, httperr.BadRequest(fmt.Errorf("limit %q: want 1 to %d", shorten(s, 64), maxRunsLimit))
		}
		f.Limit = n
	}
	return f, nil
}

func (h *Handler) runs(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	v := runsView{Function: q.Get("function"), Status: q.Get("status"), Since: q.Get("since"), Limit: q.Get("limit"), Statuses: engine.RunStates}
	var err error
	if v.Versions, err = h.otherVersions(r.Context()); err != nil {
		return err
	}
	f, err := parseRunFilter(q, h.cfg.Now())
	if err == nil {
		var runs []run.Summary
		if runs, err = h.cfg.Engine.Runs(r.Context(), f); err == nil {
			for _, s := range runs {
				v.Runs = append(v.Runs, runRow{Summary: s, Duration: runDuration(s, h.cfg.Now())})
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
	now := h.cfg.Now()
	v := runView{RunDetail: d, Duration: runDuration(d.Summary, now),
		CanCancel: !d.Status.Ended(),
		CanRerun:  d.Status == run.Failed || d.Status == run.Cancelled || d.Status == run.TimedOut}
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

func (h *Handler) rerun(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	newID, err := h.cfg.Engine.Rerun(r.Context(), id)
	if err != nil {
		return err
	}
	if newID == "" {
		return errors.New("the engine started a re-run without an ID")
	}
	http.Redirect(w, r, "/runs/"+url.PathEscape(newID), http.StatusSeeOther)
	return nil
}
