package scenario

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/num"
	"github.com/sluice-dev/sluice/llm"
)

// Parse reads and validates a scenario from YAML.
//
// The YAML is walked as a node tree rather than decoded into tagged structs
// so that every error can name the full key path and line of what is wrong.
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
	s := &Scenario{Provider: Provider{Profile: llm.OpenAI, DefaultMaxTokens: DefaultMaxTokens}}
	var durationSet bool
	var flows *yaml.Node
	err := eachKey(doc.Content[0], "", func(key string, path string, v *yaml.Node) error {
		switch key {
		case "name":
			return str(v, path, &s.Name)
		case "duration":
			durationSet = true
			if err := duration(v, path, &s.Duration); err != nil {
				return err
			}
			if s.Duration > MaxDuration {
				return valueErr(path, v, aboveDuration(MaxDuration))
			}
			return nil
		case "seed":
			return integer(v, path, math.MinInt64, math.MaxInt64, &s.Seed)
		case "provider":
			return parseProvider(v, path, &s.Provider)
		case "flows":
			flows = v
			return parseFlows(v, path, &s.Flows)
		}
		return unknown(path, v)
	})
	if err != nil {
		return nil, err
	}
	if !durationSet {
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

func parseProvider(n *yaml.Node, prefix string, p *Provider) error {
	var unannounced *yaml.Node
	err := eachKey(n, prefix, func(key, path string, v *yaml.Node) error {
		switch key {
		case "profile":
			var s string
			if err := str(v, path, &s); err != nil {
				return err
			}
			p.Profile = llm.Profile(s)
			if !slices.Contains(llm.Profiles(), p.Profile) {
				return valueErr(path, v, "is not groq, openai or anthropic")
			}
			return nil
		case "window":
			var s string
			if err := str(v, path, &s); err != nil {
				return err
			}
			w, err := governor.ParseWindow(s)
			if err != nil {
				return at(v, fmt.Errorf("%s: %w", path, err))
			}
			p.Window = w
			return nil
		case "accounting":
			var s string
			if err := str(v, path, &s); err != nil {
				return err
			}
			a, err := governor.ParseAccounting(s)
			if err != nil {
				return at(v, fmt.Errorf("%s: %w", path, err))
			}
			p.Accounting = a
			return nil
		case "latency":
			if err := duration(v, path, &p.Latency); err != nil {
				return err
			}
			if p.Latency < 0 {
				return valueErr(path, v, "is negative")
			}
			if p.Latency > MaxLatency {
				return valueErr(path, v, aboveDuration(MaxLatency))
			}
			return nil
		case "default_max_tokens":
			return integer(v, path, 1, MaxOutputTokens, &p.DefaultMaxTokens)
		case "faults":
			return parseFaults(v, path, &p.Faults)
		case "limits":
			return eachKey(v, path, func(name, lpath string, lv *yaml.Node) error {
				l, err := governor.ParseLimit(name)
				if err != nil || name != l.String() {
					return at(lv, fmt.Errorf("%s: unknown limit (want rpm, rpd, tpm, tpd, itpm or otpm)", lpath))
				}
				return integer(lv, lpath, 1, MaxLimit, &p.Limits[l])
			})
		case "unannounced":
			unannounced = v
			return parseUnannounced(v, path, &p.Unannounced)
		}
		return unknown(path, v)
	})
	if err != nil {
		return err
	}
	// Checked once the whole provider is read: limits may come after it.
	if err := p.checkUnannounced(); err != nil {
		return at(unannounced, err)
	}
	return nil
}

// parseUnannounced reads a list of limit names, each at most once.
func parseUnannounced(n *yaml.Node, path string, dst *[governor.NumLimits]bool) error {
	if n.Kind != yaml.SequenceNode {
		return at(n, fmt.Errorf("%s: want a list of limits, such as [otpm]", path))
	}
	for i, v := range n.Content {
		v = deref(v)
		var name string
		if err := str(v, fmt.Sprintf("%s[%d]", path, i), &name); err != nil {
			return err
		}
		l, err := governor.ParseLimit(name)
		if err != nil || name != l.String() {
			return valueErr(fmt.Sprintf("%s[%d]", path, i), v, "is not a limit (want rpm, rpd, tpm, tpd, itpm or otpm)")
		}
		if dst[l] {
			return valueErr(fmt.Sprintf("%s[%d]", path, i), v, "is given twice")
		}
		dst[l] = true
	}
	return nil
}

func parseFaults(n *yaml.Node, prefix string, f *Faults) error {
	err := eachKey(n, prefix, func(key, path string, v *yaml.Node) error {
		var dst *float64
		switch key {
		case "error_5xx":
			dst = &f.Error5xx
		case "timeout":
			dst = &f.Timeout
		case "reset":
			dst = &f.Reset
		case "bad_json":
			dst = &f.BadJSON
		default:
			return unknown(path, v)
		}
		x, err := number(v, path)
		if err != nil {
			return err
		}
		if !(x >= 0 && x <= 1) {
			return valueErr(path, v, "is not a fraction in [0, 1]")
		}
		*dst = x
		return nil
	})
	if err != nil {
		return err
	}
	if sum := f.Sum(); sum > 1+1e-9 {
		return at(n, fmt.Errorf("%s: the fractions add up to %v, more than 1", prefix, sum))
	}
	return nil
}

func parseFlows(n *yaml.Node, prefix string, flows *[]Flow) error {
	if n.Kind != yaml.SequenceNode {
		return at(n, fmt.Errorf("%s: want a list of flows", prefix))
	}
	if len(n.Content) > MaxFlows {
		return at(n, fmt.Errorf("%s: %d flows %s", prefix, len(n.Content), above(MaxFlows)))
	}
	for i, item := range n.Content {
		f := Flow{Weight: 1, BatchMax: 1}
		p := fmt.Sprintf("%s[%d]", prefix, i)
		var x int64
		err := eachKey(item, p, func(key, path string, v *yaml.Node) error {
			switch key {
			case "name":
				if err := str(v, path, &f.Name); err != nil {
					return err
				}
				if f.Name == "" {
					return at(v, fmt.Errorf("%s: empty", path))
				}
				return nil
			case "priority":
				if err := integer(v, path, math.MinInt32, math.MaxInt32, &x); err != nil {
					return err
				}
				f.Priority = int(x)
				return nil
			case "weight":
				w, err := number(v, path)
				if err != nil {
					return err
				}
				if msg := outsideFloat(w, MinWeight, MaxWeight); msg != "" {
					return valueErr(path, v, msg)
				}
				f.Weight = w
				return nil
			case "backlog":
				if err := integer(v, path, 0, MaxBacklog, &x); err != nil {
					return err
				}
				f.Backlog = int(x)
				return nil
			case "arrivals_per_day":
				a, err := number(v, path)
				if err != nil {
					return err
				}
				if msg := outsideArrivals(a); msg != "" {
					return valueErr(path, v, msg)
				}
				f.ArrivalsPerDay = a
				return nil
			case "after":
				return str(v, path, &f.After)
			case "batch_max":
				if err := integer(v, path, 1, MaxBatch, &x); err != nil {
					return err
				}
				f.BatchMax = int(x)
				return nil
			case "prompt_tokens":
				return integer(v, path, 0, MaxInputTokens, &f.PromptTokens)
			case "item_input_tokens":
				return integer(v, path, 0, MaxInputTokens, &f.ItemInputTokens)
			case "item_output_tokens":
				return integer(v, path, 0, MaxOutputTokens, &f.ItemOutputTokens)
			case "item_max_tokens":
				return integer(v, path, 0, MaxOutputTokens, &f.ItemMaxTokens)
			}
			return unknown(path, v)
		})
		if err != nil {
			return err
		}
		if f.Name == "" {
			return at(item, fmt.Errorf("%s.name: missing", p))
		}
		if err := f.checkRequest(p); err != nil {
			return at(item, err)
		}
		*flows = append(*flows, f)
	}
	return nil
}

// eachKey calls fn for every key of the mapping n, with the key's full path.
// Repeated keys are an error: a second value would silently win otherwise.
func eachKey(n *yaml.Node, prefix string, fn func(key, path string, v *yaml.Node) error) error {
	n = deref(n)
	if n.Kind != yaml.MappingNode {
		what := "the scenario"
		if prefix != "" {
			what = prefix
		}
		return at(n, fmt.Errorf("%s: want a mapping of keys to values", what))
	}
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], deref(n.Content[i+1])
		path := k.Value
		if prefix != "" {
			path = prefix + "." + k.Value
		}
		if seen[k.Value] {
			return at(k, fmt.Errorf("%s: given twice", path))
		}
		seen[k.Value] = true
		if err := fn(k.Value, path, v); err != nil {
			return err
		}
	}
	return nil
}

