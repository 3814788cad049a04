package main

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/internal/testenv"
)

// jobsConfigHead is the head of each serve config file of
// TestServeRefusesMalformedJobs: %[1]s is the sluice database, %[2]s the
// team's database (an SQLite file with a table items that has a row). The
// provider's address is one nothing answers at: should serve take a file,
// its jobs would call no provider.
const jobsConfigHead = `addr: 127.0.0.1:0
db: %[1]q
provider_url: http://127.0.0.1:9/v1
model: sim-model
source_db: %[2]q
jobs:
`

// serve refuses a config file whose jobs: are malformed or do not fit
// their databases before anything starts: one error on stderr naming
// --config, the file, the key and the line (marked #< in the file),
// nothing listening, and no sluice database made.
func TestServeRefusesMalformedJobs(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable&connect_timeout=5", ln.Addr())
	_ = ln.Close() // nothing listens there now
	tests := []struct {
		name, jobs, key, what string
		head                  string // instead of jobsConfigHead
	}{
		{name: "a typo'd key", jobs: `  - name: summary
    source: {query: "SELECT id, title FROM items"}
    promt: {item: "{{.title}}"} #<
    output: {sql: "UPDATE items SET summary = :output WHERE id = :key"}
`, key: "jobs[0].promt", what: "unknown key"},
		{name: "a column prompt.item uses that the query does not give", jobs: `  - name: summary
    source: {query: "SELECT id, title FROM items"}
    prompt:
      item: "{{.title}} {{.body}}" #<
    output: {sql: "UPDATE items SET summary = :output WHERE id = :key"}
`, key: "jobs[0].prompt.item", what: "{{.body}}: the query gives no column body (it gives id, title)"},
		{name: "a template that does not parse", jobs: `  - name: summary
    source: {query: "SELECT id, title FROM items"}
    prompt:
      item: "{{.title" #<
    output: {sql: "UPDATE items SET summary = :output WHERE id = :key"}
`, key: "jobs[0].prompt.item", what: "template: item:1: unclosed action"},
		{name: "an output statement with an unknown parameter", jobs: `  - name: summary
    source: {query: "SELECT id, title FROM items"}
    prompt: {item: "{{.title}}"}
    output:
      sql: UPDATE items SET summary = :outptu WHERE id = :key #<
`, key: "jobs[0].output.sql", what: ":outptu is not a parameter"},
		{name: "a source on a missing SQLite file", head: `addr: 127.0.0.1:0
db: %[1]q
source_db: "sqlite:no-such-folder/team.db" #<
jobs:
`, jobs: `  - name: summary
    source: {query: "SELECT id, title FROM items"}
    prompt: {item: "{{.title}}"}
    output: {sql: "UPDATE items SET summary = :output WHERE id = :key"}
`, key: "source_db", what: "database no-such-folder/team.db: stat no-such-folder/team.db: no such file or directory"},
		{name: "a source on a PostgreSQL server that does not answer", jobs: `  - name: summary
    source:
      query: SELECT id, title FROM items
      db: "` + closed + `" #<
    prompt: {item: "{{.title}}"}
    output: {sql: "UPDATE items SET summary = :output WHERE id = :key"}
`, key: "jobs[0].source.db", what: "database postgres://postgres@" + ln.Addr().String() + "/postgres"},
		{name: "a job after an unknown job", jobs: `  - name: summary
    source: {query: "SELECT id, title FROM items"}
    prompt: {item: "{{.title}}"}
    output: {sql: "UPDATE items SET summary = :output WHERE id = :key"}
  - name: title
    after: summaries #<
    source: {query: "SELECT id, title FROM items"}
    prompt: {item: "{{.title}}"}
    output: {sql: "UPDATE items SET title = :output WHERE id = :key"}
`, key: "jobs[1].after", what: `"summaries": no job has this name (jobs: summary, title)`},
		{name: "a cycle of after:", jobs: `  - name: summary
    after: title #<
    source: {query: "SELECT id, title FROM items"}
    prompt: {item: "{{.title}}"}
    output: {sql: "UPDATE items SET summary = :output WHERE id = :key"}
  - name: title
    after: summary
    source: {query: "SELECT id, title FROM items"}
    prompt: {item: "{{.title}}"}
    output: {sql: "UPDATE items SET title = :output WHERE id = :key"}
`, key: "jobs[0].after", what: `"title": the jobs' after: form a cycle`},
		{name: "both query and event", jobs: `  - name: summary
    source:
      query: SELECT id, title FROM items #<
      event: article.created
    prompt: {item: "{{.title}}"}
    output: {sql: "UPDATE items SET summary = :output WHERE id = :key"}
`, key: "jobs[0].source", what: "give one of query (items from a database) and event (one run per event)"},
		{name: "batch_max out of range", jobs: `  - name: summary
    source: {query: "SELECT id, title FROM items"}
    prompt:
      item: "{{.title}}"
      batch_max: 100000 #<
    output: {sql: "UPDATE items SET summary = :output WHERE id = :key"}
`, key: "jobs[0].prompt.batch_max", what: "100000: want from 1 to 1000"},
		{name: "an unknown split", jobs: `  - name: summary
    source: {query: "SELECT id, title FROM items"}
    prompt:
      item: "{{.title}}"
      split: paragraphs #<
    output: {sql: "UPDATE items SET summary = :output WHERE id = :key"}
`, key: "jobs[0].prompt.split", what: `"paragraphs": want numbered, lines or json`},
		{name: "an output with both sql and url", jobs: `  - name: summary
    source: {query: "SELECT id, title FROM items"}
    prompt: {item: "{{.title}}"}
    output:
      url: http://127.0.0.1:9/hook #<
      sql: UPDATE items SET summary = :output WHERE id = :key
`, key: "jobs[0].output", what: "give one of sql (a statement on a database) and url (an HTTP endpoint)"},
		{name: "a key column the query does not give", jobs: `  - name: summary
    source:
      query: SELECT id, title FROM items
      key: article_id #<
    prompt: {item: "{{.title}}"}
    output: {sql: "UPDATE items SET summary = :output WHERE id = :key"}
`, key: "jobs[0].source.key", what: `"article_id": the query gives no such column (it gives id, title)`},
		{name: "an output statement on a table that does not exist", jobs: `  - name: summary
    source: {query: "SELECT id, title FROM items"}
    prompt: {item: "{{.title}}"}
    output:
      sql: UPDATE articles SET summary = :output WHERE id = :key #<
`, key: "jobs[0].output.sql", what: "no such table: articles"},
		{name: "an HTTP output whose token variable is empty", jobs: `  - name: summary
    source: {query: "SELECT id, title FROM items"}
    prompt: {item: "{{.title}}"}
    output:
      url: http://127.0.0.1:9/hook
      auth_env: HOOK_TOKEN #<
`, key: "jobs[0].output.auth_env", what: "HOOK_TOKEN: the variable is empty"},
		{name: "a job named as a gateway flow", head: `addr: 127.0.0.1:0
db: %[1]q
provider_url: http://127.0.0.1:9/v1
model: sim-model
gateway: true
flows:
  - {name: summary, weight: 1}
source_db: %[2]q
jobs:
`, jobs: `  - name: summary #<
    source: {query: "SELECT id, title FROM items"}
    prompt: {item: "{{.title}}"}
    output: {sql: "UPDATE items SET summary = :output WHERE id = :key"}
`, key: "jobs[0].name", what: `"summary": also the name of a gateway flow`},
		{name: "source_db without jobs", head: `addr: 127.0.0.1:0
db: %[1]q
source_db: %[2]q #<
`, key: "source_db", what: "a database for jobs, but the file declares no jobs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			appDB := filepath.Join(dir, "sluice.db")
			team := filepath.Join(dir, "team.db")
			jobsConfigTeamDB(t, team)
			head := tt.head
			if head == "" {
				head = jobsConfigHead
			}
			file := fmt.Sprintf(head, appDB, "sqlite:"+team) + tt.jobs
			line := 1 + strings.Count(file[:strings.Index(file, "#<")], "\n")
			path := filepath.Join(dir, "serve.yaml")
			if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr testenv.Buffer
			env := &cli.Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}
			// serve returns at once on a refused file; one that it took
			// would run until this context ends, and fail the test.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			// The relative source_db of one test is resolved from where the
			// test runs: its folder no-such-folder is missing there.
			code := runMain(ctx, env, []string{"serve", "--config", path})
			msg := stderr.String()
			want := fmt.Sprintf("--config %s: %s: ", path, tt.key)
			if code == 0 || !strings.Contains(msg, want) || !strings.Contains(msg, tt.what) || !strings.Contains(msg, fmt.Sprintf("(line %d)", line)) {
				t.Fatalf("exit %d, stderr %q\nwant non-zero and %q…%q…(line %d)", code, msg, want, tt.what, line)
			}
			if n := strings.Count(msg, "(line "); n != 1 {
				t.Errorf("stderr %q: want one error, placed once", msg)
			}
			if strings.Contains(stdout.String(), "listening on") {
				t.Errorf("serve listened before refusing the file: %q", stdout.String())
			}
			if _, err := os.Stat(appDB); !os.IsNotExist(err) {
				t.Errorf("serve made its database %s before refusing the file: %v", appDB, err)
			}
			if n := jobsConfigCount(t, team, "SELECT count(*) FROM sqlite_master WHERE name = 'sluice_job_saves'"); n != 0 {
				t.Errorf("serve made sluice_job_saves in the team's database before refusing the file")
			}
		})
	}
}

// jobsConfigTeamDB makes the team's SQLite database at path: a table
// items with one row.
func jobsConfigTeamDB(t *testing.T, path string) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, s := range []string{
		"CREATE TABLE items (id INTEGER PRIMARY KEY, title TEXT NOT NULL, summary TEXT)",
		"INSERT INTO items (id, title) VALUES (1, 'An article')",
	} {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// jobsConfigCount is the number q gives on the SQLite database at path.
func jobsConfigCount(t *testing.T, path, q string) int {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(q).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}
