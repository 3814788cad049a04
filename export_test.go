package sluice

import (
	"context"
	"time"
)

// SetPlanEvery sets how long a's dashboard shows a plan before it makes the
// next, for tests that watch a plan change.
func SetPlanEvery(a *App, d time.Duration) {
	a.plans.mu.Lock()
	defer a.plans.mu.Unlock()
	a.plans.every = d
}

// PlanMaking reports whether a's dashboard is making a plan in the
// background.
func PlanMaking(a *App) bool {
	a.plans.mu.Lock()
	defer a.plans.mu.Unlock()
	return a.plans.making
}

// HoldPlans makes a's background plans wait until their context ends
// before they are made, for tests that stop the app while one is made.
func HoldPlans(a *App) {
	a.plans.mu.Lock()
	defer a.plans.mu.Unlock()
	a.plans.hold = func(ctx context.Context) { <-ctx.Done() }
}
