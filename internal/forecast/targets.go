package forecast

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/route"
	"github.com/sluice-dev/sluice/internal/yamlfile"
)

// Target is one place a scenario's calls can run: a provider key and
// model with limits of its own, a price and a budget, and the times it is
// down. A scenario that lists targets is routed: each flow's calls go to
// one of its route's targets at a time (Flow.Targets).
type Target struct {
	Name  string // unique among the targets; names it in the report
	Model string // the model the target's calls name
	// Provider is the simulated provider of the target: its profile,
	// windows, accounting, latency, default max_tokens, faults and
	// limits, each defaulting to the scenario's provider section but the
	// limits, which are the target's own.
	Provider Provider
	// Price is what the target's tokens cost, in money per million
	// tokens; zero: free.
	Price governor.Price
	// Budget is what the target's calls may cost, per day and per 30
	// days; zero: none. A budget needs a price.
	Budget governor.Budget
	// Outages are the times the target fails every call it gets, without
	// charging it.
	Outages []Outage
}

// OutageMode is how a target fails the calls it gets during an outage.
type OutageMode uint8

// The ways a target is down.
const (
	Outage5xx      OutageMode = iota // a 500 with the profile's body
	OutageOverload                   // a 503 (Anthropic: 529): the provider is overloaded
	Outage429                        // a 429 that names no limit, with a retry-after of a second
	OutageDown                       // no answer: the connection is refused
)

var outageNames = [...]string{"5xx", "overload", "429", "down"}

func (m OutageMode) String() string {
	if int(m) < len(outageNames) {
		return outageNames[m]
	}
	return fmt.Sprintf("outage(%d)", uint8(m))
}

// ParseOutageMode reads an outage's mode: 5xx, overload, 429 or down.
func ParseOutageMode(s string) (OutageMode, error) {
	for i, n := range outageNames {
		if s == n {
			return OutageMode(i), nil
		}
	}
	return 0, errors.New("is not 5xx, overload, 429 or down")
}

// Outage is a time a target fails every call it gets.
type Outage struct {
	Start    time.Duration // since the scenario's start
	Duration time.Duration
	Mode     OutageMode
}

// End is when the outage ends, since the scenario's start.
func (o Outage) End() time.Duration { return o.Start + o.Duration }

// outageLatency is how long a target in an outage takes to fail a call:
// an error page or a refused connection comes at once, but not at the very
// moment it was sent, so that a client retrying without pause does not
// spin at one instant.
const outageLatency = 100 * time.Millisecond

// outage returns the outage of t at d since the start, if t is down then.
func (t *Target) outage(d time.Duration) (Outage, bool) {
	for _, o := range t.Outages {
		if d >= o.Start && d < o.End() {
			return o, true
		}
	}
	return Outage{}, false
}

// MaxOutages bounds a target's outages.
const MaxOutages = 1000

// Routed reports whether s lists targets: each flow's calls are routed
// among them.
func (s *Scenario) Routed() bool { return len(s.Targets) > 0 }

// TargetIndex returns the index of the target named name, or -1.
func (s *Scenario) TargetIndex(name string) int {
	for i := range s.Targets {
		if s.Targets[i].Name == name {
			return i
		}
	}
	return -1
}

// RouteOf returns the indexes of f's targets, in its order of preference:
// those f names, or every target in the order listed.
func (s *Scenario) RouteOf(f *Flow) []int {
	if len(f.Targets) == 0 {
		out := make([]int, len(s.Targets))
		for i := range out {
			out[i] = i
		}
		return out
	}
	out := make([]int, 0, len(f.Targets))
	for _, name := range f.Targets {
		if i := s.TargetIndex(name); i >= 0 {
			out = append(out, i)
		}
	}
	return out
}

