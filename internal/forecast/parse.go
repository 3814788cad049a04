package forecast

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/govtext"
	"github.com/sluice-dev/sluice/internal/num"
	"github.com/sluice-dev/sluice/internal/route"
	"github.com/sluice-dev/sluice/internal/yamlfile"
	"github.com/sluice-dev/sluice/llm"
)

// file is the layout of a scenario file (docs/bench.md). yamlfile decodes
// it; Parse makes a Scenario of it and Validate bounds that, each error
// placed at its key's line.
type file struct {
	Name     text      `yaml:"name"`
	Duration *duration `yaml:"duration"`
	Seed     whole     `yaml:"seed"`
	Prices   map[text]struct {
		Input  number `yaml:"input"`
		Output number `yaml:"output"`
	} `yaml:"prices"`
	Provider struct {
		Profile          llm.Profile     `yaml:"profile"`
		Window           fixedWindows    `yaml:"window"`
		Accounting       settleOutput    `yaml:"accounting"`
		Latency          duration        `yaml:"latency"`
		DefaultMaxTokens whole           `yaml:"default_max_tokens"`
		Faults           faultsFile      `yaml:"faults"`
		Limits           map[limit]whole `yaml:"limits"`
		Unannounced      []limit         `yaml:"unannounced"`
	} `yaml:"provider"`
	Flows []struct {
		Name             text       `yaml:"name"`
		Priority         whole      `yaml:"priority"`
		Weight           *number    `yaml:"weight"` // nil: 1
		Backlog          whole      `yaml:"backlog"`
		ArrivalsPerDay   number     `yaml:"arrivals_per_day"`
		After            text       `yaml:"after"`
		BatchMax         *whole     `yaml:"batch_max"` // nil: 1
		PromptTokens     whole      `yaml:"prompt_tokens"`
		ItemInputTokens  whole      `yaml:"item_input_tokens"`
		ItemOutputTokens whole      `yaml:"item_output_tokens"`
		ItemMaxTokens    whole      `yaml:"item_max_tokens"`
		Model            text       `yaml:"model"`
		Every            duration   `yaml:"every"`
		PerRun           whole      `yaml:"per_run"`
		Gap              duration   `yaml:"gap"`
		Within           duration   `yaml:"within"`
		Targets          []text     `yaml:"targets"`
		Rule             rule       `yaml:"rule"`
		MaxWait          duration   `yaml:"max_wait"`
		Budget           budgetFile `yaml:"budget"`
	} `yaml:"flows"`
	Targets []targetFile `yaml:"targets"`
}

// faultsFile is the layout of a provider's or a target's faults.
type faultsFile struct {
	Error5xx number `yaml:"error_5xx"`
	Timeout  number `yaml:"timeout"`
	Reset    number `yaml:"reset"`
	BadJSON  number `yaml:"bad_json"`
}

// budgetFile is the layout of a target's or a flow's budget, in money.
type budgetFile struct {
	Day   number `yaml:"day"`
	Month number `yaml:"month"`
}

func (b budgetFile) budget() governor.Budget {
	return governor.Budget{Day: float64(b.Day), Month: float64(b.Month)}
}

// targetFile is the layout of one of a scenario file's targets: what it
// leaves out is the provider section's, but its limits.
type targetFile struct {
	Name             text            `yaml:"name"`
	Model            text            `yaml:"model"`
	Profile          *llm.Profile    `yaml:"profile"`
	Window           *fixedWindows   `yaml:"window"`
	Accounting       *settleOutput   `yaml:"accounting"`
	Latency          *duration       `yaml:"latency"`
	DefaultMaxTokens *whole          `yaml:"default_max_tokens"`
	Faults           *faultsFile     `yaml:"faults"`
	Limits           map[limit]whole `yaml:"limits"`
	Price            struct {
		Input       number `yaml:"input"`
		CachedInput number `yaml:"cached_input"`
		Output      number `yaml:"output"`
	} `yaml:"price"`
	Budget  budgetFile `yaml:"budget"`
	Outages []struct {
		Start    duration   `yaml:"start"`
		Duration duration   `yaml:"duration"`
		Mode     outageMode `yaml:"mode"`
	} `yaml:"outages"`
}

// target returns the i-th target tf describes, with def's defaults.
func (tf *targetFile) target(i int, def Provider) (Target, error) {
	t := Target{Name: string(tf.Name), Model: string(tf.Model), Provider: def}
	p := &t.Provider
	p.Limits = governor.Limits{}
	if tf.Profile != nil {
		p.Profile = *tf.Profile
	}
	if tf.Window != nil {
		p.FixedWindows = bool(*tf.Window)
	}
	if tf.Accounting != nil {
		p.SettleOutput = bool(*tf.Accounting)
	}
	if tf.Latency != nil {
		p.Latency = time.Duration(*tf.Latency)
	}
	if tf.DefaultMaxTokens != nil {
		p.DefaultMaxTokens = int64(*tf.DefaultMaxTokens)
	}
	if f := tf.Faults; f != nil {
		p.Faults = Faults{float64(f.Error5xx), float64(f.Timeout), float64(f.Reset), float64(f.BadJSON)}
	}
	for l := range governor.NumLimits {
		if n, ok := tf.Limits[limit(l)]; ok && n <= 0 {
			return t, fieldErr(fmt.Sprintf("targets[%d].limits.%s", i, l), "%d is not positive", n)
		}
		p.Limits[l] = int64(tf.Limits[limit(l)])
	}
	t.Price = governor.Price{Input: float64(tf.Price.Input), CachedInput: float64(tf.Price.CachedInput), Output: float64(tf.Price.Output)}
	t.Budget = tf.Budget.budget()
	for _, o := range tf.Outages {
		t.Outages = append(t.Outages, Outage{Start: time.Duration(o.Start), Duration: time.Duration(o.Duration), Mode: OutageMode(o.Mode)})
	}
	return t, nil
}

