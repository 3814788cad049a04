// Package scenario reads quota scenarios: one provider key with its limits
// and the flows (jobs) that share it, as the bench replays them in virtual time
// and the provider simulator serves them.
//
// The format is a contract with files written by others, so parsing is strict:
// an unknown key or a bad value is an error that names the key, its place
// ("flows[2].batchmax: unknown key (line 31)") and, for values, the value.
//
// Every size a scenario states is bounded (see the Max constants), so that
// the largest scenario that loads runs within a few GB: a scenario is input
// from others, and the bench must not grow without end on a typo.
package scenario

import (
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/num"
	"github.com/sluice-dev/sluice/llm"
)

// Scenario is one provider key and the flows that draw on it.
type Scenario struct {
	Name     string        // echoed in reports
	Duration time.Duration // virtual time to simulate; positive
	Seed     int64         // seeds every random choice; same seed, same report
	Provider Provider
	Flows    []Flow // at least one; names unique
}

// Provider is the simulated provider's behaviour: its wire format, how its
// windows count and how it settles charges.
type Provider struct {
	// Profile is which headers, error bodies and status codes the simulated
	// provider uses: one of llm.Profiles. Default llm.OpenAI.
	Profile llm.Profile
	// Window is how limits count over their period. Default governor.Rolling.
	Window governor.Window
	// Accounting is whether an admission charge stands or is corrected to
	// the real output when the response ends. Default
	// governor.ReserveAccounting.
	Accounting governor.Accounting
	// Latency is the mean response time; real times vary ±50 % uniformly.
	// Zero answers at once.
	Latency time.Duration
	// DefaultMaxTokens is what the provider reserves for a request that sets
	// no max_tokens. Default DefaultMaxTokens (1000).
	DefaultMaxTokens int64
	// Faults are the fractions of admitted requests that fail.
	Faults Faults
	// Limits holds the allowance of each limit; zero means unlimited.
	Limits governor.Limits
	// Unannounced marks limits of Limits that the provider enforces but no
	// policy is told of (as real providers sometimes enforce limits they do
	// not document): the simulated provider counts them, the policies'
	// configured limits (Announced) leave them out. Each must be a limit of
	// Limits. Default none.
	Unannounced [governor.NumLimits]bool
}

// Announced returns the limits a policy is told of: Limits without the
// unannounced ones.
func (p *Provider) Announced() governor.Limits {
	ls := p.Limits
	for _, l := range governor.AllLimits {
		if p.Unannounced[l] {
			ls[l] = 0
		}
	}
	return ls
}

// DefaultMaxTokens is what a provider reserves for a request without
// max_tokens when the scenario does not say.
const DefaultMaxTokens = 1000

// Bounds on a scenario. Load and Parse refuse a value beyond one, naming the
// key and the bound; Validate checks the same on a scenario built in code.
// Together they keep the largest scenario that loads within about 2 GB of
// memory in the bench (docs/bench.md).
const (
	// MaxFileBytes bounds a scenario file.
	MaxFileBytes = 1 << 20
	// MaxDuration bounds the simulated time: 366 days.
	MaxDuration = 366 * 24 * time.Hour
	// MaxFlows bounds the number of flows.
	MaxFlows = 100
	// MaxBacklog bounds one flow's backlog.
	MaxBacklog = 1_000_000
	// MaxArrivalsPerDay bounds one flow's arrivals per day (about 12 a second).
	MaxArrivalsPerDay = 1_000_000
	// MinArrivalsPerDay is the least positive arrivals per day (one item every
	// 100 days); 0 means none.
	MinArrivalsPerDay = 0.01
	// MaxItems bounds the items a scenario can make in all (Scenario.Items):
	// what the bench holds in memory grows with it.
	MaxItems = 1_000_000
	// MaxBatch bounds batch_max.
	MaxBatch = 10_000
	// MaxInputTokens bounds prompt_tokens and item_input_tokens.
	MaxInputTokens = 1_000_000
	// MaxOutputTokens is the simulated model's max output tokens: the most
	// max_tokens one request may ask. It bounds default_max_tokens,
	// item_output_tokens and item_max_tokens, and a flow's largest request
	// (batch_max × item_max_tokens), so every request the bench makes is one
	// the simulator's HTTP server would accept.
	MaxOutputTokens = 32_768
	// MaxLimit bounds each provider limit (a trillion).
	MaxLimit = 1_000_000_000_000
	// MaxLatency bounds provider.latency.
	MaxLatency = time.Hour
	// MinWeight and MaxWeight bound a flow's weight.
	MinWeight = 0.001
	MaxWeight = 1_000_000
)