func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// lineError carries the line of the offending node.
type lineError struct {
	line int
	err  error
}

func (e *lineError) Error() string { return fmt.Sprintf("%v (line %d)", e.err, e.line) }
func (e *lineError) Unwrap() error { return e.err }

func at(n *yaml.Node, err error) error {
	if n == nil || n.Line == 0 {
		return err
	}
	return &lineError{line: n.Line, err: err}
}

func unknown(path string, n *yaml.Node) error {
	return at(n, fmt.Errorf("%s: unknown key", path))
}

func valueErr(path string, v *yaml.Node, what string) error {
	return at(v, fmt.Errorf("%s: %q %s", path, v.Value, what))
}

func scalar(v *yaml.Node, path string) error {
	if v.Kind != yaml.ScalarNode {
		return at(v, fmt.Errorf("%s: want a single value, not a mapping or list", path))
	}
	return nil
}

func str(v *yaml.Node, path string, dst *string) error {
	if err := scalar(v, path); err != nil {
		return err
	}
	if v.ShortTag() != "!!str" {
		return valueErr(path, v, "is not a string")
	}
	*dst = v.Value
	return nil
}

// integer reads a whole number within [lo, hi]. A YAML float that is whole
// (1e6) counts; a number beyond int64 or float64 is out of every bound,
// never wrapped or zero.
func integer(v *yaml.Node, path string, lo, hi int64, dst *int64) error {
	if err := scalar(v, path); err != nil {
		return err
	}
	var x int64
	if v.ShortTag() == "!!int" && v.Decode(&x) == nil {
		if msg := outside(x, lo, hi); msg != "" {
			return valueErr(path, v, msg)
		}
		*dst = x
		return nil
	}
	f, ok := numeric(v)
	switch {
	case !ok || math.IsNaN(f) || (!math.IsInf(f, 0) && f != math.Trunc(f)):
		return valueErr(path, v, "is not a whole number")
	case f < float64(lo) || f < math.MinInt64:
		return valueErr(path, v, below(lo))
	case f > float64(hi) || f >= math.MaxInt64: // float64(math.MaxInt64) is 2⁶³
		return valueErr(path, v, above(hi))
	}
	*dst = int64(f) // whole, within [lo, hi]: exact enough for every bound
	return nil
}

// number reads a finite number.
func number(v *yaml.Node, path string) (float64, error) {
	if err := scalar(v, path); err != nil {
		return 0, err
	}
	x, ok := numeric(v)
	if !ok {
		return 0, valueErr(path, v, "is not a number")
	}
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0, valueErr(path, v, "is not a finite number")
	}
	return x, nil
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

func duration(v *yaml.Node, path string, dst *time.Duration) error {
	if err := scalar(v, path); err != nil {
		return err
	}
	d, err := time.ParseDuration(v.Value)
	if err != nil {
		if durationShape.MatchString(v.Value) {
			if strings.HasPrefix(v.Value, "-") {
				return valueErr(path, v, "is negative")
			}
			return valueErr(path, v, "is too large for a duration")
		}
		return valueErr(path, v, "is not a duration such as 90s, 2m or 168h")
	}
	*dst = d
	return nil
}
