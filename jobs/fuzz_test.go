package jobs

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// bindNamed never panics; what it accepts uses only known parameters,
// each $n naming one of them, and keeps no :name of them unbound.
func FuzzBindNamed(f *testing.F) {
	for _, s := range []string{
		"UPDATE t SET o = :output WHERE k = :key",
		"INSERT INTO t VALUES (:key, :key, :tokens::text, ':x', \"a:b\") -- :nope",
		"SELECT $1", "x = ?", "'unclosed :key", ":processed_at_ms:output",
	} {
		f.Add(s)
	}
	dollar := regexp.MustCompile(`\$(\d+)`)
	unquoted := regexp.MustCompile(`'[^']*'|"[^"]*"|--[^\n]*`)
	f.Fuzz(func(t *testing.T, q string) {
		out, names, err := bindNamed(q)
		if err != nil {
			return
		}
		if len(names) == 0 {
			t.Fatalf("%q: accepted with no parameter", q)
		}
		for _, n := range names {
			if !known(n) {
				t.Fatalf("%q: bound unknown parameter %q", q, n)
			}
		}
		// Quoted text and comments are the statement's own, left as they
		// are: only a $n outside them is a parameter.
		for _, m := range dollar.FindAllStringSubmatch(unquoted.ReplaceAllString(out, " "), -1) {
			if i, _ := strconv.Atoi(m[1]); i < 1 || i > len(names) {
				t.Fatalf("%q gave %q: $%d names no parameter of %v", q, out, i, names)
			}
		}
	})
}

// An answer is split into exactly one output per item, or refused with a
// reason, whatever it holds, in every mode.
func FuzzSplitAnswer(f *testing.F) {
	f.Add("[1] a\n[2] b", uint8(2), uint8(0))
	f.Add("```json\n[\"a\", {\"b\": 1}]\n```", uint8(2), uint8(2))
	f.Add("one\n\ntwo\n", uint8(2), uint8(1))
	f.Fuzz(func(t *testing.T, answer string, n, mode uint8) {
		j := &job{split: []string{SplitNumbered, SplitLines, SplitJSON, SplitNumbered}[mode%4], fallback: FallbackReject}
		if mode%4 == 3 {
			j.fallback = FallbackWords
		}
		keys := make([]string, int(n%20)+1)
		for i := range keys {
			keys[i] = "k" + strconv.Itoa(i)
		}
		out, reason := j.splitAnswer(answer, keys)
		if reason == "" && len(out) != len(keys) {
			t.Fatalf("%d outputs for %d items, no reason", len(out), len(keys))
		}
		if reason != "" && j.fallback == FallbackWords && j.split == SplitNumbered {
			t.Fatalf("words fallback refused: %s", reason)
		}
	})
}

// Load never panics on any file, and an error it returns names the file.
func FuzzLoad(f *testing.F) {
	f.Add("jobs:\n  - name: a\n    source: {query: SELECT id FROM t}\n    prompt: {item: '{{.id}}'}\n    output: {sql: 'UPDATE t SET o = :output WHERE id = :key'}\n")
	f.Add("source_db: x\njobs: []\nother: {a: 1}\n")
	f.Add("jobs:\n  - &a {name: x}\n  - *a\n")
	f.Fuzz(func(t *testing.T, text string) {
		path := filepath.Join(t.TempDir(), "f.yaml")
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(path); err != nil && !regexp.MustCompile(regexp.QuoteMeta(path)).MatchString(err.Error()) {
			t.Fatalf("error %q does not name the file", err)
		}
	})
}
