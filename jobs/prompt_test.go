package jobs

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/llm"
)

func TestJobsSplitAnswer(t *testing.T) {
	t.Parallel()
	numbered := &job{split: SplitNumbered, fallback: FallbackReject}
	words := &job{split: SplitNumbered, fallback: FallbackWords}
	lines := &job{split: SplitLines, fallback: FallbackReject}
	jsonJob := &job{split: SplitJSON, fallback: FallbackReject}
	keys := func(n int) []string {
		k := make([]string, n)
		for i := range k {
			k[i] = "a00" + string(rune('1'+i))
		}
		return k
	}
	tests := []struct {
		name   string
		j      *job
		answer string
		keys   []string
		want   []string
		reason string
	}{
		{"numbered exact", numbered, "[1] alpha one\n[2] beta\ntwo lines\n[3] gamma", keys(3), []string{"alpha one", "beta\ntwo lines", "gamma"}, ""},
		{"numbered with dots, parentheses and colons", numbered, "  1. alpha\n2) beta\n3: gamma\n", keys(3), []string{"alpha", "beta", "gamma"}, ""},
		{"numbered with the keys echoed", numbered, "[1] (a001) alpha\n\n[2] (a002)   beta", keys(2), []string{"alpha", "beta"}, ""},
		{"another item's key is kept", numbered, "[1] (a002) alpha\n[2] (a001) beta", keys(2), []string{"(a002) alpha", "(a001) beta"}, ""},
		{"numbered in the wrong order", numbered, "[2] beta\n[1] alpha", keys(2), nil, "answer is not numbered [1] to [2]"},
		{"a block missing", numbered, "[1] alpha", keys(2), nil, "answer is not numbered [1] to [2]"},
		{"text before the first block", numbered, "Here you are:\n[1] alpha\n[2] beta", keys(2), nil, "answer is not numbered [1] to [2]"},
		{"not numbered", numbered, "alpha beta gamma", keys(2), nil, "answer is not numbered [1] to [2]"},
		{"fallback words shares the words evenly", words, "one two three four five six", keys(3), []string{"one two", "three four", "five six"}, ""},
		{"fallback words, uneven", words, "a b c\nd e f g", keys(3), []string{"a b", "c d", "e f g"}, ""},
		{"fallback words keeps a numbered answer", words, "[1] x y z\n[2] w", keys(2), []string{"x y z", "w"}, ""},
		{"fallback words with the wrong order shares all", words, "[2] b\n[1] a", keys(2), []string{"[2] b", "[1] a"}, ""},
		{"lines", lines, "first\n\n  2. second  \n[3] third\n", keys(3), []string{"first", "second", "third"}, ""},
		{"lines, too many", lines, "a\nb\nc", keys(2), nil, "answer has 3 lines for 2 items"},
		{"lines, too few", lines, "a\n\n", keys(2), nil, "answer has 1 lines for 2 items"},
		{"json", jsonJob, `["alpha", "beta"]`, keys(2), []string{"alpha", "beta"}, ""},
		{"json in a fence, elements not strings", jsonJob, "```json\n[\"alpha\", {\"tags\": [1, 2]}, 3, null]\n```", keys(4), []string{"alpha", `{"tags":[1,2]}`, "3", ""}, ""}, // null is no output: the check refuses it as empty
		{"json in a bare fence", jsonJob, "```\n[\"a\"]\n```", keys(1), []string{"a"}, ""},
		{"json, a key echoed", jsonJob, `["(a001) alpha"]`, keys(1), []string{"alpha"}, ""},
		{"json of the wrong length", jsonJob, `["alpha"]`, keys(2), nil, "answer is a JSON array of 1 elements for 2 items"},
		{"json that is not an array", jsonJob, `{"a": 1}`, keys(2), nil, "answer is not a JSON array of 2 elements"},
		{"json that is not JSON", jsonJob, "[1] alpha\n[2] beta", keys(2), nil, "answer is not a JSON array of 2 elements"},
		{"a batch of one strips a leading [1]", numbered, "  [1]  hello world\n", keys(1), []string{"hello world"}, ""},
		{"a batch of one strips 1.", numbered, "1. hello", keys(1), []string{"hello"}, ""},
		{"a batch of one, its key echoed", numbered, "[1] (a001) hello", keys(1), []string{"hello"}, ""},
		{"a batch of one keeps an answer without a marker", numbered, "hello [1] world", keys(1), []string{"hello [1] world"}, ""},
		{"a batch of one, lines keeps every line", lines, "[1] one\ntwo", keys(1), []string{"one\ntwo"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, reason := tt.j.splitAnswer(tt.answer, tt.keys)
			if reason != tt.reason || !slices.Equal(got, tt.want) {
				t.Errorf("splitAnswer(%q) = %q, %q; want %q, %q", tt.answer, got, reason, tt.want, tt.reason)
			}
			if reason == "" && len(got) != len(tt.keys) {
				t.Errorf("%d outputs for %d items", len(got), len(tt.keys))
			}
		})
	}
}