// Faults are fractions in [0, 1] of admitted requests that fail in each way;
// their sum is at most 1. A faulted request was still charged.
type Faults struct {
	Error5xx float64 // the provider answers 5xx
	Timeout  float64 // the provider never answers
	Reset    float64 // the connection is reset
	BadJSON  float64 // a 200 whose body is truncated JSON
}

// Sum returns the fraction of admitted requests that fail in any way.
func (f Faults) Sum() float64 { return f.Error5xx + f.Timeout + f.Reset + f.BadJSON }

// Flow is one job or tenant drawing on the key.
type Flow struct {
	Name           string
	Priority       int     // higher is more urgent; default 0
	Weight         float64 // share among flows of equal priority; default 1
	Backlog        int     // items waiting at time 0
	ArrivalsPerDay float64 // new items, spread evenly over the day
	// After names another flow: an item becomes eligible here only once that
	// flow has finished the same item. Backlog items are eligible at once.
	After            string
	BatchMax         int   // most items one request may carry; default 1
	PromptTokens     int64 // fixed input tokens of every request
	ItemInputTokens  int64 // input tokens each item adds
	ItemOutputTokens int64 // mean real output per item (varies ±20 %)
	ItemMaxTokens    int64 // max_tokens asked per item; 0: the request sets none
}

// Load reads and validates the scenario file at path.
func Load(path string) (*Scenario, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read scenario: %w", err)
	}
	defer f.Close()
	// One byte more than the bound, so Parse sees a file that is too large.
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read scenario: %w", err)
	}
	s, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// Validate checks what Parse checks on values built in code, so a scenario
// made without a file obeys the same rules and bounds.
func (s *Scenario) Validate() error {
	if err := s.validate(); err != nil {
		return err
	}
	return s.checkItems()
}

// validate is Validate but for the bound on items, which Parse reports with
// the line of the flows.
func (s *Scenario) validate() error {
	if s.Duration <= 0 {
		return fmt.Errorf("duration: %s is not positive", s.Duration)
	}
	if s.Duration > MaxDuration {
		return fmt.Errorf("duration: %s %s", s.Duration, aboveDuration(MaxDuration))
	}
	if err := s.Provider.Validate(); err != nil {
		return err
	}
	if s.Provider.DefaultMaxTokens > MaxOutputTokens {
		return fmt.Errorf("provider.default_max_tokens: %d %s", s.Provider.DefaultMaxTokens, above(MaxOutputTokens))
	}
	if len(s.Flows) == 0 {
		return fmt.Errorf("flows: at least one flow is needed")
	}
	if len(s.Flows) > MaxFlows {
		return fmt.Errorf("flows: %d flows %s", len(s.Flows), above(MaxFlows))
	}
	index := make(map[string]int, len(s.Flows))
	for i, f := range s.Flows {
		p := fmt.Sprintf("flows[%d]", i)
		if strings.TrimSpace(f.Name) == "" {
			return fmt.Errorf("%s.name: missing or empty", p)
		}
		if j, dup := index[f.Name]; dup {
			return fmt.Errorf("%s.name: %q is already the name of flows[%d]", p, f.Name, j)
		}
		index[f.Name] = i
		if f.Priority < governor.MinPriority || f.Priority > governor.MaxPriority {
			return fmt.Errorf("%s.priority: %d is not between %d and %d (each step multiplies a flow's share by 4; priority is never absolute)",
				p, f.Priority, governor.MinPriority, governor.MaxPriority)
		}
		if msg := outsideFloat(f.Weight, MinWeight, MaxWeight); msg != "" {
			return fmt.Errorf("%s.weight: %v %s", p, f.Weight, msg)
		}
		if msg := outsideArrivals(f.ArrivalsPerDay); msg != "" {
			return fmt.Errorf("%s.arrivals_per_day: %v %s", p, f.ArrivalsPerDay, msg)
		}
		for _, v := range []struct {
			key    string
			x      int64
			lo, hi int64
		}{
			{"backlog", int64(f.Backlog), 0, MaxBacklog},
			{"batch_max", int64(f.BatchMax), 1, MaxBatch},
			{"prompt_tokens", f.PromptTokens, 0, MaxInputTokens},
			{"item_input_tokens", f.ItemInputTokens, 0, MaxInputTokens},
			{"item_output_tokens", f.ItemOutputTokens, 0, MaxOutputTokens},
			{"item_max_tokens", f.ItemMaxTokens, 0, MaxOutputTokens},
		} {
			if msg := outside(v.x, v.lo, v.hi); msg != "" {
				return fmt.Errorf("%s.%s: %d %s", p, v.key, v.x, msg)
			}
		}
		if err := f.checkRequest(p); err != nil {
			return err
		}
	}
	for i, f := range s.Flows {
		if f.After == "" {
			continue
		}
		if _, ok := index[f.After]; !ok {
			return fmt.Errorf("flows[%d].after: %q names no flow", i, f.After)
		}
		// Follow the chain; it is a cycle if it comes back to a flow already on it.
		path := []string{f.Name}
		seen := map[string]bool{f.Name: true}
		for cur := f.After; cur != ""; cur = s.Flows[index[cur]].After {
			path = append(path, cur)
			if seen[cur] {
				return fmt.Errorf("flows[%d].after: cycle %s", i, strings.Join(path, " → "))
			}
			seen[cur] = true
		}
	}
	return nil
}

