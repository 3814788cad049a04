package jobs

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/testenv"
)

// teamTables are the team's tables the Check tests run against.
var teamTables = []string{
	"CREATE TABLE items (id INTEGER PRIMARY KEY, title TEXT NOT NULL, body TEXT)",
	"CREATE TABLE results (item_key TEXT NOT NULL UNIQUE, output TEXT NOT NULL, tokens INTEGER, processed_at TEXT)",
}

// teamDB makes the team's database on the kind of database url is (an
// SQLite path, or a fresh PostgreSQL database), with teamTables, and
// returns the URL a config file names it by.
func teamDB(t *testing.T, url string) string {
	t.Helper()
	if !strings.HasPrefix(url, "postgres://") {
		url = "sqlite:" + filepath.Join(filepath.Dir(url), "team.db")
	}
	execDB(t, url, teamTables...)
	return url
}

// goodJob is a job that Check accepts on teamDB, as a file's lines.
const goodJob = `source_db: %s
jobs:
  - name: summary
    source:
      query: SELECT id, title, body FROM items WHERE body IS NOT NULL
      key: id
    prompt:
      system: "Summarise {{.Count}} articles for {{.Job}}."
      item: "{{.title}}: {{truncate 100 .body}}"
      batch_max: 5
    output:
      sql: >-
        INSERT INTO results (item_key, output, tokens, processed_at)
        VALUES (:key, :output, :tokens, :processed_at)
  - name: title
    after: summary
    source:
      query: SELECT id, title FROM items
    prompt: {item: "{{.title}}", split: lines, batch_max: 10}
    output: {url: "http://127.0.0.1:9/titles", auth_env: HOOK_TOKEN}
  - name: on-demand
    source: {event: doc.created, key: doc_id}
    prompt: {item: "{{.text}}"}
    output: {sql: "INSERT INTO results (item_key, output) VALUES (:key, :output)"}
`

// Check accepts a good file on both databases, with rows and without,
// and writes nothing: not the output statement, not sluice_job_saves, not
// the app's database.
func TestJobsCheckGoodConfig(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		team := teamDB(t, url)
		appDB := filepath.Join(t.TempDir(), "sluice.db")
		c := mustLoad(t, fmt.Sprintf(goodJob, quoted(team)))
		o := Options{AppDB: appDB, Model: "sim-model", Getenv: func(k string) string {
			if k == "HOOK_TOKEN" {
				return "secret"
			}
			return ""
		}}
		// No rows: the templates render on placeholder values.
		if err := c.Check(context.Background(), o); err != nil {
			t.Fatalf("Check without rows: %v", err)
		}
		execDB(t, team, "INSERT INTO items (id, title, body) VALUES (1, 'Alpha', 'The body'), (2, 'Beta', NULL)")
		if err := c.Check(context.Background(), o); err != nil {
			t.Fatalf("Check with rows: %v", err)
		}
		if n := count(t, team, "SELECT count(*) FROM results"); n != 0 {
			t.Errorf("Check wrote %d results", n)
		}
		if hasTable(t, team, SavesTable) {
			t.Errorf("Check created %s", SavesTable)
		}
		if n := count(t, team, "SELECT count(*) FROM items"); n != 2 {
			t.Errorf("%d items after Check, want the 2 written", n)
		}
		if _, err := os.Stat(appDB); !os.IsNotExist(err) {
			t.Errorf("Check made the app's database, which no job uses: %v", err)
		}

		// The variable the HTTP output names must be set.
		o.Getenv = nil
		path := c.Path()
		wantPlaced(t, c.Check(context.Background(), o), path, "jobs[1].output.auth_env", 20, "HOOK_TOKEN: the variable is empty")
		// A job naming no model, on an app without one.
		o.Getenv, o.Model = func(string) string { return "x" }, ""
		wantPlaced(t, c.Check(context.Background(), o), path, "jobs[0].model", 3, "missing: the job names no model and the app has none")
	})
}

