package scenario

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/num"
)

// Parse reads and validates a scenario from YAML.
//
// The library decodes the file into the types below, refusing a key they do
// not have (KnownFields). Each value keeps its node, so that reading it
// afterwards names its key and line. An outline of the document, made first,
// refuses what the library would let through (a key given twice, a value
// left empty, the merge key <<) or take long over, and gives the library's
// own errors the path of their key (see reader).
//
// Of several problems, the first the outline finds is reported; else the
// first in the file among those of single values; else the first of the
// checks that involve several keys.
func Parse(data []byte) (*Scenario, error) {
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("scenario is more than the bound of %s bytes", num.Group(MaxFileBytes))
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("scenario is not valid YAML: %w", err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, errors.New("scenario is empty")
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, at(root, errors.New("the scenario: want a mapping of keys to values"))
	}
	var r reader
	if err := r.outline(root, -1); err != nil {
		return nil, err
	}
	var f file
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		r.decodeError(err)
	}
	return r.scenario(&f, root)
}

// file is a scenario file as the library decodes it.
type file struct {
	Name     text         `yaml:"name"`
	Duration duration     `yaml:"duration"`
	Seed     whole        `yaml:"seed"`
	Provider fileProvider `yaml:"provider"`
	Flows    []fileFlow   `yaml:"flows"`
}

type fileProvider struct {
	Profile          text             `yaml:"profile"`
	Window           text             `yaml:"window"`
	Accounting       text             `yaml:"accounting"`
	Latency          duration         `yaml:"latency"`
	DefaultMaxTokens whole            `yaml:"default_max_tokens"`
	Faults           fileFaults       `yaml:"faults"`
	Limits           map[string]whole `yaml:"limits"`
	Unannounced      []text           `yaml:"unannounced"`
}

type fileFaults struct {
	Error5xx number `yaml:"error_5xx"`
	Timeout  number `yaml:"timeout"`
	Reset    number `yaml:"reset"`
	BadJSON  number `yaml:"bad_json"`
}

type fileFlow struct {
	Name             text   `yaml:"name"`
	Priority         whole  `yaml:"priority"`
	Weight           number `yaml:"weight"`
	Backlog          whole  `yaml:"backlog"`
	ArrivalsPerDay   number `yaml:"arrivals_per_day"`
	After            text   `yaml:"after"`
	BatchMax         whole  `yaml:"batch_max"`
	PromptTokens     whole  `yaml:"prompt_tokens"`
	ItemInputTokens  whole  `yaml:"item_input_tokens"`
	ItemOutputTokens whole  `yaml:"item_output_tokens"`
	ItemMaxTokens    whole  `yaml:"item_max_tokens"`
}

// sections are the parts of a file that are mappings or lists, by the Go
// type the library decodes each into (as its errors name it): the path of
// the section ([] for every item of a list) and what its value must be.
var sections = map[string]struct{ path, want string }{
	typeName[file]():             {"", "want a mapping of keys to values"},
	typeName[fileProvider]():     {"provider", "want a mapping of keys to values"},
	typeName[fileFaults]():       {"provider.faults", "want a mapping of keys to values"},
	typeName[map[string]whole](): {"provider.limits", "want a mapping of keys to values"},
	typeName[[]text]():           {"provider.unannounced", "want a list of limits, such as [otpm]"},
	typeName[[]fileFlow]():       {"flows", "want a list of flows"},
	typeName[fileFlow]():         {"flows[]", "want a mapping of keys to values"},
}

func typeName[T any]() string { return reflect.TypeFor[T]().String() }

const unknownLimit = "unknown limit (want rpm, rpd, tpm, tpd, itpm or otpm)"

// scenario reads the decoded file f, whose document has the mapping root:
// each value within its bounds, then what involves several keys of a
// mapping, then what Validate checks.
func (r *reader) scenario(f *file, root *yaml.Node) (*Scenario, error) {
	s := &Scenario{Provider: Provider{Profile: "openai", DefaultMaxTokens: DefaultMaxTokens}}
	r.text(f.Name, "name", &s.Name)
	if r.duration(f.Duration, "duration", &s.Duration) && s.Duration > MaxDuration {
		r.bad(f.Duration.node, "duration", aboveDuration(MaxDuration))
	}
	r.whole(f.Seed, "seed", math.MinInt64, math.MaxInt64, &s.Seed)
	r.provider(&f.Provider, &s.Provider)
	for i := range f.Flows {
		s.Flows = append(s.Flows, r.flow(&f.Flows[i], fmt.Sprintf("flows[%d]", i)))
	}
	if err := r.first(); err != nil {
		return nil, err
	}

	// Every value is good: what involves several keys, at the line of the mapping.
	provider, flows := field(root, "provider"), field(root, "flows")
	if faults := field(provider, "faults"); faults != nil {
		if sum := s.Provider.Faults.Sum(); sum > 1+1e-9 {
			r.add(faults, at(faults, fmt.Errorf("provider.faults: the fractions add up to %v, more than 1", sum)))
		}
	}
	if err := s.Provider.checkUnannounced(); err != nil {
		unannounced := field(provider, "unannounced")
		r.add(unannounced, at(unannounced, err))
	}
	for i, fl := range f.Flows {
		path, item := fmt.Sprintf("flows[%d]", i), flows.Content[i]
		if fl.Name.node == nil {
			r.add(item, at(item, fmt.Errorf("%s.name: missing", path)))
		} else if err := s.Flows[i].checkRequest(path); err != nil {
			r.add(item, at(item, err))
		}
	}
	if err := r.first(); err != nil {
		return nil, err
	}

	if f.Duration.node == nil {
		return nil, errors.New("duration: missing (a Go duration such as 168h)")
	}
	// What Validate checks, but the total of items gets the line of flows.
	if err := s.validate(); err != nil {
		return nil, err
	}
	if err := s.checkItems(); err != nil {
		return nil, at(flows, err)
	}
	return s, nil
}

