package sluice

import (
	"context"
	"encoding/json"
	"time"

	"github.com/sluice-dev/sluice/internal/plan"
)

// plan is the plan of the running configuration, for the dashboard's Plan
// page, which shows one key's: the first provider's, the key functions and
// backfills call unless they name another. Its flows are the ones this app
// configures on that key — the configuration Start records, read the way
// `sluice plan --db` reads the one last recorded — and the database gives
// their last day of calls, samples and backlogs, planned with the
// command's default options. With no provider, or no flow and no call on
// the key, its error is a *plan.NothingError.
func (a *App) plan(ctx context.Context) (*plan.Plan, error) {
	if len(a.cfg.Providers) == 0 {
		return nil, &plan.NothingError{Reason: "the app has no LLM provider"}
	}
	config, err := json.Marshal(a.effectiveConfig())
	if err != nil {
		return nil, err
	}
	k, err := plan.AppKey(config, a.first)
	if err != nil {
		return nil, err
	}
	sc, notes, err := plan.Observed(ctx, a.st, k, time.Now())
	if err != nil {
		return nil, err
	}
	p, err := plan.Make(ctx, sc, plan.Options{})
	if err != nil {
		return nil, err
	}
	p.Warnings = append(p.Warnings, notes...)
	return p, nil
}
