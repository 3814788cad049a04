package scenario

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// value is a scalar of the file: the library keeps its node, and the value
// is read once the file is decoded, when its path is known, so that an
// error names the key and the line. The library does not call UnmarshalYAML
// for an empty value (the outline refuses those).
type value struct{ node *yaml.Node }

func (v *value) UnmarshalYAML(n *yaml.Node) error {
	v.node = n
	return nil
}

type (
	text     struct{ value } // a string
	whole    struct{ value } // a whole number: 1e6 and 1_000_000 count
	number   struct{ value } // a finite number
	duration struct{ value } // a Go duration such as 90s
)

// reader gathers the problems of one file, each with its place, and reads
// its values. Each method reading a value records what is wrong with it and
// reports whether the value was given and good.
//
// The library's own errors name a line and a key or a Go type, not where
// the key is; reader first outlines the document, recording every value it
// holds, so that it can name the path of what the library refused.
type reader struct {
	entries  []entry // every value of the document, in order
	problems []problem
}

// entry is a value of the document as written: a mapping's value under its
// key, or an item of a list.
type entry struct {
	up    int        // the entry that holds this one; -1 for a key of the document
	key   *yaml.Node // nil for an item of a list
	index int        // an item's place in its list
	value *yaml.Node
}

// path returns the path of entries[i], such as flows[2].weight, or with
// section true its section: [] for every index, as in flows[].weight.
func (r *reader) path(i int, section bool) string {
	var parts []string
	for ; i >= 0; i = r.entries[i].up {
		switch e := r.entries[i]; {
		case e.key != nil:
			parts = append(parts, "."+e.key.Value)
		case section:
			parts = append(parts, "[]")
		default:
			parts = append(parts, "["+strconv.Itoa(e.index)+"]")
		}
	}
	slices.Reverse(parts)
	return strings.TrimPrefix(strings.Join(parts, ""), ".")
}

type problem struct {
	line, column int // where it is, to report the first in the file
	err          error
}

func (r *reader) add(n *yaml.Node, err error) {
	p := problem{line: math.MaxInt, err: err}
	if n != nil {
		p.line, p.column = n.Line, n.Column
	}
	r.problems = append(r.problems, p)
}

// bad records that the value at n is wrong in the way what says.
func (r *reader) bad(n *yaml.Node, path, what string) { r.add(n, valueErr(path, n, what)) }

// first returns the problem found first in the file, or nil.
func (r *reader) first() error {
	if len(r.problems) == 0 {
		return nil
	}
	return slices.MinFunc(r.problems, func(a, b problem) int {
		return cmp.Or(cmp.Compare(a.line, b.line), cmp.Compare(a.column, b.column))
	}).err
}

// maxKeys bounds the keys of one mapping, far above the 11 of a flow: the
// library's check for repeated keys takes time that grows with the square of
// their number (half a minute for 100,000).
const maxKeys = 100

