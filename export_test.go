package sluice

import "time"

// SetPlanEvery sets how long a's dashboard shows a plan before it makes the
// next, for tests that watch a plan change.
func SetPlanEvery(a *App, d time.Duration) {
	a.plans.mu.Lock()
	defer a.plans.mu.Unlock()
	a.plans.every = d
}