// validateTargets checks the targets and the flows' routes.
func (s *Scenario) validateTargets() error {
	if !s.Routed() {
		for i, f := range s.Flows {
			p := fmt.Sprintf("flows[%d]", i)
			switch {
			case len(f.Targets) > 0:
				return fieldErr(p+".targets", "names targets, but the scenario lists none (targets:)")
			case f.MaxWait != 0:
				return fieldErr(p+".max_wait", "is for a route, but the scenario lists no targets (targets:)")
			case f.Rule != route.Cheapest:
				return fieldErr(p+".rule", "is for a route, but the scenario lists no targets (targets:)")
			}
		}
		return nil
	}
	if len(s.Targets) > route.MaxTargets {
		return fieldErr("targets", "%d targets %s", len(s.Targets), above(route.MaxTargets))
	}
	if s.Provider.Limits != (governor.Limits{}) {
		return fieldErr("provider.limits", "with targets, each target has its own limits (targets[i].limits)")
	}
	if s.Provider.Unannounced != ([governor.NumLimits]bool{}) {
		return fieldErr("provider.unannounced", "is not for a scenario with targets")
	}
	index := map[string]int{}
	for i := range s.Targets {
		t := &s.Targets[i]
		p := fmt.Sprintf("targets[%d]", i)
		if strings.TrimSpace(t.Name) == "" {
			return fieldErr(p+".name", "missing or empty")
		}
		if j, dup := index[t.Name]; dup {
			return fieldErr(p+".name", "%q is already the name of targets[%d]", t.Name, j)
		}
		index[t.Name] = i
		if err := t.Provider.Validate(); err != nil {
			var e *yamlfile.Error
			if errors.As(err, &e) {
				e.Path = p + strings.TrimPrefix(e.Path, "provider")
			}
			return err
		}
		if t.Provider.DefaultMaxTokens > MaxOutputTokens {
			return fieldErr(p+".default_max_tokens", "%d %s", t.Provider.DefaultMaxTokens, above(MaxOutputTokens))
		}
		for _, l := range []governor.Limit{governor.MPD, governor.MPM} {
			if t.Provider.Limits[l] != 0 {
				return fieldErr(p+".limits."+l.String(), "is a budget of money: set it as budget: {day, month}")
			}
		}
		if t.Provider.Unannounced != ([governor.NumLimits]bool{}) {
			return fieldErr(p, "a target's limits are all announced")
		}
		for _, v := range []struct {
			key string
			x   float64
		}{{"input", t.Price.Input}, {"cached_input", t.Price.CachedInput}, {"output", t.Price.Output}} {
			if !(v.x >= 0 && v.x <= governor.MaxPrice) {
				return fieldErr(p+".price."+v.key, "%v is not between 0 and %v (money per million tokens)", v.x, float64(governor.MaxPrice))
			}
		}
		if err := validateBudget(p+".budget", t.Budget); err != nil {
			return err
		}
		if !t.Budget.IsZero() && t.Price.IsZero() {
			return fieldErr(p+".budget", "needs the target's price, to know what a call costs")
		}
		if len(t.Outages) > MaxOutages {
			return fieldErr(p+".outages", "%d outages %s", len(t.Outages), above(MaxOutages))
		}
		for j, o := range t.Outages {
			q := fmt.Sprintf("%s.outages[%d]", p, j)
			switch {
			case o.Start < 0 || o.Start >= s.Duration:
				return fieldErr(q+".start", "%s is not within the scenario's duration, %s", o.Start, s.Duration)
			case o.Duration <= 0:
				return fieldErr(q+".duration", "%s is not positive", o.Duration)
			case o.End() > s.Duration:
				return fieldErr(q+".duration", "the outage ends at %s, after the scenario's duration, %s", o.End(), s.Duration)
			case int(o.Mode) >= len(outageNames):
				return fieldErr(q+".mode", "%s %s", o.Mode, "is not 5xx, overload, 429 or down")
			}
		}
	}
	for i, f := range s.Flows {
		p := fmt.Sprintf("flows[%d]", i)
		if len(f.Targets) > route.MaxTargets {
			return fieldErr(p+".targets", "%d targets %s", len(f.Targets), above(route.MaxTargets))
		}
		seen := map[string]bool{}
		for j, name := range f.Targets {
			if _, ok := index[name]; !ok {
				return fieldErr(fmt.Sprintf("%s.targets[%d]", p, j), "%q names no target", name)
			}
			if seen[name] {
				return fieldErr(fmt.Sprintf("%s.targets[%d]", p, j), "%q is named twice", name)
			}
			seen[name] = true
		}
		if f.MaxWait < 0 || f.MaxWait > route.MaxDuration {
			return fieldErr(p+".max_wait", "%s is not between 0 and %s", f.MaxWait, route.MaxDuration)
		}
		if f.Rule != route.Cheapest && f.Rule != route.Ordered {
			return fieldErr(p+".rule", "is not cheapest or ordered")
		}
	}
	return nil
}

// validateBudget bounds b, a target's or a flow's budget at path p.
func validateBudget(p string, b governor.Budget) error {
	for _, v := range []struct {
		key string
		x   float64
	}{{"day", b.Day}, {"month", b.Month}} {
		if !(v.x >= 0 && v.x <= governor.MaxBudget) {
			return fieldErr(p+"."+v.key, "%v is not between 0 and %v (money; 0: no budget)", v.x, float64(governor.MaxBudget))
		}
		if v.x > 0 && v.x < 1/governor.Nano {
			return fieldErr(p+"."+v.key, "%v is less than a billionth, the least a budget counts", v.x)
		}
	}
	return nil
}

// money writes an amount of money in billionths as FormatMoney does; the
// report's money is in units.
func money(nano int64) float64 { return math.Round(float64(nano)/governor.Nano*1e6) / 1e6 }
