package governor

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// Usage holds a provider's reported usage to what the call could have used
// — output to what was reserved for it, input to InputFactor times its
// estimate and InputSlack, or the key's smallest minute allowance of input
// when that is more — and logs what it cut once per NoticeEvery.
func TestUsageIsBoundedByWhatTheCallCouldUse(t *testing.T) {
	t.Parallel()
	c := Cost{Requests: 1, Input: 100, Output: 50}
	for _, tc := range []struct {
		name   string
		limits Limits
		used   Cost
		want   Cost
		cut    []string
	}{
		{"within bounds", Limits{RPM: 600}, Cost{Input: 4000, Output: 50}, Cost{Input: 4000, Output: 50}, nil},
		{"input over the estimate's bound", Limits{RPM: 600}, Cost{Input: 1e9, Output: 5},
			Cost{Input: 8*100 + 4096, Output: 5}, []string{"input"}},
		{"input within a minute allowance", Limits{TPM: 100_000, ITPM: 60_000}, Cost{Input: 50_000, Output: 5},
			Cost{Input: 50_000, Output: 5}, nil},
		{"input over the smallest minute allowance", Limits{TPM: 100_000, ITPM: 60_000}, Cost{Input: 1e9, Output: 5},
			Cost{Input: 60_000, Output: 5}, []string{"input"}},
		{"output over what was reserved", Limits{RPM: 600}, Cost{Input: 90, Output: 1e9},
			Cost{Input: 90, Output: 50}, []string{"output"}},
		{"both", Limits{RPM: 600}, Cost{Input: MaxCost * 4, Output: MaxCost * 4},
			Cost{Input: 8*100 + 4096, Output: 50}, []string{"input", "output"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var log bytes.Buffer
			g := mustNew(t, Config{Key: "k", Limits: tc.limits, Logger: slog.New(slog.NewTextHandler(&log, nil))})
			for i := range 3 {
				now := at(time.Duration(i) * time.Second)
				r := mustReserve(t, g, now, "a", c)
				g.Advance(now)
				if got := in(g).Usage(now, r, tc.used); got != tc.want {
					t.Fatalf("call %d: usage %+v bounded to %+v, want %+v", i, tc.used, got, tc.want)
				}
				r.Cancel(now)
			}
			for _, part := range []string{"input", "output"} {
				want := 0
				for _, p := range tc.cut {
					if p == part {
						want = 1 // once for three calls: at most once per NoticeEvery
					}
				}
				msg := "cut the " + part + " tokens the provider reported for a call to what the call could have used"
				if got := strings.Count(log.String(), msg); got != want {
					t.Errorf("logged %d cuts of the %s, want %d:\n%s", got, part, want, log.String())
				}
			}
		})
	}
	// A reservation that is not admitted is left as given: settling it
	// does nothing.
	g := mustNew(t, Config{Key: "k", Limits: Limits{RPM: 1}, Logger: slog.New(slog.DiscardHandler)})
	mustReserve(t, g, t0, "a", c)
	g.Advance(t0)
	waiting := mustReserve(t, g, t0, "a", c)
	if got := in(g).Usage(t0, waiting, Cost{Input: 1e9}); got.Input != 1e9 {
		t.Errorf("a waiting call's usage was bounded to %+v", got)
	}
}