// Each file Check refuses gets one error naming the file, the key and the
// line (marked #<), on both databases where a database is in question.
func TestCheckRefusesJobsTheDatabaseCannotRun(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, file, key, what string
		pgWhat                string // what on PostgreSQL, if it says it in other words
	}{
		{"a column prompt.item uses that the query does not give", `source_db: %s
jobs:
  - name: summary
    source: {query: "SELECT id, title FROM items"}
    prompt:
      item: "{{.title}}: {{.summary}}" #<
    output: {sql: "INSERT INTO results (item_key, output) VALUES (:key, :output)"}
`, "jobs[0].prompt.item", "{{.summary}}: the query gives no column summary (it gives id, title)", ""},
		{"a key column the query does not give", `source_db: %s
jobs:
  - name: summary
    source:
      query: SELECT id, title FROM items
      key: item_id #<
    prompt: {item: "{{.title}}"}
    output: {sql: "INSERT INTO results (item_key, output) VALUES (:key, :output)"}
`, "jobs[0].source.key", `"item_id": the query gives no such column (it gives id, title)`, ""},
		{"an output statement on a table that does not exist", `source_db: %s
jobs:
  - name: summary
    source: {query: "SELECT id, title FROM items"}
    prompt: {item: "{{.title}}"}
    output:
      sql: INSERT INTO summaries (item_key, output) VALUES (:key, :output) #<
`, "jobs[0].output.sql", "no such table: summaries", `relation "summaries" does not exist`},
		{"an output statement on a column that does not exist", `source_db: %s
jobs:
  - name: summary
    source: {query: "SELECT id, title FROM items"}
    prompt: {item: "{{.title}}"}
    output: {sql: "INSERT INTO results (item_key, outptu) VALUES (:key, :output)"} #<
`, "jobs[0].output.sql", "no column named outptu", `column "outptu" of relation "results" does not exist`},
		{"a source query on a table that does not exist", `source_db: %s
jobs:
  - name: summary
    source:
      query: SELECT id, title FROM articles #<
    prompt: {item: "{{.title}}"}
    output: {sql: "INSERT INTO results (item_key, output) VALUES (:key, :output)"}
`, "jobs[0].source.query", "no such table: articles", `relation "articles" does not exist`},
		{"a source query that is not SQL", `source_db: %s
jobs:
  - name: summary
    source:
      query: SELEKT id FROM items #<
    prompt: {item: "{{.id}}"}
    output: {sql: "INSERT INTO results (item_key, output) VALUES (:key, :output)"}
`, "jobs[0].source.query", "runs with LIMIT 0 on", ""},
		{"a system template that fails on the batch", `source_db: %s
jobs:
  - name: summary
    source: {query: "SELECT id, title FROM items"}
    prompt:
      system: "{{.Nope}}" #<
      item: "{{.title}}"
    output: {sql: "INSERT INTO results (item_key, output) VALUES (:key, :output)"}
`, "jobs[0].prompt.system", "can't evaluate field Nope", ""},
	}
	testenv.Databases(t, func(t *testing.T, url string) {
		team := teamDB(t, url)
		execDB(t, team, "INSERT INTO items (id, title, body) VALUES (1, 'Alpha', 'The body')")
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				file := fmt.Sprintf(tt.file, quoted(team))
				path := writeYAML(t, file)
				c, err := Load(path)
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				what := tt.what
				if tt.pgWhat != "" && strings.HasPrefix(team, "postgres://") {
					what = tt.pgWhat
				}
				wantPlaced(t, c.Check(context.Background(), Options{AppDB: filepath.Join(t.TempDir(), "sluice.db"), Model: "m"}), path, tt.key, markedLine(t, file), what)
			})
		}
		if hasTable(t, team, SavesTable) {
			t.Errorf("Check created %s", SavesTable)
		}
	})
}

