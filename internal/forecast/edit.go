package forecast

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-dev/sluice/internal/govtext"
)

// Change is one what-if change to a scenario file: set the value at a path,
// or drop a flow.
type Change struct {
	// Path is a key path: "tpd" (a provider limit, short for
	// provider.limits.tpd), "provider.latency", "flows.summary.weight" (a
	// flow by its name), "duration".
	Path  string
	Value string // YAML scalar; ignored when DropFlow is set
	// DropFlow names a flow to remove.
	DropFlow string
}

// ParseSet reads a --set argument, PATH=VALUE.
func ParseSet(s string) (Change, error) {
	path, value, ok := strings.Cut(s, "=")
	if !ok || strings.TrimSpace(path) == "" {
		return Change{}, fmt.Errorf("--set %q: want PATH=VALUE, such as tpd=500000 or flows.summary.weight=2", s)
	}
	return Change{Path: strings.TrimSpace(path), Value: strings.TrimSpace(value)}, nil
}

func (c Change) String() string {
	if c.DropFlow != "" {
		return "--drop-flow " + c.DropFlow
	}
	return "--set " + c.Path + "=" + c.Value
}

// Edit applies changes to the scenario file data and parses the result, as
// strictly as Parse: a change that names an unknown key or gives a bad value
// is an error naming the change.
func Edit(data []byte, changes []Change) (*Scenario, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("the scenario is not a YAML mapping")
	}
	root := doc.Content[0]
	for _, c := range changes {
		if err := apply(root, c); err != nil {
			return nil, fmt.Errorf("%s: %w", c, err)
		}
		var buf bytes.Buffer
		enc := yaml.NewEncoder(&buf)
		if err := enc.Encode(root); err != nil {
			return nil, err
		}
		// Each change alone, so an error names the change that caused it.
		if _, err := Parse(buf.Bytes()); err != nil {
			return nil, fmt.Errorf("%s: %w", c, withoutLine(err))
		}
	}
	out, err := yaml.Marshal(root)
	if err != nil {
		return nil, err
	}
	return Parse(out)
}

// withoutLine drops the line a parse error names: it is a line of the
// edited text, not of the user's file.
func withoutLine(err error) error {
	msg := err.Error()
	if i := strings.LastIndex(msg, " (line "); i >= 0 && strings.HasSuffix(msg, ")") {
		return fmt.Errorf("%s", msg[:i])
	}
	return err
}

func apply(root *yaml.Node, c Change) error {
	if c.DropFlow != "" {
		flows := lookup(root, "flows")
		if flows == nil || flows.Kind != yaml.SequenceNode {
			return fmt.Errorf("the scenario has no flows")
		}
		i := flowIndex(flows, c.DropFlow)
		if i < 0 {
			return fmt.Errorf("no flow is named %q", c.DropFlow)
		}
		flows.Content = slices.Delete(flows.Content, i, i+1)
		return nil
	}
	parts := strings.Split(c.Path, ".")
	if len(parts) == 1 {
		if _, err := govtext.Limit(parts[0]); err == nil {
			parts = []string{"provider", "limits", parts[0]}
		}
	}
	var value yaml.Node
	if err := yaml.Unmarshal([]byte(c.Value), &value); err != nil || len(value.Content) != 1 || value.Content[0].Kind != yaml.ScalarNode {
		return fmt.Errorf("%q is not a single value", c.Value)
	}
	node := root
	for i := 0; i < len(parts)-1; i++ {
		if parts[i] == "flows" {
			flows := lookup(node, "flows")
			if flows == nil || i+1 >= len(parts)-1 {
				return fmt.Errorf("want flows.NAME.KEY")
			}
			j := flowIndex(flows, parts[i+1])
			if j < 0 {
				return fmt.Errorf("no flow is named %q", parts[i+1])
			}
			node = flows.Content[j]
			i++
			continue
		}
		next := lookup(node, parts[i])
		if next == nil {
			next = &yaml.Node{Kind: yaml.MappingNode}
			node.Content = append(node.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: parts[i]}, next)
		}
		if next.Kind != yaml.MappingNode {
			return fmt.Errorf("%s is not a section", strings.Join(parts[:i+1], "."))
		}
		node = next
	}
	key := parts[len(parts)-1]
	for i := 0; i+1 < len(node.Content); i += 2 {
		if node.Content[i].Value == key {
			node.Content[i+1] = value.Content[0]
			return nil
		}
	}
	node.Content = append(node.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key}, value.Content[0])
	return nil
}

// lookup returns the value of key in mapping m, or nil.
func lookup(m *yaml.Node, key string) *yaml.Node {
	if m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// flowIndex is the index in the flows sequence of the flow named name, or -1.
func flowIndex(flows *yaml.Node, name string) int {
	for i, f := range flows.Content {
		if n := lookup(f, "name"); n != nil && n.Value == name {
			return i
		}
	}
	return -1
}