// Parse reads and validates a scenario from YAML. Its errors name the key
// and its line: "flows[2].batchmax: unknown key (line 31)".
func Parse(data []byte) (*Scenario, error) {
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("scenario is more than the bound of %s bytes", num.Group(MaxFileBytes))
	}
	var f file
	f.Provider.Profile, f.Provider.DefaultMaxTokens = llm.OpenAI, DefaultMaxTokens
	lines, err := yamlfile.Decode(data, &f)
	if err != nil {
		return nil, err
	}
	s, err := f.scenario()
	if err == nil {
		err = s.Validate()
	}
	if err != nil {
		return nil, lines.Place(err)
	}
	return s, nil
}

// scenario returns the Scenario f describes, refusing what only a file can
// get wrong: a limit of 0 or less (a limit left out is none) and a limit
// unannounced twice.
func (f *file) scenario() (*Scenario, error) {
	if f.Duration == nil {
		return nil, fieldErr("duration", "missing (a Go duration such as 168h)")
	}
	p, faults := &f.Provider, &f.Provider.Faults
	s := &Scenario{Name: string(f.Name), Duration: time.Duration(*f.Duration), Seed: int64(f.Seed), Provider: Provider{
		Profile: p.Profile, FixedWindows: bool(p.Window), SettleOutput: bool(p.Accounting), Latency: time.Duration(p.Latency),
		DefaultMaxTokens: int64(p.DefaultMaxTokens),
		Faults:           Faults{float64(faults.Error5xx), float64(faults.Timeout), float64(faults.Reset), float64(faults.BadJSON)},
	}}
	for l := range governor.NumLimits {
		if n, ok := p.Limits[limit(l)]; ok && n <= 0 {
			return nil, fieldErr("provider.limits."+l.String(), "%d is not positive", n)
		}
		s.Provider.Limits[l] = int64(p.Limits[limit(l)])
	}
	for i, l := range p.Unannounced {
		if s.Provider.Unannounced[l] {
			return nil, fieldErr(fmt.Sprintf("provider.unannounced[%d]", i), "%s is given twice", governor.Limit(l))
		}
		s.Provider.Unannounced[l] = true
	}
	for model, p := range f.Prices {
		if s.Prices == nil {
			s.Prices = map[string]Price{}
		}
		s.Prices[string(model)] = Price{Input: float64(p.Input), Output: float64(p.Output)}
	}
	for _, ff := range f.Flows {
		fl := Flow{Name: string(ff.Name), Priority: ff.Priority.int(), Weight: 1, Backlog: ff.Backlog.int(),
			ArrivalsPerDay: float64(ff.ArrivalsPerDay), After: string(ff.After), BatchMax: 1,
			PromptTokens: int64(ff.PromptTokens), ItemInputTokens: int64(ff.ItemInputTokens),
			ItemOutputTokens: int64(ff.ItemOutputTokens), ItemMaxTokens: int64(ff.ItemMaxTokens),
			Model: string(ff.Model), Every: time.Duration(ff.Every), PerRun: ff.PerRun.int(), Gap: time.Duration(ff.Gap),
			Within: time.Duration(ff.Within)}
		if ff.Weight != nil {
			fl.Weight = float64(*ff.Weight)
		}
		if ff.BatchMax != nil {
			fl.BatchMax = ff.BatchMax.int()
		}
		for _, t := range ff.Targets {
			fl.Targets = append(fl.Targets, string(t))
		}
		fl.Rule, fl.MaxWait = route.Rule(ff.Rule), time.Duration(ff.MaxWait)
		fl.Budget = ff.Budget.budget()
		s.Flows = append(s.Flows, fl)
	}
	for i := range f.Targets {
		t, err := f.Targets[i].target(i, s.Provider)
		if err != nil {
			return nil, err
		}
		s.Targets = append(s.Targets, t)
	}
	return s, nil
}

// The values of a scenario file read themselves from their YAML nodes: a
// number is never a quoted string, a whole number may be written 1e6 or
// 1_000_000, and a number too large for its type is refused, never wrapped
// or read as zero. Their bounds are Validate's.
type (
	text     string         // a string: "name: 5" is refused
	whole    int64          // a whole number
	number   float64        // a finite number
	duration time.Duration  // a Go duration such as 90s
	limit    governor.Limit // a limit's name, as governor.Limit.String writes it

	fixedWindows bool       // "rolling" (false) or "fixed" (true)
	settleOutput bool       // "reserve" (false) or "settle" (true)
	rule         route.Rule // "cheapest" or "ordered"
	outageMode   OutageMode // "5xx", "overload", "429" or "down"
)

