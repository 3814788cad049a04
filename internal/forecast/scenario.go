package forecast

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/num"
	"github.com/sluice-dev/sluice/internal/route"
	"github.com/sluice-dev/sluice/internal/yamlfile"
	"github.com/sluice-dev/sluice/llm"
)

// Scenario is one provider key and the flows that draw on it.
type Scenario struct {
	Name     string        // echoed in reports
	Duration time.Duration // virtual time to simulate; positive
	Seed     int64         // seeds every random choice; same seed, same report
	Provider Provider
	Flows    []Flow // at least one; names unique
	// Prices are what each model costs, by model name: what the planner
	// turns tokens into money with. Optional.
	Prices map[string]Price
	// Targets, when set, are the keys and models the flows' calls are
	// routed among (Flow.Targets); the provider section then only gives
	// the targets' defaults. Empty: one key, the provider section's.
	Targets []Target
}

// Price is what a model costs, in money (say USD) per million tokens.
type Price struct {
	Input  float64 `yaml:"input"`  // per million input tokens
	Output float64 `yaml:"output"` // per million output tokens
}

// PriceOf returns the price of f's model: the one Prices names, or, when f
// names no model and Prices holds one, that one.
func (s *Scenario) PriceOf(f *Flow) (Price, bool) {
	if f.Model != "" {
		p, ok := s.Prices[f.Model]
		return p, ok
	}
	if len(s.Prices) == 1 {
		for _, p := range s.Prices {
			return p, true
		}
	}
	return Price{}, false
}

// Provider is the simulated provider's behaviour: its wire format, how its
// windows count and how it settles charges.
type Provider struct {
	// Profile is which headers, error bodies and status codes the simulated
	// provider uses: one of llm.Profiles. Default llm.OpenAI.
	Profile llm.Profile
	// FixedWindows: limits count per fixed window ("window: fixed"), not a
	// rolling one (the default), as governor.Config.FixedWindows.
	FixedWindows bool
	// SettleOutput: an admission charge's output part is corrected to the
	// real output when the response ends ("accounting: settle"); by default
	// it stands, as governor.Config.SettleOutput.
	SettleOutput bool
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
	for l := range governor.NumLimits {
		if p.Unannounced[l] {
			ls[l] = 0
		}
	}
	return ls
}

// Announced returns s as a policy sees it: a copy whose provider limits
// are only the announced ones.
func (s *Scenario) Announced() *Scenario {
	view := *s
	view.Provider.Limits = s.Provider.Announced()
	view.Provider.Unannounced = [governor.NumLimits]bool{}
	return &view
}

// DefaultMaxTokens is what a provider reserves for a request without
// max_tokens when the scenario does not say.
const DefaultMaxTokens = 1000