// A database that does not answer is named by the key that gives it: the
// file's source_db, a job's source.db or output.db.
func TestJobsCheckUnreachableDatabases(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missing := filepath.Join(dir, "nowhere", "team.db")
	team := "sqlite:" + filepath.Join(dir, "team.db")
	execDB(t, team, teamTables...)
	// A port nothing listens on: one just closed.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable&connect_timeout=5", ln.Addr())
	_ = ln.Close()
	file := func(sourceDB, sourceDBOfJob, outputDBOfJob string) string {
		var b strings.Builder
		fmt.Fprintf(&b, "source_db: %s\njobs:\n  - name: summary\n    source:\n      query: SELECT id, title FROM items\n", sourceDB)
		if sourceDBOfJob != "" {
			fmt.Fprintf(&b, "      db: %s\n", sourceDBOfJob)
		}
		b.WriteString("    prompt: {item: \"{{.title}}\"}\n    output:\n      sql: INSERT INTO results (item_key, output) VALUES (:key, :output)\n")
		if outputDBOfJob != "" {
			fmt.Fprintf(&b, "      db: %s\n", outputDBOfJob)
		}
		return b.String()
	}
	tests := []struct {
		name, file, key, what string
	}{
		{"a missing SQLite file as source_db", file(quoted("sqlite:"+missing)+" #<", "", ""),
			"source_db", "database " + missing + ": stat " + missing + ": no such file or directory"},
		{"a missing SQLite file as a path", file(quoted(missing)+" #<", "", ""),
			"source_db", "database " + missing + ": stat"},
		{"a folder as the database", file(quoted(dir)+" #<", "", ""),
			"source_db", "database " + dir + ": not a regular file"},
		{"a PostgreSQL server that does not answer", file(quoted(closed)+" #<", "", ""),
			"source_db", "database postgres://postgres@" + ln.Addr().String() + "/postgres?"},
		{"a job's own source database", file(quoted(team), quoted(closed)+" #<", ""),
			"jobs[0].source.db", "database postgres://postgres@" + ln.Addr().String()},
		{"a job's output database", file(quoted(team), "", quoted("sqlite:"+missing)+" #<"),
			"jobs[0].output.db", "database " + missing + ": stat"},
		{"the source's database is the output's", file(quoted(team), quoted("sqlite:"+missing)+" #<", ""),
			"jobs[0].source.db", "database " + missing + ": stat"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := writeYAML(t, tt.file)
			c, err := Load(path)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			appDB := filepath.Join(t.TempDir(), "sluice.db")
			wantPlaced(t, c.Check(context.Background(), Options{AppDB: appDB, Model: "m"}), path, tt.key, markedLine(t, tt.file), tt.what)
			if _, err := os.Stat(missing); !os.IsNotExist(err) {
				t.Errorf("Check made the missing database: %v", err)
			}
		})
	}
}

// A job on the app's own database (no source_db) is checked there; an
// event's job with an HTTP output needs no database at all.
func TestJobsCheckOnTheAppsDatabase(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		execDB(t, url, teamTables...)
		c := mustLoad(t, `jobs:
  - name: summary
    source: {query: "SELECT id, title FROM items"}
    prompt: {item: "{{.title}}"}
    output: {sql: "INSERT INTO results (item_key, output) VALUES (:key, :output)"}
`)
		if err := c.Check(context.Background(), Options{AppDB: url, Model: "m"}); err != nil {
			t.Fatalf("Check on the app's database: %v", err)
		}
		if hasTable(t, url, SavesTable) {
			t.Errorf("Check created %s", SavesTable)
		}
	})
	ev := mustLoad(t, `jobs:
  - name: hook
    source: {event: doc.created}
    prompt: {item: "{{.title}} {{.body}}"}
    output: {url: "http://127.0.0.1:9/hook"}
`)
	appDB := filepath.Join(t.TempDir(), "sluice.db")
	if err := ev.Check(context.Background(), Options{AppDB: appDB, Model: "m"}); err != nil {
		t.Fatalf("Check of an event's job: %v", err)
	}
	if _, err := os.Stat(appDB); !os.IsNotExist(err) {
		t.Errorf("Check of an event's HTTP job made the app's database: %v", err)
	}
}
