// Package scenario reads quota scenarios: one provider key with its limits
// and the flows (jobs) that share it, as the bench replays them in virtual time
// and the provider simulator serves them.
//
// The format is a contract with files written by others, so parsing is strict:
// an unknown key or a bad value is an error that names the key, its place
// ("flows[2].batchmax: unknown key (line 31)") and, for values, the value.
package scenario

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/governor"
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
	// Profile is "groq", "openai" or "anthropic": which headers, error bodies
	// and status codes the simulated provider uses. Default "openai".
	Profile string
	// Window is how limits count over their period. Default Rolling.
	Window Window
	// Accounting is whether an admission charge stands or is corrected to
	// the real output when the response ends. Default Reserve.
	Accounting Accounting
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
}

// DefaultMaxTokens is what a provider reserves for a request without
// max_tokens when the scenario does not say.
const DefaultMaxTokens = 1000

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

// Window says how a limit counts what was charged over its period.
type Window uint8

const (
	// Rolling is a sliding window: at every moment the charges of the last
	// period stay within the limit; each charge ages out exactly one period
	// after it was made.
	Rolling Window = iota
	// Fixed windows start at whole minutes or days of the clock (Unix epoch
	// aligned); a window's whole allowance comes back at its boundary.
	Fixed
)

func (w Window) String() string {
	switch w {
	case Rolling:
		return "rolling"
	case Fixed:
		return "fixed"
	}
	return fmt.Sprintf("window(%d)", uint8(w))
}

// ParseWindow reads "rolling" or "fixed".
func ParseWindow(s string) (Window, error) {
	switch s {
	case "rolling":
		return Rolling, nil
	case "fixed":
		return Fixed, nil
	}
	return 0, fmt.Errorf("%q is not rolling or fixed", s)
}

// Accounting says whether the charge made at admission stands.
type Accounting uint8

const (
	// Reserve: a request is charged its input + max_tokens at admission and
	// the charge stands (Groq, OpenAI).
	Reserve Accounting = iota
	// Settle: charged the same at admission, corrected to the real output
	// when the response ends (as Anthropic documents for output tokens).
	Settle
)

func (a Accounting) String() string {
	switch a {
	case Reserve:
		return "reserve"
	case Settle:
		return "settle"
	}
	return fmt.Sprintf("accounting(%d)", uint8(a))
}

// ParseAccounting reads "reserve" or "settle".
func ParseAccounting(s string) (Accounting, error) {
	switch s {
	case "reserve":
		return Reserve, nil
	case "settle":
		return Settle, nil
	}
	return 0, fmt.Errorf("%q is not reserve or settle", s)
}

// Profiles lists the provider profiles a scenario may name.
var Profiles = []string{"groq", "openai", "anthropic"}

// ValidProfile reports whether p is one of Profiles.
func ValidProfile(p string) bool {
	for _, q := range Profiles {
		if p == q {
			return true
		}
	}
	return false
}

// Load reads and validates the scenario file at path.
func Load(path string) (*Scenario, error) {
	data, err := os.ReadFile(path)
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
// made without a file obeys the same rules. Parse calls it.
func (s *Scenario) Validate() error {
	if s.Duration <= 0 {
		return fmt.Errorf("duration: %s is not positive", s.Duration)
	}
	if err := s.Provider.Validate(); err != nil {
		return err
	}
	if len(s.Flows) == 0 {
		return fmt.Errorf("flows: at least one flow is needed")
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
		switch {
		case !(f.Weight > 0):
			return fmt.Errorf("%s.weight: %v is not positive", p, f.Weight)
		case f.BatchMax < 1:
			return fmt.Errorf("%s.batch_max: %d is less than 1", p, f.BatchMax)
		case f.Backlog < 0:
			return fmt.Errorf("%s.backlog: %d is negative", p, f.Backlog)
		case !(f.ArrivalsPerDay >= 0):
			return fmt.Errorf("%s.arrivals_per_day: %v is negative", p, f.ArrivalsPerDay)
		case f.PromptTokens < 0:
			return fmt.Errorf("%s.prompt_tokens: %d is negative", p, f.PromptTokens)
		case f.ItemInputTokens < 0:
			return fmt.Errorf("%s.item_input_tokens: %d is negative", p, f.ItemInputTokens)
		case f.ItemOutputTokens < 0:
			return fmt.Errorf("%s.item_output_tokens: %d is negative", p, f.ItemOutputTokens)
		case f.ItemMaxTokens < 0:
			return fmt.Errorf("%s.item_max_tokens: %d is negative", p, f.ItemMaxTokens)
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

// Validate checks the provider section.
func (p *Provider) Validate() error {
	if !ValidProfile(p.Profile) {
		return fmt.Errorf("provider.profile: %q is not groq, openai or anthropic", p.Profile)
	}
	if p.Window > Fixed {
		return fmt.Errorf("provider.window: %s is not rolling or fixed", p.Window)
	}
	if p.Accounting > Settle {
		return fmt.Errorf("provider.accounting: %s is not reserve or settle", p.Accounting)
	}
	if p.Latency < 0 {
		return fmt.Errorf("provider.latency: %s is negative", p.Latency)
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
	}
	return nil
}