// checkRequest checks what involves several keys of one flow: its largest
// request may ask no more max_tokens than the simulated model allows.
func (f *Flow) checkRequest(prefix string) error {
	if n := int64(f.BatchMax) * f.ItemMaxTokens; n > MaxOutputTokens {
		return fmt.Errorf("%s: batch_max × item_max_tokens = %d × %d = %s max_tokens in one request, more than the simulated model's %s max output tokens",
			prefix, f.BatchMax, f.ItemMaxTokens, num.Group(n), num.Group(MaxOutputTokens))
	}
	return nil
}

// checkItems bounds the items a run can make in all. The flows' own bounds
// must hold and their after chains must have no cycle.
func (s *Scenario) checkItems() error {
	if n := s.Items(); n > MaxItems {
		return fmt.Errorf("flows: the scenario makes up to %s items (backlogs, arrivals over %s, and the items after flows derive from them), more than the bound of %s",
			num.Group(n), s.Duration, num.Group(MaxItems))
	}
	return nil
}

// ArrivalSlot is the time between two of f's arrivals: a day divided by
// ArrivalsPerDay; 0 when f has no arrivals.
func (f *Flow) ArrivalSlot() time.Duration {
	if !(f.ArrivalsPerDay > 0) {
		return 0
	}
	return max(time.Duration(float64(24*time.Hour)/f.ArrivalsPerDay), 1)
}

// Arrivals is how many of f's items arrive within d: one in each slot that
// starts before d.
func (f *Flow) Arrivals(d time.Duration) int64 {
	slot := f.ArrivalSlot()
	if slot == 0 || d <= 0 {
		return 0
	}
	return saturate(math.Ceil(float64(d) / float64(slot)))
}

// Items is the most items a run of s can make: every flow's backlog and
// arrivals over the duration, and for a flow that follows another, one more
// for each item that flow finishes (so a chain of after flows repeats its
// first flow's items once per flow). It saturates at math.MaxInt64.
func (s *Scenario) Items() int64 {
	index := make(map[string]int, len(s.Flows))
	for i, f := range s.Flows {
		index[f.Name] = i
	}
	var total float64
	for _, f := range s.Flows {
		// A flow gets its own items and every item of the flows it follows.
		cur, steps := f, 0
		for {
			total += float64(cur.Backlog) + float64(cur.Arrivals(s.Duration))
			j, ok := index[cur.After]
			if cur.After == "" || !ok || steps >= len(s.Flows) {
				break
			}
			cur, steps = s.Flows[j], steps+1
		}
	}
	return saturate(total)
}

