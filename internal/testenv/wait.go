package testenv

import (
	"testing"
	"time"
)

// Budget bounds a test's wait for an event: as long as a whole test may
// take, so that no load on the machine reaches it before the event comes.
const Budget = 2 * time.Minute

// WaitUntil polls cond every interval until it holds, failing t with what
// cond last said if it does not within Budget. It is for waiting on a state
// the test has set in motion, which a busy machine may make slow but not
// stop.
func WaitUntil(t testing.TB, every time.Duration, cond func() (ok bool, state string)) {
	t.Helper()
	WaitWithin(t, Budget, every, cond)
}

// WaitWithin is WaitUntil with a budget of its own, for a state that the
// limits the test sets take minutes of their windows to reach.
func WaitWithin(t testing.TB, budget, every time.Duration, cond func() (ok bool, state string)) {
	t.Helper()
	for deadline := time.Now().Add(budget); ; {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", budget, state)
		}
		time.Sleep(every) // poll interval: until cond holds (the loop's deadline bounds it)
	}
}
