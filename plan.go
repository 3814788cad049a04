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
	if time.Since(c.made) >= cmp.Or(c.every, planEvery) && !c.making && !c.closed {
		c.making = true
		life, hold := c.life(), c.hold
		c.wg.Go(func() {
			ctx, cancel := context.WithTimeout(life, time.Minute)
			defer cancel()
			if hold != nil {
				hold(ctx)
			}
			p, err := a.makePlan(ctx)
			c.mu.Lock()
			if ctx.Err() == nil {
				c.p, c.err, c.made = p, err, time.Now()
			}
			c.making = false
			c.mu.Unlock()
		})
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
	every  time.Duration         // 0: planEvery
	hold   func(context.Context) // tests: called before a plan is made in the background
	// The plan made in the background ends with the app: close cancels it
	// and waits for it, and none starts after.
	closed bool
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// life is the context background plans are made under. c.mu is held.
func (c *planCache) life() context.Context {
	if c.ctx == nil {
		c.ctx, c.cancel = context.WithCancel(context.Background())
	}
	return c.ctx
}

// close ends the plan being made in the background, if one is, and waits
// for it; no other starts after. Safe to call twice.
func (c *planCache) close() {
	c.mu.Lock()
	c.closed = true
	if c.cancel != nil {
		c.cancel()
	}
	c.mu.Unlock()
	c.wg.Wait()
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