func TestJobsBindNamed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, q, want string
		names         []string
	}{
		{"a repeated name reuses its number", "INSERT INTO t (k, o, k2) VALUES (:key, :output, :key)", "INSERT INTO t (k, o, k2) VALUES ($1, $2, $1)", []string{"key", "output"}},
		{"every parameter", "VALUES (:job, :key, :output, :model, :tokens, :processed_at, :processed_at_ms)", "VALUES ($1, $2, $3, $4, $5, $6, $7)", []string{"job", "key", "output", "model", "tokens", "processed_at", "processed_at_ms"}},
		{"casts, quotes and comments are left alone",
			"UPDATE t SET o = :output::text, n = ':x', \"c:y\" = 'it''s :model' -- :nothing here\nWHERE k = CAST(:key AS TEXT)",
			"UPDATE t SET o = $1::text, n = ':x', \"c:y\" = 'it''s :model' -- :nothing here\nWHERE k = CAST($2 AS TEXT)",
			[]string{"output", "key"}},
		{"a comment at the end", "UPDATE t SET o = :output WHERE k = :key -- :tokens", "UPDATE t SET o = $1 WHERE k = $2 -- :tokens", []string{"output", "key"}},
		{"a colon before a digit", "UPDATE t SET o = :output, at = '12:30', x = 1:2 WHERE k = :key", "UPDATE t SET o = $1, at = '12:30', x = 1:2 WHERE k = $2", []string{"output", "key"}},
	}
	for _, tt := range tests {
		got, names, err := bindNamed(tt.q)
		if err != nil || got != tt.want || !slices.Equal(names, tt.names) {
			t.Errorf("%s: bindNamed(%q) = %q, %v, %v; want %q, %v", tt.name, tt.q, got, names, err, tt.want, tt.names)
		}
	}
	for _, tt := range []struct{ q, want string }{
		{"UPDATE t SET o = $1 WHERE k = $2", "$: name the parameters (:key, :output …) instead"},
		{"UPDATE t SET o = ? WHERE k = ?", "?: name the parameters (:key, :output …) instead"},
		{"UPDATE t SET o = :outptu WHERE k = :key", ":outptu is not a parameter (want :key, :output, :model, :tokens, :processed_at, :processed_at_ms, :job)"},
		{"UPDATE t SET o = :output WHERE k = :Key", ":Key is not a parameter"},
		{"DELETE FROM t WHERE k = ':key'", "uses none of the parameters"},
		{"UPDATE t SET o = 'unclosed WHERE k = :key", "a quote ' without its end"},
		{`UPDATE t SET "o = :output`, `a quote " without its end`},
	} {
		if got, names, err := bindNamed(tt.q); err == nil || !strings.Contains(err.Error(), tt.want) || got != "" || names != nil {
			t.Errorf("bindNamed(%q) = %q, %v, %v; want the error %q", tt.q, got, names, err, tt.want)
		}
	}
}

func TestJobsFieldsOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, text string
		want       []string
	}{
		{"top-level fields, each once, in order", "{{.title}} — {{.body | upper}} {{truncate 10 .summary}} {{.title}} {{printf \"%s\" .author.name}}", []string{"title", "body", "summary", "author"}},
		{"inside range and with, the dot is something else", "{{range .tags}}{{.name}}{{end}}{{with .meta}}{{.lang}}{{else}}{{.fallback}}{{end}}", []string{"tags", "meta", "fallback"}},
		{"$.x counts anywhere", "{{range .tags}}{{$.lang}}{{.ignored}}{{end}}{{with $.meta}}{{$.region}}{{end}}", []string{"tags", "lang", "meta", "region"}},
		{"if and else are at the top", "{{if .flag}}{{.yes}}{{else if .other}}{{.no}}{{end}}", []string{"flag", "yes", "other", "no"}},
		{"a variable of its own is not a field", "{{$t := .title}}{{$t}} {{$t.x}}", []string{"title"}},
		{"plain text", "no fields here", nil},
		{"a range's else is at the top", "{{range .tags}}{{.x}}{{else}}{{.none}}{{end}}", []string{"tags", "none"}},
	}
	for _, tt := range tests {
		tmpl, err := parseTemplate("item", tt.text)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got := fieldsOf(tmpl); !slices.Equal(got, tt.want) {
			t.Errorf("%s: fieldsOf(%q) = %q, want %q", tt.name, tt.text, got, tt.want)
		}
	}
}

