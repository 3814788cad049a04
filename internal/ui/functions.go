package ui

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/sluice-dev/sluice/internal/httpapi"
)

// functionsView is the functions page: every function, backfill and YAML
// job with its trigger, flow, limits and last run.
type functionsView struct {
	Configured bool
	Functions  []functionRow
}

type functionRow struct {
	httpapi.Function
	Trigger string // in words
	Limits  string // in words; "" for none
}

func (h *Handler) functions(w http.ResponseWriter, r *http.Request) error {
	v := functionsView{Configured: h.cfg.Functions != nil}
	if h.cfg.Functions != nil {
		fs, err := h.cfg.Functions(r.Context())
		if err != nil {
			return fmt.Errorf("list the functions: %w", err)
		}
		for _, f := range fs {
			v.Functions = append(v.Functions, functionRow{Function: f, Trigger: triggerText(f.Trigger), Limits: limitsText(f.Limits)})
		}
	}
	h.renderLive(w, r, "functions", "Functions", "functions", v)
	return nil
}

// triggerText says what starts a function's runs.
func triggerText(t httpapi.Trigger) string {
	var parts []string
	if t.Event != "" {
		parts = append(parts, "event "+t.Event)
	}
	if t.Cron != "" {
		parts = append(parts, "cron "+t.Cron)
	}
	if b := t.Backfill; b != nil {
		s := "its pending items (" + b.Source + "), polled every " + b.Poll
		if b.After != "" {
			s += ", after backfill " + b.After
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// limitsText lists a function's limits on its runs.
func limitsText(l httpapi.Limits) string {
	var parts []string
	for _, c := range l.Concurrency {
		s := fmt.Sprintf("concurrency %d", c.Limit)
		if c.PerWorker {
			s += " per process"
		}
		if c.Key != "" {
			s += " per " + c.Key
		}
		parts = append(parts, s)
	}
	period := func(what string, p *httpapi.PeriodLimit) {
		if p == nil {
			return
		}
		s := fmt.Sprintf("%s %d per %s", what, p.Limit, p.Period)
		if p.Key != "" {
			s += " per " + p.Key
		}
		parts = append(parts, s)
	}
	period("throttle", l.Throttle)
	period("rate limit", l.RateLimit)
	if l.Priority != "" {
		parts = append(parts, "priority from "+l.Priority)
	}
	parts = append(parts, fmt.Sprintf("%d retries", l.Retries))
	if l.Timeout != "" {
		parts = append(parts, "timeout "+l.Timeout)
	}
	return strings.Join(parts, ", ")
}