// Validate checks the provider section and its bounds.
func (p *Provider) Validate() error {
	if !slices.Contains(llm.Profiles(), p.Profile) {
		return fmt.Errorf("provider.profile: %q is not groq, openai or anthropic", p.Profile)
	}
	if p.Window > governor.Fixed {
		return fmt.Errorf("provider.window: %d is not rolling or fixed", p.Window)
	}
	if p.Accounting > governor.SettleAccounting {
		return fmt.Errorf("provider.accounting: %d is not reserve or settle", p.Accounting)
	}
	if p.Latency < 0 {
		return fmt.Errorf("provider.latency: %s is negative", p.Latency)
	}
	if p.Latency > MaxLatency {
		return fmt.Errorf("provider.latency: %s %s", p.Latency, aboveDuration(MaxLatency))
	}
	if p.DefaultMaxTokens <= 0 {
		return fmt.Errorf("provider.default_max_tokens: %d is not positive", p.DefaultMaxTokens)
	}
	for _, fv := range []struct {
		name string
		v    float64
	}{{"error_5xx", p.Faults.Error5xx}, {"timeout", p.Faults.Timeout}, {"reset", p.Faults.Reset}, {"bad_json", p.Faults.BadJSON}} {
		if !(fv.v >= 0 && fv.v <= 1) {
			return fmt.Errorf("provider.faults.%s: %v is not a fraction in [0, 1]", fv.name, fv.v)
		}
	}
	if sum := p.Faults.Sum(); sum > 1+1e-9 {
		return fmt.Errorf("provider.faults: the fractions add up to %v, more than 1", sum)
	}
	for _, l := range governor.AllLimits {
		if p.Limits[l] < 0 {
			return fmt.Errorf("provider.limits.%s: %d is not positive", l, p.Limits[l])
		}
		if p.Limits[l] > MaxLimit {
			return fmt.Errorf("provider.limits.%s: %d %s", l, p.Limits[l], above(MaxLimit))
		}
	}
	return p.checkUnannounced()
}

// checkUnannounced checks that every unannounced limit is one the provider has.
func (p *Provider) checkUnannounced() error {
	for _, l := range governor.AllLimits {
		if p.Unannounced[l] && p.Limits[l] == 0 {
			return fmt.Errorf("provider.unannounced: %s is not one of provider.limits", l)
		}
	}
	return nil
}

// outside says how x falls outside [lo, hi] ("is negative", "is more than
// the bound of 10,000,000"), or "" when it is within. Parse and Validate word
// every range error with it.
func outside(x, lo, hi int64) string {
	switch {
	case x < lo:
		return below(lo)
	case x > hi:
		return above(hi)
	}
	return ""
}

func below(lo int64) string {
	switch lo {
	case 0:
		return "is negative"
	case 1:
		return "is not positive"
	}
	return "is less than the bound of " + num.Group(lo)
}

// outsideFloat is outside for a float; NaN and infinities are outside.
func outsideFloat(x, lo, hi float64) string {
	switch {
	case math.IsNaN(x):
		return "is not a number"
	case x <= 0 && lo > 0:
		return "is not positive"
	case x < lo:
		return "is less than the bound of " + strconv.FormatFloat(lo, 'f', -1, 64)
	case x > hi:
		return "is more than the bound of " + num.Group(int64(hi))
	}
	return ""
}

// outsideArrivals bounds arrivals_per_day: 0, or within
// [MinArrivalsPerDay, MaxArrivalsPerDay].
func outsideArrivals(x float64) string {
	if x == 0 {
		return ""
	}
	if x < 0 {
		return "is negative"
	}
	if msg := outsideFloat(x, MinArrivalsPerDay, MaxArrivalsPerDay); msg != "" {
		if x < MinArrivalsPerDay {
			return msg + " (one item every 100 days; 0 means none)"
		}
		return msg
	}
	return ""
}

func above(hi int64) string { return "is more than the bound of " + num.Group(hi) }

func aboveDuration(hi time.Duration) string {
	s := hi.String()
	if hi >= 24*time.Hour && hi%(24*time.Hour) == 0 {
		s = fmt.Sprintf("%dh (%d days)", hi/time.Hour, hi/(24*time.Hour))
	}
	return "is more than the bound of " + s
}

// saturate converts a non-negative x to int64, saturating at math.MaxInt64.
func saturate(x float64) int64 {
	if !(x < math.MaxInt64) {
		return math.MaxInt64
	}
	return int64(max(x, 0))
}
