package sluice

import (
	"cmp"
	"context"
	"encoding/json"
	"sync"
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
//
// A plan simulates the key's coming days, which takes about a second at a
// million items: a plan is reused for planEvery, and one older than that
// is shown while the next is made in the background, so only the first
// visit waits for one.
func (a *App) plan(ctx context.Context) (*plan.Plan, error) {
	c := &a.plans
	c.mu.Lock()
	if c.made.IsZero() {
		c.mu.Unlock()
		p, err := a.makePlan(ctx)
		c.mu.Lock()
		if ctx.Err() == nil { // a visit that left does not cache what it cut short
			c.p, c.err, c.made = p, err, time.Now()
		}
		c.mu.Unlock()
		return p, err
	}
	p, err := c.p, c.err
	if time.Since(c.made) >= cmp.Or(c.every, planEvery) && !c.making {
		c.making = true
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			p, err := a.makePlan(ctx)
			c.mu.Lock()
			c.p, c.err, c.made, c.making = p, err, time.Now(), false
			c.mu.Unlock()
		}()
	}
	c.mu.Unlock()
	return p, err
}

// planEvery is how long a plan is shown before the next is made.
const planEvery = time.Minute

// planCache is the last plan made, and whether the next is being made.
type planCache struct {
	mu     sync.Mutex
	p      *plan.Plan
	err    error
	made   time.Time // zero: none yet
	making bool
	every  time.Duration // 0: planEvery
}

// makePlan plans the running configuration now (see plan).
func (a *App) makePlan(ctx context.Context) (*plan.Plan, error) {
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
	sc, notes, err := plan.Observed(ctx, a.st, k, a.e.Now())
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
