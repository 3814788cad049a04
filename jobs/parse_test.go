package jobs

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/run"
)

// Each malformed file gets one error, naming the file, the key path and
// the line the file gives it at (marked #< in the file).
func TestLoadRefusesMalformedJobs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, file, key, what string
	}{
		{"a typo'd key", `source_db: sqlite:team.db
jobs:
  - name: summary
    source:
      query: SELECT id, title FROM items
    promt: #<
      item: "{{.title}}"
    output: {sql: "UPDATE items SET s = :output WHERE id = :key"}
`, "jobs[0].promt", "unknown key"},
		{"a template that does not parse", `source_db: sqlite:team.db
jobs:
  - name: summary
    source:
      query: SELECT id, title FROM items
    prompt:
      item: "{{.title" #<
    output: {sql: "UPDATE items SET s = :output WHERE id = :key"}
`, "jobs[0].prompt.item", "template: item:1: unclosed action"},
		{"a system template that does not parse", `jobs:
  - name: summary
    source: {event: doc.created}
    prompt:
      system: "{{if .Count}}" #<
      item: "{{.title}}"
    output: {url: "http://127.0.0.1:9/hook"}
`, "jobs[0].prompt.system", "template: system:1: unexpected EOF"},
		{"an output statement with an unknown parameter", `source_db: sqlite:team.db
jobs:
  - name: summary
    source:
      query: SELECT id, title FROM items
    prompt:
      item: "{{.title}}"
    output:
      sql: UPDATE items SET s = :outptu WHERE id = :key #<
`, "jobs[0].output.sql", ":outptu is not a parameter (want :key, :output, :model, :tokens, :processed_at, :processed_at_ms, :job)"},
		{"an output statement with ? placeholders", `source_db: sqlite:team.db
jobs:
  - name: summary
    source: {query: "SELECT id, title FROM items"}
    prompt: {item: "{{.title}}"}
    output: {sql: "UPDATE items SET s = ? WHERE id = ?"} #<
`, "jobs[0].output.sql", "?: name the parameters (:key, :output …) instead"},
		{"a job after an unknown job", `source_db: sqlite:team.db
jobs:
  - name: summary
    source: {query: "SELECT id, title FROM items"}
    prompt: {item: "{{.title}}"}
    output: {sql: "UPDATE items SET s = :output WHERE id = :key"}
  - name: title
    after: sumary #<
    source: {query: "SELECT id, title FROM items"}
    prompt: {item: "{{.title}}"}
    output: {sql: "UPDATE items SET t = :output WHERE id = :key"}
`, "jobs[1].after", `"sumary": no job has this name (jobs: summary, title)`},
		{"a cycle of after:", `source_db: sqlite:team.db
jobs:
  - name: a
    after: c #<
    source: {query: "SELECT id, title FROM items"}
    prompt: {item: "{{.title}}"}
    output: {sql: "UPDATE items SET a = :output WHERE id = :key"}
  - name: b
    after: a
    source: {query: "SELECT id, title FROM items"}
    prompt: {item: "{{.title}}"}
    output: {sql: "UPDATE items SET b = :output WHERE id = :key"}
  - name: c
    after: b
    source: {query: "SELECT id, title FROM items"}
    prompt: {item: "{{.title}}"}
    output: {sql: "UPDATE items SET c = :output WHERE id = :key"}
`, "jobs[0].after", `"c": the jobs' after: form a cycle`},
		{"a job after itself", `source_db: sqlite:team.db
jobs:
  - name: a
    after: a #<
    source: {query: "SELECT id, title FROM items"}
    prompt: {item: "{{.title}}"}
    output: {sql: "UPDATE items SET a = :output WHERE id = :key"}
`, "jobs[0].after", "a job cannot run after itself"},
		{"a job after an event's job", `source_db: sqlite:team.db
jobs:
  - name: a
    source: {event: doc.created}
    prompt: {item: "{{.title}}"}
    output: {url: "http://127.0.0.1:9/hook"}
  - name: b
    after: a #<
    source: {query: "SELECT id, title FROM items"}
    prompt: {item: "{{.title}}"}
    output: {sql: "UPDATE items SET b = :output WHERE id = :key"}
`, "jobs[1].after", "after: needs two jobs with a source query"},
		{"both query and event", `source_db: sqlite:team.db
jobs:
  - name: summary
    source: {query: "SELECT id, title FROM items", event: doc.created} #<
    prompt: {item: "{{.title}}"}
    output: {sql: "UPDATE items SET s = :output WHERE id = :key"}
`, "jobs[0].source", "give one of query (items from a database) and event (one run per event)"},
		{"neither query nor event", `source_db: sqlite:team.db
jobs:
  - name: summary
    source: {key: id} #<
    prompt: {item: "{{.title}}"}
    output: {sql: "UPDATE items SET s = :output WHERE id = :key"}
`, "jobs[0].source", "give one of query"},
		{"batch_max out of range", `source_db: sqlite:team.db
jobs:
  - name: summary
    source: {query: "SELECT id, title FROM items"}
    prompt:
      item: "{{.title}}"
      batch_max: 1001 #<
    output: {sql: "UPDATE items SET s = :output WHERE id = :key"}
`, "jobs[0].prompt.batch_max", "1001: want from 1 to 1000"},
		{"a negative batch_max", `source_db: sqlite:team.db
jobs:
  - name: summary
    source: {query: "SELECT id, title FROM items"}
    prompt: {item: "{{.title}}", batch_max: -2} #<
    output: {sql: "UPDATE items SET s = :output WHERE id = :key"}
`, "jobs[0].prompt.batch_max", "-2: want from 1 to 1000"},
		{"batch_max on an event's job", `jobs:
  - name: summary
    source: {event: doc.created}
    prompt: {item: "{{.title}}", batch_max: 5} #<
    output: {url: "http://127.0.0.1:9/hook"}
`, "jobs[0].prompt.batch_max", "an event's job asks about one item per call"},
		{"an unknown split", `source_db: sqlite:team.db
jobs:
  - name: summary
    source: {query: "SELECT id, title FROM items"}
    prompt:
      item: "{{.title}}"
      split: csv #<
    output: {sql: "UPDATE items SET s = :output WHERE id = :key"}
`, "jobs[0].prompt.split", `"csv": want numbered, lines or json`},
		{"a fallback for split: json", `source_db: sqlite:team.db
jobs:
  - name: summary
    source: {query: "SELECT id, title FROM items"}
    prompt:
      item: "{{.title}}"
      split: json
      fallback: words #<
    output: {sql: "UPDATE items SET s = :output WHERE id = :key"}
`, "jobs[0].prompt.fallback", "a fallback is for split: numbered"},
		{"an unknown fallback", `source_db: sqlite:team.db
jobs:
  - name: summary
    source: {query: "SELECT id, title FROM items"}
    prompt:
      item: "{{.title}}"
      fallback: guess #<
    output: {sql: "UPDATE items SET s = :output WHERE id = :key"}
`, "jobs[0].prompt.fallback", `"guess": want reject or words`},
		{"output with both sql and url", `source_db: sqlite:team.db
jobs:
  - name: summary
    source: {query: "SELECT id, title FROM items"}
    prompt: {item: "{{.title}}"}
    output:
      sql: UPDATE items SET s = :output WHERE id = :key #<
      url: http://127.0.0.1:9/hook
`, "jobs[0].output", "give one of sql (a statement on a database) and url (an HTTP endpoint)"},
		{"output with neither sql nor url", `source_db: sqlite:team.db
jobs:
  - name: summary
    source: {query: "SELECT id, title FROM items"}
    prompt: {item: "{{.title}}"}
    output: {db: "sqlite:out.db"} #<
`, "jobs[0].output", "give one of sql"},
		{"an output URL that is not http", `jobs:
  - name: summary
    source: {event: doc.created}
    prompt: {item: "{{.title}}"}
    output:
      url: ftp://example.com/hook #<
`, "jobs[0].output.url", `"ftp://example.com/hook": want an http:// or https:// URL`},
		{"a timeout for an SQL output", `source_db: sqlite:team.db
jobs:
  - name: summary
    source: {query: "SELECT id, title FROM items"}
    prompt: {item: "{{.title}}"}
    output:
      sql: UPDATE items SET s = :output WHERE id = :key #< (a mapping's line is its first key's)
      timeout: 5s
`, "jobs[0].output", "auth_env and timeout are for an HTTP output (url)"},
		{"a missing prompt.item", `source_db: sqlite:team.db
jobs:
  - name: summary #<
    source: {query: "SELECT id, title FROM items"}
    output: {sql: "UPDATE items SET s = :output WHERE id = :key"}
`, "jobs[0].prompt.item", "missing: the template of one item"},
		{"two jobs of one name", `source_db: sqlite:team.db
jobs:
  - name: summary
    source: {query: "SELECT id, title FROM items"}
    prompt: {item: "{{.title}}"}
    output: {sql: "UPDATE items SET s = :output WHERE id = :key"}
  - name: summary #<
    source: {query: "SELECT id, body FROM items"}
    prompt: {item: "{{.body}}"}
    output: {sql: "UPDATE items SET b = :output WHERE id = :key"}
`, "jobs[1].name", `"summary": another job has this name`},
		{"a name with a space", `source_db: sqlite:team.db
jobs:
  - name: my summary #<
    source: {query: "SELECT id, title FROM items"}
    prompt: {item: "{{.title}}"}
    output: {sql: "UPDATE items SET s = :output WHERE id = :key"}
`, "jobs[0].name", `"my summary": want 1-100 letters, digits or ._:-`},
		{"a key that is not a column name", `source_db: sqlite:team.db
jobs:
  - name: summary
    source:
      query: SELECT id, title FROM items
      key: item-id #<
    prompt: {item: "{{.title}}"}
    output: {sql: "UPDATE items SET s = :output WHERE id = :key"}
`, "jobs[0].source.key", `"item-id": want a column or field name`},
		{"two statements as the source", `source_db: sqlite:team.db
jobs:
  - name: summary
    source:
      query: "SELECT id, title FROM items; DELETE FROM items" #<
    prompt: {item: "{{.title}}"}
    output: {sql: "UPDATE items SET s = :output WHERE id = :key"}
`, "jobs[0].source.query", "one statement only (a SELECT)"},
		{"a database for an event's source", `jobs:
  - name: summary
    source:
      event: doc.created
      db: sqlite:team.db #<
    prompt: {item: "{{.title}}"}
    output: {url: "http://127.0.0.1:9/hook"}
`, "jobs[0].source.db", "an event's job reads no database"},
		{"a poll for an event's job", `jobs:
  - name: summary
    source: {event: doc.created}
    prompt: {item: "{{.title}}"}
    poll: 10s #<
    output: {url: "http://127.0.0.1:9/hook"}
`, "jobs[0].poll", "a setting of a job with a source query"},
		{"a duration that is not one", `source_db: sqlite:team.db
jobs:
  - name: summary
    source: {query: "SELECT id, title FROM items"}
    prompt: {item: "{{.title}}"}
    poll: soon #<
    output: {sql: "UPDATE items SET s = :output WHERE id = :key"}
`, "jobs[0].poll", `"soon": want a duration such as 90s or 2h`},
		{"max_tokens out of range", `source_db: sqlite:team.db
jobs:
  - name: summary
    source: {query: "SELECT id, title FROM items"}
    prompt: {item: "{{.title}}"}
    max_tokens: -1 #<
    output: {sql: "UPDATE items SET s = :output WHERE id = :key"}
`, "jobs[0].max_tokens", "-1: want from 1 to 1048576"},
		{"a flow weight out of range", `source_db: sqlite:team.db
jobs:
  - name: summary
    source: {query: "SELECT id, title FROM items"}
    prompt: {item: "{{.title}}"}
    flow:
      weight: -3 #<
    output: {sql: "UPDATE items SET s = :output WHERE id = :key"}
`, "jobs[0].flow.weight", "-3: want from"},
		{"in_flight out of range", `source_db: sqlite:team.db
jobs:
  - name: summary
    source: {query: "SELECT id, title FROM items"}
    prompt: {item: "{{.title}}"}
    in_flight: 5000 #<
    output: {sql: "UPDATE items SET s = :output WHERE id = :key"}
`, "jobs[0].in_flight", "5000: want from 0 (sized to the quota) to 1024"},
		{"within past a day", `source_db: sqlite:team.db
jobs:
  - name: summary
    source: {query: "SELECT id, title FROM items"}
    prompt: {item: "{{.title}}"}
    within: 25h #<
    output: {sql: "UPDATE items SET s = :output WHERE id = :key"}
`, "jobs[0].within", "25h0m0s: want at most 24h0m0s"},
		{"within for an event's job", `jobs:
  - name: summary
    source: {event: doc.created}
    prompt: {item: "{{.title}}"}
    within: 5m #<
    output: {url: "http://127.0.0.1:9/hook"}
`, "jobs[0].within", "a setting of a job with a source query"},
		{"a job that is not a mapping", `jobs:
  - summary #<
`, "jobs[0]", "want a mapping of keys to values"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := writeYAML(t, tt.file)
			c, err := Load(path)
			if c != nil {
				t.Errorf("Load returned a config with its error")
			}
			wantPlaced(t, err, path, tt.key, markedLine(t, tt.file), tt.what)
		})
	}
}