// outline records every value of the tree n, held by entries[up], and
// returns the first of what the library would let through, report without
// a path or take long to report: a key given twice, a key that is not a name
// (see isName), a value left empty, a mapping of more than maxKeys keys,
// more than MaxFlows flows. An alias is not followed: what it names is
// outlined where that is written.
func (r *reader) outline(n *yaml.Node, up int) error {
	visit := func(key *yaml.Node, index int, v *yaml.Node) error {
		r.entries = append(r.entries, entry{up, key, index, v})
		i := len(r.entries) - 1
		if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null" {
			what, section := "has no value", r.path(i, true)
			for _, sec := range sections {
				if sec.path == section {
					what = sec.want
				}
			}
			return at(v, fmt.Errorf("%s: %s", r.path(i, false), what))
		}
		return r.outline(v, i)
	}
	switch n.Kind {
	case yaml.MappingNode:
		path := func(key string) string { // of a key of n, made only for an error
			if up < 0 {
				return key
			}
			return r.path(up, false) + "." + key
		}
		if keys := len(n.Content) / 2; keys > maxKeys {
			what := "the scenario"
			if up >= 0 {
				what = r.path(up, false)
			}
			return at(n, fmt.Errorf("%s: %d keys %s", what, keys, above(maxKeys)))
		}
		seen := make(map[string]bool, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if seen[k.Value] {
				return at(k, fmt.Errorf("%s: given twice", path(k.Value)))
			}
			seen[k.Value] = true
			if !isName(k) {
				what := "unknown key"
				if up >= 0 && r.path(up, true) == "provider.limits" {
					what = unknownLimit
				}
				return at(deref(v), fmt.Errorf("%s: %s", path(k.Value), what))
			}
			if err := visit(k, 0, v); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		// The library would decode every flow, however many.
		if len(n.Content) > MaxFlows && up >= 0 && r.path(up, true) == "flows" {
			return at(n, fmt.Errorf("flows: %d flows %s", len(n.Content), above(MaxFlows)))
		}
		for i, v := range n.Content {
			if err := visit(nil, i, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// isName reports whether the library reads the key k as written, as the
// name of a field or of a limit: it reads any scalar as its text (a number
// too) but for an empty key, the merge key <<, an alias (as what it names)
// and a tag whose value it refuses or converts (!!int seed, !!binary).
func isName(k *yaml.Node) bool {
	var s string
	tag := k.ShortTag()
	return k.Kind == yaml.ScalarNode && tag != "!!null" && tag != "!!merge" && k.Decode(&s) == nil && s == k.Value
}

// The library's errors, as go.yaml.in/yaml/v3 words them.
var (
	notFound = regexp.MustCompile(`(?s)^line (\d+): field (.*) not found in type (\S+)$`)
	notKind  = regexp.MustCompile("(?s)^line (\\d+): cannot unmarshal (\\S+)(?: `.*`)? into (\\S+)$")
)

// decodeError records the library's error err. An error it cannot place
// comes after every other problem: it is reported as the library words it.
func (r *reader) decodeError(err error) {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		r.add(nil, fmt.Errorf("scenario: %w", err))
		return
	}
	spots := make(map[spot]int) // the first entry at each
	first := func(s spot, i int) {
		if _, ok := spots[s]; !ok {
			spots[s] = i
		}
	}
	for i, e := range r.entries {
		section, v := r.path(i, true), deref(e.value)
		first(spot{v.Line, section, v.ShortTag()}, i)
		if e.key != nil {
			first(spot{e.key.Line, section, ""}, i)
		}
	}
	for _, msg := range te.Errors {
		if !r.place(msg, spots) {
			r.add(nil, errors.New(msg))
		}
	}
}

// spot is where the library's errors place an entry: by the line of its
// key, or by the line and tag of its value; with its section.
type spot struct {
	line         int
	section, tag string // tag "" for the key
}

// place records the library's message msg with the path it is about, and
// reports whether it could.
func (r *reader) place(msg string, spots map[spot]int) bool {
	if m := notFound.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		if sec, ok := sections[m[3]]; ok {
			if i, ok := spots[spot{line, strings.TrimPrefix(sec.path+"."+m[2], "."), ""}]; ok {
				e := r.entries[i]
				r.add(e.key, unknown(r.path(i, false), deref(e.value)))
				return true
			}
		}
	}
	if m := notKind.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		if sec, ok := sections[m[3]]; ok {
			if i, ok := spots[spot{line, sec.path, m[2]}]; ok {
				e := r.entries[i]
				r.add(e.value, at(deref(e.value), fmt.Errorf("%s: %s", r.path(i, false), sec.want)))
				return true
			}
		}
	}
	return false
}

func (r *reader) text(v text, path string, dst *string) bool {
	return v.node != nil && r.ok(v.node, str(v.node, path, dst))
}

func (r *reader) whole(v whole, path string, lo, hi int64, dst *int64) bool {
	return v.node != nil && r.ok(v.node, integer(v.node, path, lo, hi, dst))
}

func (r *reader) number(v number, path string, dst *float64) bool {
	if v.node == nil {
		return false
	}
	x, err := parseNumber(v.node, path)
	*dst = x
	return r.ok(v.node, err)
}

func (r *reader) duration(v duration, path string, dst *time.Duration) bool {
	return v.node != nil && r.ok(v.node, parseDuration(v.node, path, dst))
}

func (r *reader) ok(n *yaml.Node, err error) bool {
	if err != nil {
		r.add(n, err)
		return false
	}
	return true
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

// parseNumber reads a finite number.
func parseNumber(v *yaml.Node, path string) (float64, error) {
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

func parseDuration(v *yaml.Node, path string, dst *time.Duration) error {
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