// Bounds on a scenario. Validate refuses a value beyond one, naming the key
// and the bound, on a scenario built in code or read by Parse, which adds
// the key's line. Together they keep the largest scenario that loads within about 2 GB of
// memory in a replay (docs/bench.md).
const (
	// MaxFileBytes bounds a scenario file, as every YAML file sluice reads.
	MaxFileBytes = yamlfile.MaxFileBytes
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
	// what a replay holds in memory grows with it.
	MaxItems = 1_000_000
	// MaxBatch bounds batch_max.
	MaxBatch = 10_000
	// MaxInputTokens bounds prompt_tokens and item_input_tokens.
	MaxInputTokens = 1_000_000
	// MaxOutputTokens is the simulated model's max output tokens: the most
	// max_tokens one request may ask. It bounds default_max_tokens,
	// item_output_tokens and item_max_tokens, and a flow's largest request
	// (batch_max × item_max_tokens), so every request a replay makes is one
	// the simulator's HTTP server would accept.
	MaxOutputTokens = 32_768
	// MaxLimit bounds each provider limit (a trillion).
	MaxLimit = 1_000_000_000_000
	// MaxLatency bounds provider.latency.
	MaxLatency = time.Hour
	// MaxPrice bounds a price per million tokens.
	MaxPrice = 1_000_000
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

// ParseFaults reads faults written as the simulator's flags take them:
// "error_5xx=0.1,timeout=0.05" (names error_5xx, timeout, reset, bad_json).
func ParseFaults(s string) (Faults, error) {
	var f Faults
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, val, ok := strings.Cut(part, "=")
		if !ok {
			return f, fmt.Errorf("%q: want name=fraction, e.g. timeout=0.05", part)
		}
		x, err := strconv.ParseFloat(val, 64)
		if err != nil || !(x >= 0 && x <= 1) {
			return f, fmt.Errorf("%s: %q is not a fraction in [0, 1]", name, val)
		}
		switch name {
		case "error_5xx":
			f.Error5xx = x
		case "timeout":
			f.Timeout = x
		case "reset":
			f.Reset = x
		case "bad_json":
			f.BadJSON = x
		default:
			return f, fmt.Errorf("unknown fault %q (want error_5xx, timeout, reset or bad_json)", name)
		}
	}
	if f.Sum() > 1 {
		return f, errors.New("the fractions add up to more than 1")
	}
	return f, nil
}

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
	// Model is the model the flow's requests name, for Prices. Optional.
	Model string
	// Every, PerRun and Gap describe a job that paces itself, as a
	// scheduled job does: it runs every Every, takes up to PerRun items a
	// run (default BatchMax), and sends them BatchMax a request, Gap apart.
	// The planner counts the demand such a job makes; a replay's policies
	// pace flows themselves and ignore them. Zero Every: not paced.
	Every  time.Duration
	PerRun int
	Gap    time.Duration
	// Within is how long a batch of the flow should take at its share of
	// the key, as a backfill's (run.Backfill.BatchWithin): sluice's
	// governor sends the most items, up to BatchMax, that fit every limit
	// and are done within it. Zero: governor.DefaultWithin, a backfill's
	// default.
	Within time.Duration
	// Targets names the flow's route among the scenario's targets, in
	// order of preference (default: every target, in the order listed);
	// Rule ranks them (cheapest or ordered) and MaxWait is how long a call
	// may wait for a better-ranked target (0: route.DefaultMaxWait). Only
	// in a scenario with targets.
	Targets []string
	Rule    route.Rule
	MaxWait time.Duration
	// Budget is what the flow's own calls may cost, per day and per 30
	// days, beside the key's (governor.FlowConfig.Budget); zero: none. It
	// needs a price for the flow's model (Prices) and is only for a
	// scenario without targets.
	Budget governor.Budget
}

// Paced reports whether f paces itself (Every is set).
func (f *Flow) Paced() bool { return f.Every > 0 }