// A file of other keys (serve's) loads: Load reads only source_db and
// jobs, and fills in each job's defaults.
func TestJobsLoadDefaults(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, `db: sluice.db
addr: 127.0.0.1:0
source_db: sqlite:team.db
jobs:
  - name: summary
    source: {query: "SELECT id, title FROM items;"}
    prompt: {item: "{{.title}}"}
    output: {sql: "UPDATE items SET s = :output, n = :tokens WHERE id = :key;"}
  - name: hook
    model: other-model
    source: {event: doc.created, key: doc_id}
    prompt: {item: "{{.title}}"}
    output: {url: "https://example.com/hook", timeout: 3s}
`)
	js := c.Jobs()
	if len(js) != 2 {
		t.Fatalf("%d jobs, want 2", len(js))
	}
	s := c.jobs[0]
	if s.Source.Key != "id" || s.Prompt.BatchMax != 1 || s.MaxTokens != DefaultMaxTokens || s.split != SplitNumbered ||
		s.fallback != FallbackReject || s.checkTokens != DefaultMaxTokens || s.timeout != DefaultTimeout {
		t.Errorf("summary's defaults: %+v", s)
	}
	if s.sourceDB != "sqlite:team.db" || s.outputDB != "sqlite:team.db" {
		t.Errorf("summary's databases: source %q output %q, want the file's source_db", s.sourceDB, s.outputDB)
	}
	if want := "UPDATE items SET s = $1, n = $2 WHERE id = $3;"; s.outSQL != want || strings.Join(s.outParams, ",") != "output,tokens,key" {
		t.Errorf("summary's statement: %q %v, want %q", s.outSQL, s.outParams, want)
	}
	h := c.jobs[1]
	if h.Source.Key != "doc_id" || h.sourceDB != "" || h.outputDB != "" || h.timeout != 3*time.Second || h.Model != "other-model" {
		t.Errorf("hook: %+v", h)
	}
	if fl := c.Flows(); len(fl) != 2 || fl[0].Name != "summary" || fl[1].Name != "hook" {
		t.Errorf("flows %+v: want one per job, named by it", fl)
	}
	if c.Path() == "" {
		t.Error("no path")
	}
}