func (r *rule) UnmarshalYAML(n *yaml.Node) error {
	if n.ShortTag() != "!!str" {
		return refuse(n, "is not cheapest or ordered")
	}
	x, err := route.ParseRule(n.Value)
	if err != nil || n.Value == "" {
		return refuse(n, "is not cheapest or ordered")
	}
	*r = rule(x)
	return nil
}

func (m *outageMode) UnmarshalYAML(n *yaml.Node) error {
	x, err := ParseOutageMode(n.Value)
	if err != nil {
		return refuse(n, err.Error())
	}
	*m = outageMode(x)
	return nil
}

func (t *text) UnmarshalYAML(n *yaml.Node) error {
	if n.ShortTag() != "!!str" {
		return refuse(n, "is not a string")
	}
	*t = text(n.Value)
	return nil
}

func (w *whole) UnmarshalYAML(n *yaml.Node) error {
	var x int64
	if n.ShortTag() == "!!int" && n.Decode(&x) == nil {
		*w = whole(x)
		return nil
	}
	f, ok := numeric(n)
	switch {
	case !ok || math.IsNaN(f) || (!math.IsInf(f, 0) && f != math.Trunc(f)):
		return refuse(n, "is not a whole number")
	// float64 rounds what is just beyond int64 to ±2⁶³ (an int64 written as
	// such was read above).
	case f <= math.MinInt64:
		return refuse(n, "is less than the bound of "+num.Group(math.MinInt64))
	case f >= math.MaxInt64:
		return refuse(n, above(math.MaxInt64))
	}
	*w = whole(f)
	return nil
}

// int returns w as an int, saturating where int is narrower than int64.
func (w whole) int() int { return int(max(min(int64(w), math.MaxInt), math.MinInt)) }

func (x *number) UnmarshalYAML(n *yaml.Node) error {
	f, ok := numeric(n)
	switch {
	case !ok:
		return refuse(n, "is not a number")
	case math.IsNaN(f) || math.IsInf(f, 0):
		return refuse(n, "is not a finite number")
	}
	*x = number(f)
	return nil
}

// numeric reads a scalar YAML number as a float64. A number too large for
// float64 (1e400, which YAML leaves a string) reads as ±Inf so that it fails
// every bound; a quoted string is not a number.
func numeric(v *yaml.Node) (float64, bool) {
	tag := v.ShortTag()
	if tag != "!!int" && tag != "!!float" && !(tag == "!!str" && v.Style == 0) {
		return 0, false
	}
	x, err := strconv.ParseFloat(strings.ReplaceAll(v.Value, "_", ""), 64)
	switch {
	case errors.Is(err, strconv.ErrRange):
		return x, true
	case tag == "!!str":
		return 0, false // "inf", "nan" and the like are words in YAML
	case err == nil:
		return x, true
	}
	// YAML's own spellings: .inf, .nan, 0o17, 0x1F.
	if v.Decode(&x) != nil {
		return 0, false
	}
	return x, true
}

// durationShape is what time.ParseDuration reads; a value of this shape that
// it refuses is too large for a time.Duration.
var durationShape = regexp.MustCompile(`^[-+]?(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$`)

func (d *duration) UnmarshalYAML(n *yaml.Node) error {
	x, err := time.ParseDuration(n.Value)
	switch {
	case err == nil:
		*d = duration(x)
		return nil
	case durationShape.MatchString(n.Value):
		return refuse(n, "is too large for a duration")
	}
	return refuse(n, "is not a duration such as 90s, 2m or 168h")
}

func (l *limit) UnmarshalYAML(n *yaml.Node) error {
	x, err := govtext.Limit(n.Value)
	if err != nil || x.String() != n.Value {
		return refuse(n, "is not a limit (want rpm, rpd, tpm, tpd, itpm or otpm)")
	}
	*l = limit(x)
	return nil
}

func (w *fixedWindows) UnmarshalYAML(n *yaml.Node) error {
	x, err := govtext.Window(n.Value)
	if err != nil {
		return refuse(n, "is not rolling or fixed")
	}
	*w = fixedWindows(x)
	return nil
}

func (a *settleOutput) UnmarshalYAML(n *yaml.Node) error {
	x, err := govtext.Accounting(n.Value)
	if err != nil {
		return refuse(n, "is not reserve or settle")
	}
	*a = settleOutput(x)
	return nil
}

// refuse says that the value of n is wrong in the way what says.
func refuse(n *yaml.Node, what string) error { return fmt.Errorf("%q %s", n.Value, what) }

// fieldErr is a problem with the value at path; Parse adds the line.
func fieldErr(path, format string, args ...any) error {
	return &yamlfile.Error{Path: path, Err: fmt.Errorf(format, args...)}
}
