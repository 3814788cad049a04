package jobs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"text/template"
	"text/template/parse"
	"unicode"
	"unicode/utf8"

	"github.com/sluice-dev/sluice/llm"
)

// DefaultUser is the user message when prompt.user is left out: each
// item's text after its number, "[1] …", a blank line between items.
const DefaultUser = `{{range .Items}}{{if gt .N 1}}{{"\n\n"}}{{end}}[{{.N}}] {{.Text}}{{end}}`

// Funcs are the functions the templates may call, beyond text/template's
// own (and, or, not, len, index, slice, print, printf, println, eq, ne,
// lt, le, gt, ge, html, js, urlquery, call).
var Funcs = template.FuncMap{
	"trim":  strings.TrimSpace,
	"upper": strings.ToUpper,
	"lower": strings.ToLower,
	// truncate n s: s cut to at most n characters.
	"truncate": func(n int, s string) string {
		if n < 0 || utf8.RuneCountInString(s) <= n {
			return s
		}
		return string([]rune(s)[:n])
	},
	// json v: v as compact JSON.
	"json": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	},
	// default d v: v, or d when v is empty.
	"default": func(d, v any) any {
		if v == nil || fmt.Sprint(v) == "" {
			return d
		}
		return v
	},
	// join sep list: the list's elements joined by sep.
	"join": func(sep string, list []string) string { return strings.Join(list, sep) },
}

func parseTemplate(name, text string) (*template.Template, error) {
	t, err := template.New(name).Funcs(Funcs).Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, fmt.Errorf("template: %s", strings.TrimPrefix(err.Error(), "template: "))
	}
	return t, nil
}

// Batch is what prompt.system and prompt.user render from.
type Batch struct {
	Job   string // the job's name
	Model string // the model asked
	Count int    // how many items
	Items []ItemText
}

// ItemText is one item of a Batch.
type ItemText struct {
	N    int            // its number in the batch, from 1
	Key  string         // its key
	Text string         // prompt.item rendered from its row
	Row  map[string]any // its row: the source's columns, or the event's data
}

// row is one item: its key and its fields.
type row struct {
	Key    string
	Fields map[string]any
}

// request builds the call for a batch of rows.
func (j *job) request(model string, rows []row) (*llm.ChatRequest, error) {
	b := Batch{Job: j.Name, Model: model, Count: len(rows), Items: make([]ItemText, len(rows))}
	for i, r := range rows {
		text, err := render(j.item, r.Fields)
		if err != nil {
			return nil, fmt.Errorf("item %s: %w", r.Key, err)
		}
		b.Items[i] = ItemText{N: i + 1, Key: r.Key, Text: text, Row: r.Fields}
	}
	req := &llm.ChatRequest{Model: model, MaxTokens: j.MaxTokens * len(rows)}
	if j.Prompt.System != "" {
		sys, err := render(j.system, b)
		if err != nil {
			return nil, err
		}
		req.Messages = append(req.Messages, llm.Message{Role: "system", Content: sys})
	}
	user, err := render(j.user, b)
	if err != nil {
		return nil, err
	}
	req.Messages = append(req.Messages, llm.Message{Role: "user", Content: user})
	return req, nil
}

func render(t *template.Template, data any) (string, error) {
	var b bytes.Buffer
	if err := t.Execute(&b, data); err != nil {
		return "", fmt.Errorf("template: %s", strings.TrimPrefix(err.Error(), "template: "))
	}
	return b.String(), nil
}