// A job's settings reach its backfill as the file gives them.
func TestJobSettingsReachTheBackfill(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, `source_db: sqlite:team.db
jobs:
  - name: summary
    after: title
    source: {query: "SELECT id, title FROM items"}
    prompt: {item: "{{.title}}", batch_max: 7}
    within: 5m
    stall_after: 3h
    poll: 20s
    retry_after: 2m
    max_rejects: 4
    in_flight: 3
    alert_webhook: https://example.com/alerts
    output: {sql: "UPDATE items SET s = :output WHERE id = :key"}
  - name: title
    source: {query: "SELECT id, title FROM items"}
    prompt: {item: "{{.title}}"}
    output: {sql: "UPDATE items SET t = :output WHERE id = :key"}
`)
	got := c.jobs[0].backfill("groq")
	want := run.Backfill{ID: "summary", Provider: "groq", After: "title", MaxBatch: 7, Within: 5 * time.Minute, StallAfter: 3 * time.Hour,
		Poll: 20 * time.Second, RetryAfter: 2 * time.Minute, MaxRejects: 4, InFlight: 3, AlertWebhook: "https://example.com/alerts"}
	if got != want {
		t.Errorf("the backfill's settings %+v, want %+v", got, want)
	}
	// Left out, each is the backfill's default.
	if got, want := c.jobs[1].backfill("groq"), (run.Backfill{ID: "title", Provider: "groq", MaxBatch: 1}); got != want {
		t.Errorf("the defaults %+v, want %+v", got, want)
	}
}
