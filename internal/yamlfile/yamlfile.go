// Package yamlfile reads the YAML files sluice reads — quota scenarios,
// the configs of serve and the gateway — bounded, and only when they are
// regular files (ReadFile), and decodes them with go.yaml.in/yaml/v3,
// strictly, placing every problem by its key path and line:
// "flows[2].batchmax: unknown key (line 31)".
package yamlfile

import (
	"bytes"
	"encoding"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Error is a problem with the value at Path, such as flows[2].weight; Line
// is where the file gives it, 0 when that is not known (a value built in
// code, a key left out).
type Error struct {
	Path string
	Line int
	Err  error
}

func (e *Error) Error() string {
	s := e.Err.Error()
	if e.Path != "" {
		s = e.Path + ": " + s
	}
	if e.Line > 0 {
		s += fmt.Sprintf(" (line %d)", e.Line)
	}
	return s
}

// Lines holds the line of every path a file gives a value at.
type Lines map[string]int

// Line returns the line of path or, for a path the file leaves out, of the
// nearest path it lies within (flows[1] for flows[1].weight); 0 if none.
func (l Lines) Line(path string) int {
	for path != "" {
		if n, ok := l[path]; ok {
			return n
		}
		path = path[:max(strings.LastIndexAny(path, ".["), 0)]
	}
	return 0
}

// Place gives err, if it is an *Error without a line, the line of its path,
// and returns it.
func (l Lines) Place(err error) error {
	var e *Error
	if errors.As(err, &e) && e.Line == 0 {
		e.Line = l.Line(e.Path)
	}
	return err
}

// Decode decodes data, one YAML document, into the struct v points to, and
// returns the line of every path it gives, to place the errors found in the
// values afterwards.
//
// v's type is made of structs (their keys are their fields' yaml tags),
// slices, maps and single values: any other type, or one with an
// UnmarshalYAML or UnmarshalText method, which reads its node or text and
// may refuse it. The library decodes data with KnownFields; first, Decode
// follows the document along v's type and refuses, as an *Error naming the
// path and the line of the first problem:
//   - a key that v's struct has no field for, and a key given twice;
//   - a key without a value, which the library would pass over;
//   - a mapping or list where v's type has something else, and a single
//     value where it has a mapping or list;
//   - a value its type refuses.
//
// An alias is followed where it is used; v's type must not nest a list or
// map within another, so that following aliases stays linear in the
// document's size.
func Decode(data []byte, v any) (Lines, error) { return decode(data, v, false) }

// DecodeSome decodes as Decode does, but passes over a key at the top
// level that v's struct has no field for: the keys of a file that also
// holds other settings, read by another part. Every key it reads is
// checked as Decode checks it.
func DecodeSome(data []byte, v any) (Lines, error) { return decode(data, v, true) }

func decode(data []byte, v any, some bool) (Lines, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	if len(doc.Content) == 0 || doc.Content[0].ShortTag() == "!!null" {
		return nil, errors.New("the file is empty")
	}
	lines := Lines{}
	root := doc.Content[0]
	if some && root.Kind == yaml.MappingNode {
		// Only the keys v reads, so that the library sees no others.
		kept := *root
		kept.Content = nil
		t := reflect.TypeOf(v).Elem()
		for i := 0; i+1 < len(root.Content); i += 2 {
			if k := root.Content[i]; k.Kind != yaml.ScalarNode || field(t, k.Value) != nil {
				kept.Content = append(kept.Content, k, root.Content[i+1])
			}
		}
		if err := lines.walk(&kept, t, ""); err != nil {
			return nil, err
		}
		return lines, kept.Decode(v)
	}
	if err := lines.walk(root, reflect.TypeOf(v).Elem(), ""); err != nil {
		return nil, err
	}
	// The walk refused all that the library would: an error here is a gap
	// in it, still refused.
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		return nil, err
	}
	return lines, nil
}

var (
	unmarshaler     = reflect.TypeFor[yaml.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// walk checks n as the library will decode it into a value of type t, and
// records the line of path and of every path within it.
func (l Lines) walk(n *yaml.Node, t reflect.Type, path string) error {
	l[path] = n.Line
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	fail := func(at *yaml.Node, path string, err error) error { return &Error{Path: path, Line: at.Line, Err: err} }
	kind := t.Kind()
	if pt := reflect.PointerTo(t); pt.Implements(unmarshaler) || pt.Implements(textUnmarshaler) {
		kind = reflect.Invalid // a single value, whatever its Go kind
	}
	switch {
	case n.ShortTag() == "!!null":
		return fail(n, path, errors.New("has no value"))
	case kind == reflect.Struct || kind == reflect.Map:
		if n.Kind != yaml.MappingNode {
			return fail(n, path, errors.New("want a mapping of keys to values"))
		}
		seen := make(map[string]bool, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := strings.TrimPrefix(path+"."+k.Value, ".")
			// A key that is not a plain name (an alias, a mapping, ~, the
			// merge key <<) is none the library would read as written.
			plain := k.Kind == yaml.ScalarNode && k.ShortTag() != "!!null" && k.ShortTag() != "!!merge"
			var et reflect.Type
			switch {
			case seen[k.Value]:
				return fail(k, p, errors.New("given twice"))
			case plain && kind == reflect.Map:
				if err := k.Decode(reflect.New(t.Key()).Interface()); err != nil {
					return fail(k, p, err)
				}
				et = t.Elem()
			case plain:
				et = field(t, k.Value)
			}
			if et == nil {
				return fail(k, p, errors.New("unknown key"))
			}
			seen[k.Value] = true
			if err := l.walk(v, et, p); err != nil {
				return err
			}
		}
	case kind == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return fail(n, path, errors.New("want a list"))
		}
		for i, item := range n.Content {
			if err := l.walk(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case n.Kind != yaml.ScalarNode:
		return fail(n, path, errors.New("want a single value, not a mapping or list"))
	default:
		err := n.Decode(reflect.New(t).Interface())
		var te *yaml.TypeError // the library's words for a plain type: "line 3: cannot unmarshal …"
		if errors.As(err, &te) && len(te.Errors) > 0 {
			_, msg, _ := strings.Cut(te.Errors[0], ": ")
			err = errors.New(msg)
		}
		if err != nil {
			return fail(n, path, err)
		}
	}
	return nil
}

// field returns the type of the field of struct t whose yaml tag is key, or nil.
func field(t reflect.Type, key string) reflect.Type {
	for i := range t.NumField() {
		f := t.Field(i)
		if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); f.IsExported() && name == key && name != "-" {
			return f.Type
		}
	}
	return nil
}
