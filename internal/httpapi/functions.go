package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/sluice-dev/sluice/internal/httpjson"
)

// Function is one of the app's functions — a Go function, a backfill, or
// a job declared in YAML (each of which runs as one of the other two) —
// with what starts its runs, the flow and limits it runs under, and its
// last run: GET /v1/functions and the dashboard's functions page list
// them.
type Function struct {
	// Name is the function's ID, under which its runs are listed (a
	// backfill's is "backfill:" and its ID).
	Name string `json:"name"`
	// Kind is "function" or "backfill"; Declared is "go", or "yaml" for a
	// job of serve's configuration file.
	Kind     string  `json:"kind"`
	Declared string  `json:"declared"`
	Trigger  Trigger `json:"trigger"`
	// Flow is the governor flow its LLM calls draw on, with the flow's
	// weight and priority; Provider the provider or route they use ("" for
	// the first provider).
	Flow         string  `json:"flow"`
	FlowWeight   float64 `json:"flow_weight"`
	FlowPriority int     `json:"flow_priority"`
	Provider     string  `json:"provider,omitempty"`
	Limits       Limits  `json:"limits"`
	// LastRun is its latest run, absent when it has none.
	LastRun *LastRun `json:"last_run,omitempty"`
}

// Trigger is what starts a function's runs: an event, a schedule, or, for
// a backfill, its source of pending items polled every Poll (and, with
// After, the items another backfill saved).
type Trigger struct {
	Event    string           `json:"event,omitempty"`
	Cron     string           `json:"cron,omitempty"`
	Backfill *BackfillTrigger `json:"backfill,omitempty"`
}

// BackfillTrigger is a backfill's source of work.
type BackfillTrigger struct {
	// Source is "pending_sql" (a query on the app's database) or
	// "pending" (a Go function).
	Source string `json:"source"`
	After  string `json:"after,omitempty"`
	Poll   string `json:"poll"` // a Go duration
}

// Limits are a function's limits on its runs, as registered: Priority
// names the event field that orders queued runs ("" for none); Timeout is
// a Go duration ("" for none); Retries are a failing step's further tries.
type Limits struct {
	Concurrency []Concurrency `json:"concurrency,omitempty"`
	Throttle    *PeriodLimit  `json:"throttle,omitempty"`
	RateLimit   *PeriodLimit  `json:"rate_limit,omitempty"`
	Priority    string        `json:"priority,omitempty"`
	Retries     int           `json:"retries"`
	Timeout     string        `json:"timeout,omitempty"`
}

// Concurrency is a limit on runs executing at once: across all processes
// or per process (PerWorker), per value of Key when set.
type Concurrency struct {
	Limit     int    `json:"limit"`
	Key       string `json:"key,omitempty"`
	PerWorker bool   `json:"per_worker,omitempty"`
}

// PeriodLimit is Limit runs (a throttle) or events (a rate limit) per
// Period (a Go duration), per value of Key when set.
type PeriodLimit struct {
	Limit  int    `json:"limit"`
	Period string `json:"period"`
	Key    string `json:"key,omitempty"`
}

// LastRun is a function's latest run.
type LastRun struct {
	ID        string    `json:"id"`
	Status    string    `json:"status"`
	CreatedAt time.Time `json:"created_at"`
	Error     string    `json:"error,omitempty"`
}

// Functions lists the app's functions, ordered by name.
type Functions func(ctx context.Context) ([]Function, error)

func (a *api) functions(w http.ResponseWriter, r *http.Request) error {
	var fs []Function
	if a.cfg.Functions != nil {
		var err error
		if fs, err = a.cfg.Functions(r.Context()); err != nil {
			return err
		}
	}
	httpjson.Write(w, http.StatusOK, struct {
		Functions []Function `json:"functions"`
		httpjson.Clock
	}{nonNil(fs), a.clock()})
	return nil
}