// fieldsOf returns the fields a template reads from its dot at the top
// (outside range and with, where the dot is something else) and from $:
// for prompt.item, the columns it needs.
func fieldsOf(t *template.Template) []string {
	var out []string
	seen := map[string]bool{}
	add := func(f string) {
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	var walk func(n parse.Node, top bool)
	// branch walks an if, range or with: its body with the dot at the top
	// or not (inBody), its pipeline and else where the branch stands.
	branch := func(b *parse.BranchNode, top, inBody bool) {
		walk(b.Pipe, top)
		walk(b.List, inBody)
		walk(b.ElseList, top)
	}
	walk = func(n parse.Node, top bool) {
		switch n := n.(type) {
		case *parse.ListNode:
			if n != nil {
				for _, c := range n.Nodes {
					walk(c, top)
				}
			}
		case *parse.ActionNode:
			walk(n.Pipe, top)
		case *parse.PipeNode:
			if n == nil {
				return
			}
			for _, c := range n.Cmds {
				walk(c, top)
			}
		case *parse.CommandNode:
			for _, a := range n.Args {
				walk(a, top)
			}
		case *parse.FieldNode:
			if top {
				add(n.Ident[0])
			}
		case *parse.ChainNode:
			walk(n.Node, top)
		case *parse.VariableNode:
			if len(n.Ident) > 1 && n.Ident[0] == "$" {
				add(n.Ident[1])
			}
		case *parse.IfNode:
			branch(&n.BranchNode, top, top)
		case *parse.RangeNode:
			branch(&n.BranchNode, top, false) // the dot is each element
		case *parse.WithNode:
			branch(&n.BranchNode, top, false) // the dot is the value
		case *parse.TemplateNode:
			walk(n.Pipe, top)
		}
	}
	if t.Tree != nil {
		walk(t.Root, true)
	}
	return out
}

// marker is the start of an item's block in a numbered answer: [3], 3.
// 3) or 3: at the start of a line.
var marker = regexp.MustCompile(`(?m)^[ \t]*(?:\[(\d{1,4})\]|(\d{1,4})[.):])[ \t]*`)

// splitAnswer cuts a batch's answer into one output per item of keys, in
// order, as j.split says, or returns the reason every item is refused. An
// output that starts with its item's key in parentheses, as a model may
// repeat it from the prompt, loses it.
func (j *job) splitAnswer(answer string, keys []string) ([]string, string) {
	out, reason := j.cut(answer, len(keys))
	for i := range out {
		if rest, ok := strings.CutPrefix(out[i], "("+keys[i]+")"); ok {
			out[i] = strings.TrimSpace(rest)
		}
	}
	return out, reason
}

func (j *job) cut(answer string, n int) ([]string, string) {
	out := make([]string, n)
	switch {
	case n <= 0:
		return out, ""
	case j.split == SplitJSON:
		return splitJSON(answer, n)
	case n == 1:
		out[0] = stripMarker(answer)
		return out, ""
	case j.split == SplitLines:
		var lines []string
		for l := range strings.SplitSeq(answer, "\n") {
			if l = strings.TrimSpace(l); l != "" {
				lines = append(lines, stripMarker(l))
			}
		}
		if len(lines) != n {
			return nil, fmt.Sprintf("answer has %d lines for %d items", len(lines), n)
		}
		return lines, ""
	}
	if locs := marker.FindAllStringSubmatchIndex(answer, -1); len(locs) == n && strings.TrimSpace(answer[:locs[0][0]]) == "" {
		ok := true
		for i, loc := range locs {
			num := submatch(answer, loc, 1)
			if num == "" {
				num = submatch(answer, loc, 2)
			}
			if k, err := strconv.Atoi(num); err != nil || k != i+1 {
				ok = false
				break
			}
		}
		if ok {
			for i, loc := range locs {
				end := len(answer)
				if i+1 < n {
					end = locs[i+1][0]
				}
				out[i] = strings.TrimSpace(answer[loc[1]:end])
			}
			return out, ""
		}
	}
	if j.fallback != FallbackWords {
		return nil, fmt.Sprintf("answer is not numbered [1] to [%d]", n)
	}
	words := strings.Fields(answer)
	for i := range n {
		out[i] = strings.Join(words[i*len(words)/n:(i+1)*len(words)/n], " ")
	}
	return out, ""
}

func submatch(s string, loc []int, g int) string {
	if loc[2*g] < 0 {
		return ""
	}
	return s[loc[2*g]:loc[2*g+1]]
}

// stripMarker removes a leading [1] from an answer or a line.
func stripMarker(s string) string {
	if loc := marker.FindStringIndex(s); loc != nil && strings.TrimSpace(s[:loc[0]]) == "" {
		s = s[loc[1]:]
	}
	return strings.TrimSpace(s)
}

// splitJSON reads an answer that is a JSON array of n elements (inside a
// ``` fence or not): a string element is the output, any other its JSON.
func splitJSON(answer string, n int) ([]string, string) {
	s := strings.TrimSpace(answer)
	if rest, ok := strings.CutPrefix(s, "```"); ok {
		if nl := strings.IndexByte(rest, '\n'); nl >= 0 {
			rest = rest[nl+1:]
		}
		s = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "```"))
	}
	var elems []json.RawMessage
	if err := json.Unmarshal([]byte(s), &elems); err != nil {
		return nil, fmt.Sprintf("answer is not a JSON array of %d elements", n)
	}
	if len(elems) != n {
		return nil, fmt.Sprintf("answer is a JSON array of %d elements for %d items", len(elems), n)
	}
	out := make([]string, n)
	for i, e := range elems {
		var str string
		if json.Unmarshal(e, &str) == nil {
			out[i] = str
			continue
		}
		var b bytes.Buffer
		if err := json.Compact(&b, e); err != nil {
			return nil, fmt.Sprintf("answer is not a JSON array of %d elements", n)
		}
		out[i] = b.String()
	}
	return out, ""
}

// The reasons a check refuses an output.
const (
	ReasonEmpty      = "empty"
	ReasonNotEnglish = "not English"
	ReasonTooLong    = "too long"
)

// check returns why output is refused ("" when it is accepted).
func (j *job) check(model, output string) string {
	output = strings.TrimSpace(output)
	if output == "" {
		return ReasonEmpty
	}
	if j.Checks.English && !English(output) {
		return ReasonNotEnglish
	}
	// Counted as it stood in the answer, after a space.
	if llm.CountTokens(model, " "+output) > j.checkTokens {
		return ReasonTooLong
	}
	return ""
}

// English is the check english: true: s has a Latin letter and no Han,
// kana, Hangul, CJK punctuation or full-width character.
func English(s string) bool {
	latin := false
	for _, r := range s {
		switch {
		case unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Hangul),
			r >= 0x3000 && r <= 0x303f, // CJK punctuation
			r >= 0xff00 && r <= 0xffef: // full-width forms
			return false
		case unicode.In(r, unicode.Latin):
			latin = true
		}
	}
	return latin
}