func (r *reader) provider(f *fileProvider, p *Provider) {
	if r.text(f.Profile, "provider.profile", &p.Profile) && !ValidProfile(p.Profile) {
		r.bad(f.Profile.node, "provider.profile", "is not groq, openai or anthropic")
	}
	var s string
	if r.text(f.Window, "provider.window", &s) {
		var err error
		if p.Window, err = ParseWindow(s); err != nil {
			r.add(f.Window.node, at(f.Window.node, fmt.Errorf("provider.window: %w", err)))
		}
	}
	if r.text(f.Accounting, "provider.accounting", &s) {
		var err error
		if p.Accounting, err = ParseAccounting(s); err != nil {
			r.add(f.Accounting.node, at(f.Accounting.node, fmt.Errorf("provider.accounting: %w", err)))
		}
	}
	if r.duration(f.Latency, "provider.latency", &p.Latency) {
		switch {
		case p.Latency < 0:
			r.bad(f.Latency.node, "provider.latency", "is negative")
		case p.Latency > MaxLatency:
			r.bad(f.Latency.node, "provider.latency", aboveDuration(MaxLatency))
		}
	}
	r.whole(f.DefaultMaxTokens, "provider.default_max_tokens", 1, MaxOutputTokens, &p.DefaultMaxTokens)
	for _, x := range []struct {
		key string
		v   number
		dst *float64
	}{
		{"error_5xx", f.Faults.Error5xx, &p.Faults.Error5xx},
		{"timeout", f.Faults.Timeout, &p.Faults.Timeout},
		{"reset", f.Faults.Reset, &p.Faults.Reset},
		{"bad_json", f.Faults.BadJSON, &p.Faults.BadJSON},
	} {
		path := "provider.faults." + x.key
		if r.number(x.v, path, x.dst) && !(*x.dst >= 0 && *x.dst <= 1) {
			r.bad(x.v.node, path, "is not a fraction in [0, 1]")
		}
	}
	for name, v := range f.Limits {
		if v.node == nil {
			continue // no value: the outline says so
		}
		path := "provider.limits." + name
		l, err := governor.ParseLimit(name)
		if err != nil || name != l.String() {
			r.add(v.node, at(v.node, fmt.Errorf("%s: %s", path, unknownLimit)))
			continue
		}
		r.whole(v, path, 1, MaxLimit, &p.Limits[l])
	}
	// Up to the list's first problem: a long list has one at every item.
	for i, v := range f.Unannounced {
		path := fmt.Sprintf("provider.unannounced[%d]", i)
		if !r.text(v, path, &s) {
			break
		}
		l, err := governor.ParseLimit(s)
		if err != nil || s != l.String() {
			r.bad(v.node, path, "is not a limit (want rpm, rpd, tpm, tpd, itpm or otpm)")
			break
		}
		if p.Unannounced[l] {
			r.bad(v.node, path, "is given twice")
			break
		}
		p.Unannounced[l] = true
	}
}

func (r *reader) flow(f *fileFlow, path string) Flow {
	fl := Flow{Weight: 1, BatchMax: 1}
	if r.text(f.Name, path+".name", &fl.Name) && fl.Name == "" {
		r.add(f.Name.node, at(f.Name.node, fmt.Errorf("%s.name: empty", path)))
	}
	var x int64
	if r.whole(f.Priority, path+".priority", math.MinInt32, math.MaxInt32, &x) {
		fl.Priority = int(x)
	}
	if r.number(f.Weight, path+".weight", &fl.Weight) {
		if msg := outsideFloat(fl.Weight, MinWeight, MaxWeight); msg != "" {
			r.bad(f.Weight.node, path+".weight", msg)
		}
	}
	if r.whole(f.Backlog, path+".backlog", 0, MaxBacklog, &x) {
		fl.Backlog = int(x)
	}
	if r.number(f.ArrivalsPerDay, path+".arrivals_per_day", &fl.ArrivalsPerDay) {
		if msg := outsideArrivals(fl.ArrivalsPerDay); msg != "" {
			r.bad(f.ArrivalsPerDay.node, path+".arrivals_per_day", msg)
		}
	}
	r.text(f.After, path+".after", &fl.After)
	if r.whole(f.BatchMax, path+".batch_max", 1, MaxBatch, &x) {
		fl.BatchMax = int(x)
	}
	r.whole(f.PromptTokens, path+".prompt_tokens", 0, MaxInputTokens, &fl.PromptTokens)
	r.whole(f.ItemInputTokens, path+".item_input_tokens", 0, MaxInputTokens, &fl.ItemInputTokens)
	r.whole(f.ItemOutputTokens, path+".item_output_tokens", 0, MaxOutputTokens, &fl.ItemOutputTokens)
	r.whole(f.ItemMaxTokens, path+".item_max_tokens", 0, MaxOutputTokens, &fl.ItemMaxTokens)
	return fl
}

// field returns the value of key in the mapping n, through aliases; nil if
// there is none.
func field(n *yaml.Node, key string) *yaml.Node {
	if n == nil {
		return nil
	}
	if n = deref(n); n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return deref(n.Content[i+1])
		}
	}
	return nil
}
