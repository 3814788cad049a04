package yamlfile

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// even is a value that reads itself and refuses odd numbers.
type even int

func (e *even) UnmarshalYAML(n *yaml.Node) error {
	var x int
	if err := n.Decode(&x); err != nil || x%2 != 0 {
		return fmt.Errorf("%q is not even", n.Value)
	}
	*e = even(x)
	return nil
}

// word is read from text and refuses anything but "yes".
type word string

func (w *word) UnmarshalText(b []byte) error {
	if string(b) != "yes" {
		return fmt.Errorf("%q is not yes", b)
	}
	*w = word(b)
	return nil
}

type doc struct {
	Name  string `yaml:"name"`
	Count int    `yaml:"count"`
	Inner struct {
		Step *even `yaml:"step"`
		Say  word  `yaml:"say"`
	} `yaml:"inner"`
	Items []struct {
		N even `yaml:"n"`
	} `yaml:"items"`
	Counts map[even]string `yaml:"counts"`
	Hidden string          `yaml:"-"`
}

func TestDecode(t *testing.T) {
	t.Parallel()
	var d doc
	lines, err := Decode([]byte("name: a\ninner:\n  step: 4\n  say: yes\nitems:\n  - n: 2\n  - &i {n: 6}\n  - *i\ncounts: {2: two}\n"), &d)
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "a" || *d.Inner.Step != 4 || d.Inner.Say != "yes" || len(d.Items) != 3 || d.Items[2].N != 6 || d.Counts[2] != "two" {
		t.Errorf("decoded %+v", d)
	}
	for path, want := range map[string]int{"name": 1, "inner.step": 3, "items[1]": 7, "items[1].n": 7, "items[2]": 8, "items[1].x": 7, "count": 0, "": 0} {
		if got := lines.Line(path); got != want {
			t.Errorf("Line(%q) = %d, want %d", path, got, want)
		}
	}
	err = lines.Place(&Error{Path: "items[0].n", Err: errors.New("too small")})
	if err.Error() != "items[0].n: too small (line 6)" {
		t.Errorf("placed: %v", err)
	}
}

func TestDecodeErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ yaml, want string }{
		{"", "the file is empty"},
		{"~", "the file is empty"},
		{"name: [", "not valid YAML: yaml: line 1:"},
		{"- a", "want a mapping of keys to values (line 1)"},
		{"name: a\ncolour: red", "colour: unknown key (line 2)"},
		{"inner:\n  stepp: 2", "inner.stepp: unknown key (line 2)"},
		{"Hidden: x", "Hidden: unknown key (line 1)"},
		{"-: x", "-: unknown key (line 1)"},
		{"name: a\nname: b", "name: given twice (line 2)"},
		{"name:", "name: has no value (line 1)"},
		{"items: [~]", "items[0]: has no value (line 1)"},
		{"inner: 5", "inner: want a mapping of keys to values (line 1)"},
		{"items: {n: 2}", "items: want a list (line 1)"},
		{"name: {a: 1}", "name: want a single value, not a mapping or list (line 1)"},
		{"count: lots", "count: cannot unmarshal !!str `lots` into int (line 1)"},
		{"inner:\n  step: 3", `inner.step: "3" is not even (line 2)`},
		{"inner: {say: no}", `inner.say: "no" is not yes (line 1)`},
		{"items:\n  - n: 2\n  - n: 5", `items[1].n: "5" is not even (line 3)`},
		{"counts: {3: three}", `counts.3: "3" is not even (line 1)`},
		{"counts: {~: none}", "counts.~: unknown key (line 1)"},
		{"counts: {2: a, 2: b}", "counts.2: given twice (line 1)"},
		{"<<: {name: a}", "<<: unknown key (line 1)"},
		{"x: &n {n: 3}\nitems: [*n]", "x: unknown key (line 1)"},
		{"inner: &i {step: 2}\nitems: [*i]", "items[0].step: unknown key (line 1)"},
		{"? [a]\n: b", "unknown key (line 1)"},
	} {
		var d doc
		_, err := Decode([]byte(tc.yaml), &d)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.yaml, err, tc.want)
		}
	}
}
