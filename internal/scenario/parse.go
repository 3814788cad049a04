package scenario

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-dev/sluice/governor"
)

// Parse reads and validates a scenario from YAML.
//
// The YAML is walked as a node tree rather than decoded into tagged structs
// so that every error can name the full key path and line of what is wrong.
func Parse(data []byte) (*Scenario, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("scenario is not valid YAML: %w", err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, errors.New("scenario is empty")
	}
	s := &Scenario{Provider: Provider{Profile: "openai", DefaultMaxTokens: DefaultMaxTokens}}
	var durationSet bool
	err := eachKey(doc.Content[0], "", func(key string, path string, v *yaml.Node) error {
		switch key {
		case "name":
			return str(v, path, &s.Name)
		case "duration":
			durationSet = true
			return duration(v, path, &s.Duration)
		case "seed":
			return integer(v, path, &s.Seed)
		case "provider":
			return parseProvider(v, path, &s.Provider)
		case "flows":
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
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return s, nil
}

func parseProvider(n *yaml.Node, prefix string, p *Provider) error {
	return eachKey(n, prefix, func(key, path string, v *yaml.Node) error {
		switch key {
		case "profile":
			if err := str(v, path, &p.Profile); err != nil {
				return err
			}
			if !ValidProfile(p.Profile) {
				return valueErr(path, v, "is not groq, openai or anthropic")
			}
			return nil
		case "window":
			var s string
			if err := str(v, path, &s); err != nil {
				return err
			}
			w, err := ParseWindow(s)
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
			a, err := ParseAccounting(s)
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
			return nil
		case "default_max_tokens":
			if err := integer(v, path, &p.DefaultMaxTokens); err != nil {
				return err
			}
			if p.DefaultMaxTokens <= 0 {
				return valueErr(path, v, "is not positive")
			}
			return nil
		case "faults":
			return parseFaults(v, path, &p.Faults)
		case "limits":
			return eachKey(v, path, func(name, lpath string, lv *yaml.Node) error {
				l, err := governor.ParseLimit(name)
				if err != nil || name != l.String() {
					return at(lv, fmt.Errorf("%s: unknown limit (want rpm, rpd, tpm, tpd, itpm or otpm)", lpath))
				}
				var n int64
				if err := integer(lv, lpath, &n); err != nil {
					return err
				}
				if n <= 0 {
					return valueErr(lpath, lv, "is not positive")
				}
				p.Limits[l] = n
				return nil
			})
		}
		return unknown(path, v)
	})
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
		if err := number(v, path, dst); err != nil {
			return err
		}
		if !(*dst >= 0 && *dst <= 1) {
			return valueErr(path, v, "is not a fraction in [0, 1]")
		}
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
	for i, item := range n.Content {
		f := Flow{Weight: 1, BatchMax: 1}
		p := fmt.Sprintf("%s[%d]", prefix, i)
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
				var x int64
				if err := integer(v, path, &x); err != nil {
					return err
				}
				if x < math.MinInt32 || x > math.MaxInt32 {
					return valueErr(path, v, "is out of range")
				}
				f.Priority = int(x)
				return nil
			case "weight":
				if err := number(v, path, &f.Weight); err != nil {
					return err
				}
				if !(f.Weight > 0) {
					return valueErr(path, v, "is not positive")
				}
				return nil
			case "backlog":
				var x int64
				if err := nonNegative(v, path, &x); err != nil {
					return err
				}
				if x > math.MaxInt32 {
					return valueErr(path, v, "is too large")
				}
				f.Backlog = int(x)
				return nil
			case "arrivals_per_day":
				if err := number(v, path, &f.ArrivalsPerDay); err != nil {
					return err
				}
				if !(f.ArrivalsPerDay >= 0) {
					return valueErr(path, v, "is negative")
				}
				return nil
			case "after":
				return str(v, path, &f.After)
			case "batch_max":
				var x int64
				if err := integer(v, path, &x); err != nil {
					return err
				}
				if x < 1 || x > math.MaxInt32 {
					return valueErr(path, v, "is not a whole number of at least 1")
				}
				f.BatchMax = int(x)
				return nil
			case "prompt_tokens":
				return nonNegative(v, path, &f.PromptTokens)
			case "item_input_tokens":
				return nonNegative(v, path, &f.ItemInputTokens)
			case "item_output_tokens":
				return nonNegative(v, path, &f.ItemOutputTokens)
			case "item_max_tokens":
				return nonNegative(v, path, &f.ItemMaxTokens)
			}
			return unknown(path, v)
		})
		if err != nil {
			return err
		}
		if f.Name == "" {
			return at(item, fmt.Errorf("%s.name: missing", p))
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

func integer(v *yaml.Node, path string, dst *int64) error {
	if err := scalar(v, path); err != nil {
		return err
	}
	if v.ShortTag() != "!!int" {
		return valueErr(path, v, "is not a whole number")
	}
	var x int64
	if err := v.Decode(&x); err != nil {
		return valueErr(path, v, "is not a whole number")
	}
	*dst = x
	return nil
}

func nonNegative(v *yaml.Node, path string, dst *int64) error {
	if err := integer(v, path, dst); err != nil {
		return err
	}
	if *dst < 0 {
		return valueErr(path, v, "is negative")
	}
	return nil
}

func number(v *yaml.Node, path string, dst *float64) error {
	if err := scalar(v, path); err != nil {
		return err
	}
	if t := v.ShortTag(); t != "!!int" && t != "!!float" {
		return valueErr(path, v, "is not a number")
	}
	x, err := strconv.ParseFloat(v.Value, 64)
	if err != nil {
		if err := v.Decode(&x); err != nil {
			return valueErr(path, v, "is not a number")
		}
	}
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return valueErr(path, v, "is not a finite number")
	}
	*dst = x
	return nil
}

func duration(v *yaml.Node, path string, dst *time.Duration) error {
	if err := scalar(v, path); err != nil {
		return err
	}
	d, err := time.ParseDuration(v.Value)
	if err != nil {
		return valueErr(path, v, "is not a duration such as 90s, 2m or 168h")
	}
	*dst = d
	return nil
}
