package httpapi

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/httperr"
	"github.com/sluice-dev/sluice/run"
)

// MaxRunsLimit bounds the limit of a listing of runs.
const MaxRunsLimit = 1000

// RunFilterParams are the query parameters ParseRunFilter reads, in the
// order the runs page's form shows them.
var RunFilterParams = []string{"function", "status", "event_key", "reason", "since", "until", "limit"}

// ParseRunFilter reads a search of runs from the query parameters of
// GET /v1/runs and of the runs page, which take the same words: function,
// status, event_key (an event's ID or idempotency key), reason (text of
// why runs failed, timed out or were cancelled), since and until (each an
// RFC 3339 time or a duration back from now, now being the app's clock,
// which the engine searches by) and limit (1 to 1000). An error is a 400
// that names the parameter.
func ParseRunFilter(q url.Values, now time.Time) (engine.RunFilter, error) {
	f := engine.RunFilter{Function: q.Get("function"), Status: run.State(q.Get("status")), EventKey: q.Get("event_key"), Reason: q.Get("reason")}
	if f.Status != "" && !slices.Contains(engine.RunStates, f.Status) {
		return f, httperr.BadRequest(fmt.Errorf("status %s is not one of %s", engine.Quote(string(f.Status)), engine.StatesText()))
	}
	var err error
	if f.Since, err = parseWhen("since", q.Get("since"), now); err != nil {
		return f, err
	}
	if f.Until, err = parseWhen("until", q.Get("until"), now); err != nil {
		return f, err
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && f.Until.Before(f.Since) {
		return f, httperr.BadRequest(fmt.Errorf("until %s is before since %s", engine.Quote(q.Get("until")), engine.Quote(q.Get("since"))))
	}
	for _, p := range []struct {
		name, v string
		max     int
	}{{"event_key", f.EventKey, engine.MaxEventKeyBytes}, {"reason", f.Reason, engine.MaxReasonBytes}} {
		if len(p.v) > p.max {
			return f, httperr.BadRequest(fmt.Errorf("%s of %d bytes is over the limit of %d", p.name, len(p.v), p.max))
		}
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxRunsLimit {
			return f, httperr.BadRequest(fmt.Errorf("limit %s: want 1 to %d", engine.Quote(s), MaxRunsLimit))
		}
		f.Limit = n
	}
	return f, nil
}

// parseWhen reads the time parameter name: an RFC 3339 time or a
// positive duration back from now; "" is no time.
func parseWhen(name, s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		// The zero time means no bound to the search, and no run is older
		// than 1970: a time before then is 1970, so that until=0001-01-01
		// finds no run instead of every run.
		return later(t, time.Unix(0, 0)), nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, httperr.BadRequest(fmt.Errorf("%s %s is neither an RFC 3339 time nor a duration like 1h", name, engine.Quote(s)))
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if a.Before(b) {
		return b
	}
	return a
}