// Load reads and validates the scenario file at path.
func Load(path string) (*Scenario, error) {
	data, err := Read(path)
	if err != nil {
		return nil, err
	}
	s, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// Read reads the scenario file at path: a regular file (or a link to
// one) of at most MaxFileBytes. A pipe, a device or a directory is
// refused without waiting, and a larger file after MaxFileBytes+1 bytes,
// each with an error naming the path (yamlfile.ReadFile).
func Read(path string) ([]byte, error) {
	data, err := yamlfile.ReadFile(path, MaxFileBytes)
	if err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	return data, nil
}

// Validate checks the rules and bounds of a scenario, whether a file or
// code made it. Its errors are *yamlfile.Error naming the key, such as
// flows[2].batch_max, which Parse places at the key's line.
func (s *Scenario) Validate() error {
	if s.Duration <= 0 {
		return fieldErr("duration", "%s is not positive", s.Duration)
	}
	if s.Duration > MaxDuration {
		return fieldErr("duration", "%s %s", s.Duration, aboveDuration(MaxDuration))
	}
	if err := s.Provider.Validate(); err != nil {
		return err
	}
	if s.Provider.DefaultMaxTokens > MaxOutputTokens {
		return fieldErr("provider.default_max_tokens", "%d %s", s.Provider.DefaultMaxTokens, above(MaxOutputTokens))
	}
	if len(s.Flows) == 0 {
		return fieldErr("flows", "at least one flow is needed")
	}
	if len(s.Flows) > MaxFlows {
		return fieldErr("flows", "%d flows %s", len(s.Flows), above(MaxFlows))
	}
	index := make(map[string]int, len(s.Flows))
	for i, f := range s.Flows {
		p := fmt.Sprintf("flows[%d]", i)
		if strings.TrimSpace(f.Name) == "" {
			return fieldErr(p+".name", "missing or empty")
		}
		if j, dup := index[f.Name]; dup {
			return fieldErr(p+".name", "%q is already the name of flows[%d]", f.Name, j)
		}
		index[f.Name] = i
		if err := s.validateFlow(p, &f); err != nil {
			return err
		}
	}
	for i, f := range s.Flows {
		if f.After == "" {
			continue
		}
		p := fmt.Sprintf("flows[%d].after", i)
		if _, ok := index[f.After]; !ok {
			return fieldErr(p, "%q names no flow", f.After)
		}
		// Follow the chain; it is a cycle if it comes back to a flow already on it.
		path := []string{f.Name}
		seen := map[string]bool{f.Name: true}
		for cur := f.After; cur != ""; cur = s.Flows[index[cur]].After {
			path = append(path, cur)
			if seen[cur] {
				return fieldErr(p, "cycle %s", strings.Join(path, " → "))
			}
			seen[cur] = true
		}
	}
	for model, pr := range s.Prices {
		for _, v := range []struct {
			key string
			x   float64
		}{{"input", pr.Input}, {"output", pr.Output}} {
			if v.x < 0 || v.x > MaxPrice || math.IsNaN(v.x) {
				return fieldErr("prices."+model+"."+v.key, "%v is not between 0 and %v (money per million tokens)", v.x, float64(MaxPrice))
			}
		}
	}
	if err := s.validateTargets(); err != nil {
		return err
	}
	if err := s.validateFlowBudgets(); err != nil {
		return err
	}
	// Bounded only now: Items needs every flow's bounds and no cycle.
	if n := s.Items(); n > MaxItems {
		return fieldErr("flows", "the scenario makes up to %s items (backlogs, arrivals over %s, and the items after flows derive from them), more than the bound of %s",
			num.Group(n), s.Duration, num.Group(MaxItems))
	}
	return nil
}

// validateFlow checks f, at path p ("flows[2]"), but for its name and
// after: each value within its bounds, and what depends on others.
func (s *Scenario) validateFlow(p string, f *Flow) error {
	if f.Priority < governor.MinPriority || f.Priority > governor.MaxPriority {
		return fieldErr(p+".priority", "%d is not between %d and %d (each step multiplies a flow's share by 4; priority is never absolute)",
			f.Priority, governor.MinPriority, governor.MaxPriority)
	}
	if msg := outsideFloat(f.Weight, MinWeight, MaxWeight); msg != "" {
		return fieldErr(p+".weight", "%v %s", f.Weight, msg)
	}
	if msg := outsideArrivals(f.ArrivalsPerDay); msg != "" {
		return fieldErr(p+".arrivals_per_day", "%v %s", f.ArrivalsPerDay, msg)
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
			return fieldErr(p+"."+v.key, "%d %s", v.x, msg)
		}
	}
	if f.Every < 0 || f.Every > MaxDuration {
		return fieldErr(p+".every", "%s is not between 0 and %s", f.Every, MaxDuration)
	}
	if f.Within < 0 || f.Within > MaxDuration {
		return fieldErr(p+".within", "%s is not between 0 and %s", f.Within, MaxDuration)
	}
	if f.Gap < 0 || f.Gap > MaxDuration {
		return fieldErr(p+".gap", "%s is not between 0 and %s", f.Gap, MaxDuration)
	}
	if msg := outside(int64(f.PerRun), 0, MaxBacklog); msg != "" {
		return fieldErr(p+".per_run", "%d %s", f.PerRun, msg)
	}
	if !f.Paced() && (f.PerRun > 0 || f.Gap > 0) {
		return fieldErr(p+".every", "missing: per_run and gap pace a job that runs every some time")
	}
	if f.Model != "" && len(s.Prices) > 0 {
		if _, ok := s.Prices[f.Model]; !ok {
			return fieldErr(p+".model", "%q has no price in prices", f.Model)
		}
	}
	if err := validateBudget(p+".budget", f.Budget); err != nil {
		return err
	}
	// The largest request may ask no more max_tokens than the simulated model allows.
	if n := int64(f.BatchMax) * f.ItemMaxTokens; n > MaxOutputTokens {
		return fieldErr(p, "batch_max × item_max_tokens = %d × %d = %s max_tokens in one request, more than the simulated model's %s max output tokens",
			f.BatchMax, f.ItemMaxTokens, num.Group(n), num.Group(MaxOutputTokens))
	}
	return nil
}

