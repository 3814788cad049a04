package sluice

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/backfill"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/httpapi"
	"github.com/sluice-dev/sluice/run"
)

// DeclaredInYAML marks the function or backfill named id as a job of a
// YAML file (package jobs calls it), so that GET /v1/functions and the
// dashboard say where it was declared. Call it before Start.
func (a *App) DeclaredInYAML(id string) {
	if a.yaml == nil {
		a.yaml = map[string]bool{}
	}
	a.yaml[id] = true
}

// functions lists every registered function and backfill with its trigger,
// flow, limits and last run, by name: GET /v1/functions and the
// dashboard's functions page.
func (a *App) functions(ctx context.Context) ([]httpapi.Function, error) {
	backfills := map[string]run.Backfill{}
	for _, b := range a.backfills.Settings() {
		backfills[backfill.FunctionID(b.ID)] = b
	}
	fns := a.e.Functions()
	slices.SortFunc(fns, func(x, y *engine.Function) int { return strings.Compare(x.ID, y.ID) })
	out := make([]httpapi.Function, 0, len(fns))
	for _, f := range fns {
		v := httpapi.Function{Name: f.ID, Kind: "function", Declared: "go", Flow: cmp.Or(f.Flow, f.ID), Provider: f.Provider,
			Trigger: httpapi.Trigger{Event: f.Event, Cron: f.Cron}, Limits: limitsOf(f.Function)}
		if b, ok := backfills[f.ID]; ok {
			source := "pending"
			if b.PendingSQL != "" {
				source = "pending_sql"
			}
			v.Kind, v.Flow, v.Provider = "backfill", cmp.Or(b.Flow, b.ID), b.Provider
			// Its event is the backfill's own, sent by its polls: the
			// source is what starts its work.
			v.Trigger = httpapi.Trigger{Backfill: &httpapi.BackfillTrigger{Source: source, After: b.After, Poll: cmp.Or(b.Poll, backfill.DefaultPoll).String()}}
			if a.yaml[b.ID] {
				v.Declared = "yaml"
			}
		} else if a.yaml[f.ID] {
			v.Declared = "yaml"
		}
		v.FlowWeight, v.FlowPriority = 1, 0
		if i := slices.IndexFunc(a.cfg.Flows, func(fc governor.FlowConfig) bool { return fc.Name == v.Flow }); i >= 0 {
			v.FlowWeight, v.FlowPriority = cmp.Or(a.cfg.Flows[i].Weight, 1), a.cfg.Flows[i].Priority
		}
		runs, err := a.e.Runs(ctx, engine.RunFilter{Function: f.ID, Limit: 1})
		if err != nil {
			return nil, fmt.Errorf("last run of %s: %w", f.ID, err)
		}
		if len(runs) > 0 {
			r := runs[0]
			v.LastRun = &httpapi.LastRun{ID: r.ID, Status: string(r.Status), CreatedAt: r.CreatedAt.UTC(), Error: r.Error}
		}
		out = append(out, v)
	}
	return out, nil
}

// limitsOf is a function's limits as the list shows them.
func limitsOf(f run.Function) httpapi.Limits {
	l := httpapi.Limits{Priority: f.Priority, Retries: f.Retries}
	switch {
	case f.Retries == run.NoRetries:
		l.Retries = 0
	case f.Retries == 0:
		l.Retries = 3
	}
	if f.Timeout > 0 {
		l.Timeout = f.Timeout.String()
	}
	for _, c := range f.Concurrency {
		l.Concurrency = append(l.Concurrency, httpapi.Concurrency{Limit: c.Limit, Key: c.Key, PerWorker: c.PerWorker})
	}
	if t := f.Throttle; t != nil {
		l.Throttle = &httpapi.PeriodLimit{Limit: t.Limit, Period: t.Period.String(), Key: t.Key}
	}
	if r := f.RateLimit; r != nil {
		l.RateLimit = &httpapi.PeriodLimit{Limit: r.Limit, Period: r.Period.String(), Key: r.Key}
	}
	return l
}
