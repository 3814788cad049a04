package jobs

import (
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/yamlfile"
)

// writeYAML writes text to a config file in a fresh folder and returns
// its path.
func writeYAML(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// mustLoad loads text as a config file, failing the test on an error.
func mustLoad(t *testing.T, text string) *Config {
	t.Helper()
	c, err := Load(writeYAML(t, text))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return c
}

// wantPlaced fails t unless err is one error that names the file path,
// the key path key and the line, as "PATH: KEY: … (line N)", and says
// what.
func wantPlaced(t *testing.T, err error, path, key string, line int, what string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want %s: %s: %s (line %d)", path, key, what, line)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, path+": "+key+": ") || !strings.HasSuffix(msg, fmt.Sprintf("(line %d)", line)) || !strings.Contains(msg, what) {
		t.Fatalf("error %q\nwant %s: %s: …%s… (line %d)", msg, path, key, what, line)
	}
	if strings.Count(msg, "(line ") != 1 {
		t.Errorf("error %q: want one problem, placed once", msg)
	}
	var e *yamlfile.Error
	if !errors.As(err, &e) || e.Path != key || e.Line != line {
		t.Errorf("error %q: want a *yamlfile.Error at %s line %d, got %+v", msg, key, line, e)
	}
}

// openDB opens the database at url as a test sees it: an SQLite file
// (sqlite:PATH or PATH, made if missing) or a postgres:// URL.
func openDB(t *testing.T, url string) *sql.DB {
	t.Helper()
	driver, dsn := "sqlite", strings.TrimPrefix(url, "sqlite:")
	if strings.HasPrefix(url, "postgres://") {
		driver, dsn = "pgx", url
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// execDB runs each statement on the database at url.
func execDB(t *testing.T, url string, stmts ...string) {
	t.Helper()
	db := openDB(t, url)
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	_ = db.Close()
}

// count returns the single number q gives on the database at url.
func count(t *testing.T, url, q string, args ...any) int {
	t.Helper()
	db := openDB(t, url)
	defer db.Close()
	var n int
	if err := db.QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// hasTable reports whether the database at url has a table of that name.
func hasTable(t *testing.T, url, name string) bool {
	t.Helper()
	q := "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = $1"
	if strings.HasPrefix(url, "postgres://") {
		q = "SELECT count(*) FROM information_schema.tables WHERE table_name = $1"
	}
	return count(t, url, q, name) > 0
}

// quoted is s as a YAML double-quoted scalar (a URL or a path).
func quoted(s string) string { return fmt.Sprintf("%q", s) }

// markedLine is the line of text that ends with the comment #<, the line
// a test expects an error to name.
func markedLine(t *testing.T, text string) int {
	t.Helper()
	i := strings.Index(text, "#<")
	if i < 0 || strings.Count(text, "#<") != 1 {
		t.Fatalf("want one line marked #< in\n%s", text)
	}
	return 1 + strings.Count(text[:i], "\n")
}