func TestJobsCheckReasons(t *testing.T) {
	t.Parallel()
	const model = "sim-model"
	english := &job{Job: Job{Checks: Checks{English: true}}, checkTokens: 5}
	any := &job{checkTokens: 100}
	tests := []struct {
		j      *job
		output string
		want   string
	}{
		{english, "A fine summary.", ""},
		{english, "", ReasonEmpty},
		{english, " \n\t ", ReasonEmpty},
		{english, "日本語の要約です", ReasonNotEnglish},
		{english, "Mostly English but 要約", ReasonNotEnglish},
		{english, "Hello\u3000world", ReasonNotEnglish},      // an ideographic space
		{english, "Ｈｅｌｌｏ", ReasonNotEnglish},                 // full-width letters
		{english, "12345 !!", ReasonNotEnglish},              // no letter at all
		{english, "Café crème", ""},                          // Latin beyond ASCII
		{english, strings.Repeat("word ", 6), ReasonTooLong}, // 6 tokens over 5
		{english, strings.Repeat("word ", 5), ""},
		{any, "日本語の要約です", ""},
		{any, "", ReasonEmpty},
	}
	for _, tt := range tests {
		if got := tt.j.check(model, tt.output); got != tt.want {
			t.Errorf("check(%q) with english %v, %d tokens = %q, want %q", tt.output, tt.j.Checks.English, tt.j.checkTokens, got, tt.want)
		}
	}
	// A split's refusal passes through as the reason; an output is checked.
	if got := english.refusal(model, refusedMark+"answer is not numbered [1] to [2]"); got != "answer is not numbered [1] to [2]" {
		t.Errorf("refusal of a refused split: %q", got)
	}
	if got := english.refusal(model, "完了"); got != ReasonNotEnglish {
		t.Errorf("refusal of a Japanese output: %q", got)
	}
}

func TestJobsRequest(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, `source_db: sqlite:team.db
jobs:
  - name: summary
    source: {query: "SELECT id, title FROM items"}
    prompt:
      item: "{{.title}}"
      batch_max: 3
    max_tokens: 100
    output: {sql: "UPDATE items SET s = :output WHERE id = :key"}
  - name: custom
    source: {query: "SELECT id, title, lang FROM items"}
    prompt:
      system: "Job {{.Job}} on {{.Model}}: {{.Count}} items."
      item: "{{.title | upper}} ({{default \"en\" .lang}})"
      user: "{{range .Items}}<{{.N}} {{.Key}}> {{.Text}} / {{.Row.title}}\n{{end}}"
      batch_max: 3
    output: {sql: "UPDATE items SET c = :output WHERE id = :key"}
`)
	rows := []row{
		{Key: "1", Fields: map[string]any{"id": 1, "title": "Alpha", "lang": "fr"}},
		{Key: "2", Fields: map[string]any{"id": 2, "title": "Beta", "lang": ""}},
	}
	req, err := c.jobs[0].request("m1", rows)
	if err != nil {
		t.Fatal(err)
	}
	want := []llm.Message{{Role: "user", Content: "[1] Alpha\n\n[2] Beta"}}
	if req.Model != "m1" || req.MaxTokens != 200 || !reflect.DeepEqual(req.Messages, want) {
		t.Errorf("the default user message: %+v, want %+v with 200 max tokens", req, want)
	}
	req, err = c.jobs[1].request("m2", rows)
	if err != nil {
		t.Fatal(err)
	}
	want = []llm.Message{
		{Role: "system", Content: "Job custom on m2: 2 items."},
		{Role: "user", Content: "<1 1> ALPHA (fr) / Alpha\n<2 2> BETA (en) / Beta\n"},
	}
	if req.MaxTokens != 2*DefaultMaxTokens || !reflect.DeepEqual(req.Messages, want) {
		t.Errorf("a custom prompt: %+v, want %+v", req.Messages, want)
	}
	// A row without a column the item reads fails, naming the item.
	if _, err := c.jobs[0].request("m1", []row{{Key: "k9", Fields: map[string]any{"id": 9}}}); err == nil || !strings.Contains(err.Error(), "item k9: template: ") {
		t.Errorf("a row without its title: %v", err)
	}
}