// validateFlowBudgets checks what the flows' own budgets need: a price for
// each budgeted flow's model and, since the key's governor prices every
// call alike, the same price for every flow of the key.
func (s *Scenario) validateFlowBudgets() error {
	budgeted := -1
	for i := range s.Flows {
		f := &s.Flows[i]
		if f.Budget.IsZero() {
			continue
		}
		p := fmt.Sprintf("flows[%d].budget", i)
		if s.Routed() {
			return fieldErr(p, "a flow's own budget across targets is not simulated yet: give the targets budgets (targets[i].budget)")
		}
		if pr, ok := s.PriceOf(f); !ok || pr == (Price{}) {
			return fieldErr(p, "needs a price for the flow's model (prices: {MODEL: {input: …, output: …}}), to know what a call costs")
		}
		if budgeted < 0 {
			budgeted = i
		}
	}
	if budgeted < 0 {
		return nil
	}
	want, _ := s.PriceOf(&s.Flows[budgeted])
	for i := range s.Flows {
		if pr, ok := s.PriceOf(&s.Flows[i]); !ok || pr != want {
			return fieldErr(fmt.Sprintf("flows[%d].model", i), "%q is not priced as %q of flows[%d], which has a budget: the key prices every call alike, so its flows name one price",
				s.Flows[i].Model, s.Flows[budgeted].Model, budgeted)
		}
	}
	return nil
}

// KeyPrice is what a call on the key of a scenario without targets costs
// when a flow has a budget of its own: the price all its flows share
// (Validate checks they do). The zero Price when no flow has a budget, so
// that a scenario without flow budgets is replayed as before.
func (s *Scenario) KeyPrice() governor.Price {
	for i := range s.Flows {
		if !s.Flows[i].Budget.IsZero() {
			pr, _ := s.PriceOf(&s.Flows[i])
			return governor.Price{Input: pr.Input, Output: pr.Output}
		}
	}
	return governor.Price{}
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
		return fieldErr("provider.profile", "%q is not groq, openai or anthropic", p.Profile)
	}
	if p.Latency < 0 {
		return fieldErr("provider.latency", "%s is negative", p.Latency)
	}
	if p.Latency > MaxLatency {
		return fieldErr("provider.latency", "%s %s", p.Latency, aboveDuration(MaxLatency))
	}
	if p.DefaultMaxTokens <= 0 {
		return fieldErr("provider.default_max_tokens", "%d is not positive", p.DefaultMaxTokens)
	}
	for _, fv := range []struct {
		name string
		v    float64
	}{{"error_5xx", p.Faults.Error5xx}, {"timeout", p.Faults.Timeout}, {"reset", p.Faults.Reset}, {"bad_json", p.Faults.BadJSON}} {
		if !(fv.v >= 0 && fv.v <= 1) {
			return fieldErr("provider.faults."+fv.name, "%v is not a fraction in [0, 1]", fv.v)
		}
	}
	if sum := p.Faults.Sum(); sum > 1+1e-9 {
		return fieldErr("provider.faults", "the fractions add up to %v, more than 1", sum)
	}
	for l := range governor.NumLimits {
		if p.Limits[l] < 0 {
			return fieldErr("provider.limits."+l.String(), "%d is not positive", p.Limits[l])
		}
		if p.Limits[l] > MaxLimit {
			return fieldErr("provider.limits."+l.String(), "%d %s", p.Limits[l], above(MaxLimit))
		}
	}
	for l := range governor.NumLimits {
		if p.Unannounced[l] && p.Limits[l] == 0 {
			return fieldErr("provider.unannounced", "%s is not one of provider.limits", l)
		}
	}
	return nil
}

// outside says how x falls outside [lo, hi] ("is negative", "is more than
// the bound of 10,000,000"), or "" when it is within. Validate words every
// range error with it.
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
