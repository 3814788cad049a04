package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// cacheTest is a handle of OpenDB on a new file, with one table t.
func cacheTest(t *testing.T) *sql.DB {
	t.Helper()
	db, err := OpenDB(filepath.Join(t.TempDir(), "cache.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(`CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return db
}

// cacheConn is one connection of cacheTest's handle.
func cacheConn(t *testing.T) *sql.Conn {
	t.Helper()
	conn, err := cacheTest(t).Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// kept returns the texts conn keeps compiled, most recently used first.
func kept(t *testing.T, conn *sql.Conn) []string {
	t.Helper()
	var texts []string
	err := conn.Raw(func(dc any) error {
		cc, ok := dc.(*cachingConn)
		if !ok {
			return fmt.Errorf("the handle's connection is a %T, not a *cachingConn", dc)
		}
		for e := cc.lru.Front(); e != nil; e = e.Next() {
			texts = append(texts, e.Value.(*cachedStmt).query)
		}
		if len(texts) != len(cc.byKey) {
			return fmt.Errorf("%d statements listed, %d by text", len(texts), len(cc.byKey))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return texts
}

func TestStatementsAreKeptAndRunAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := cacheConn(t)
	const insert = `INSERT INTO t (k, v) VALUES ($1, $2) RETURNING k`
	const read = `SELECT v FROM t WHERE k = $1`
	for i := range 50 {
		var k int
		if err := conn.QueryRowContext(ctx, insert, i, fmt.Sprint("v", i)).Scan(&k); err != nil || k != i {
			t.Fatalf("insert %d: k %d, %v", i, k, err)
		}
	}
	for i := range 50 {
		var v string
		if err := conn.QueryRowContext(ctx, read, i).Scan(&v); err != nil || v != fmt.Sprint("v", i) {
			t.Fatalf("read %d: %q, %v", i, v, err)
		}
	}
	if _, err := conn.ExecContext(ctx, `UPDATE t SET v = v || '!' WHERE k < $1`, 10); err != nil {
		t.Fatal(err)
	}
	// A statement whose arguments run out of range fails, and the kept
	// statement runs again afterwards with the next arguments.
	if err := conn.QueryRowContext(ctx, insert, 3, "again").Scan(new(int)); err == nil {
		t.Fatal("insert of an existing key succeeded")
	}
	var v string
	if err := conn.QueryRowContext(ctx, read, 3).Scan(&v); err != nil || v != "v3!" {
		t.Fatalf("read 3 after the failed insert: %q, %v", v, err)
	}
	got := kept(t, conn)
	want := []string{read, `UPDATE t SET v = v || '!' WHERE k < $1`, insert}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Fatalf("kept %q, want it to hold %q", got, w)
		}
	}
	if got[0] != read {
		t.Fatalf("most recently used: %q, want %q", got[0], read)
	}
}

func TestStatementRunWhileItsRowsAreRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := cacheTest(t)
	for i := range 5 {
		if _, err := db.Exec(`INSERT INTO t (k, v) VALUES ($1, $2)`, i, fmt.Sprint("v", i)); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	const list = `SELECT k, v FROM t WHERE k >= $1 ORDER BY k`
	outer, err := tx.QueryContext(ctx, list, 0)
	if err != nil {
		t.Fatal(err)
	}
	var pairs []string
	for outer.Next() {
		var k int
		var v string
		if err := outer.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		// The same text again while its rows are read: it must not take
		// the statement the outer rows still step through.
		inner, err := tx.QueryContext(ctx, list, k)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for inner.Next() {
			n++
		}
		if err := inner.Close(); err != nil {
			t.Fatal(err)
		}
		pairs = append(pairs, fmt.Sprintf("%d:%s:%d", k, v, n))
	}
	if err := outer.Close(); err != nil {
		t.Fatal(err)
	}
	want := []string{"0:v0:5", "1:v1:4", "2:v2:3", "3:v3:2", "4:v4:1"}
	if !slices.Equal(pairs, want) {
		t.Fatalf("rows %q, want %q", pairs, want)
	}
}

func TestKeptStatementsFollowTheSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := cacheConn(t)
	if _, err := conn.ExecContext(ctx, `INSERT INTO t (k, v) VALUES (1, 'a')`); err != nil {
		t.Fatal(err)
	}
	const all = `SELECT * FROM t`
	columns := func() []string {
		rows, err := conn.QueryContext(ctx, all)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		c, err := rows.Columns()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if c := columns(); !slices.Equal(c, []string{"k", "v"}) {
		t.Fatalf("columns %q", c)
	}
	// A script of two statements runs whole, and is not kept.
	const script = `ALTER TABLE t ADD COLUMN w TEXT; UPDATE t SET w = 'b';`
	if _, err := conn.ExecContext(ctx, script); err != nil {
		t.Fatal(err)
	}
	if c := columns(); !slices.Equal(c, []string{"k", "v", "w"}) {
		t.Fatalf("columns after ALTER TABLE: %q, want the new column", c)
	}
	var w string
	if err := conn.QueryRowContext(ctx, `SELECT w FROM t WHERE k = 1`).Scan(&w); err != nil || w != "b" {
		t.Fatalf("w = %q, %v: the script's second statement did not run", w, err)
	}
	if slices.Contains(kept(t, conn), script) {
		t.Fatal("a script of two statements was kept")
	}
}

func TestKeptStatementsAreBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := cacheConn(t)
	// Rows being read keep their statement through every eviction.
	const held = `SELECT k FROM t`
	if _, err := conn.ExecContext(ctx, `INSERT INTO t (k, v) VALUES (1, 'a'), (2, 'b')`); err != nil {
		t.Fatal(err)
	}
	rows, err := conn.QueryContext(ctx, held)
	if err != nil {
		t.Fatal(err)
	}
	if !rows.Next() {
		t.Fatal("no first row")
	}
	for i := range 3 * stmtCacheSize {
		var n int
		if err := conn.QueryRowContext(ctx, fmt.Sprintf(`SELECT %d + $1`, i), 1).Scan(&n); err != nil || n != i+1 {
			t.Fatalf("statement %d: %d, %v", i, n, err)
		}
	}
	var k int
	if err := rows.Scan(&k); err != nil || k != 1 {
		t.Fatalf("first row read after the evictions: %d, %v", k, err)
	}
	if !rows.Next() {
		t.Fatal("the held rows lost their second row")
	}
	if err := rows.Scan(&k); err != nil || k != 2 {
		t.Fatalf("second row %d, %v", k, err)
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	got := kept(t, conn)
	if len(got) > stmtCacheSize {
		t.Fatalf("%d statements kept, at most %d allowed", len(got), stmtCacheSize)
	}
	if !slices.Contains(got, held) {
		t.Fatal("the statement whose rows were being read was evicted")
	}
	// A text too long to keep runs all the same.
	long := `SELECT 1` + strings.Repeat(" ", stmtCacheMax)
	var one int
	if err := conn.QueryRowContext(ctx, long).Scan(&one); err != nil || one != 1 {
		t.Fatalf("long text: %d, %v", one, err)
	}
	if slices.Contains(kept(t, conn), long) {
		t.Fatal("a text longer than stmtCacheMax was kept")
	}
}

func TestKeptStatementAfterACancel(t *testing.T) {
	t.Parallel()
	conn := cacheConn(t)
	// A query that would run for ever (a recursive count without end) is
	// interrupted by its context; the same text then runs again.
	const count = `WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < $1) SELECT count(*) FROM c`
	// Whether the cancel comes before the query reaches SQLite or while it
	// runs, the query fails; it never ends by itself.
	ctx, cancel := context.WithCancel(context.Background())
	go cancel()
	rows, err := conn.QueryContext(ctx, count, int64(1)<<62)
	if err == nil {
		for rows.Next() {
		}
		err = rows.Err()
		rows.Close()
	}
	if err == nil {
		t.Fatal("an unbounded count ended without error after its context was cancelled")
	}
	if !errors.Is(err, context.Canceled) && !strings.Contains(err.Error(), "interrupt") {
		t.Fatalf("cancelled count: %v", err)
	}
	var n int
	if err := conn.QueryRowContext(context.Background(), count, 10).Scan(&n); err != nil || n != 10 {
		t.Fatalf("the same text after the cancel: %d, %v", n, err)
	}
}

// What the driver would take for a script (a statement followed by
// anything, a newline included) is kept without its end, so that it runs
// as one compiled statement; what may be several statements is not kept.
func TestStatementText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		query, text string
		ok          bool
	}{
		{"SELECT 1", "SELECT 1", true},
		{"SELECT 1;", "SELECT 1", true},
		{"-- a comment\nSELECT k FROM t\nWHERE k = $1;\n", "-- a comment\nSELECT k FROM t\nWHERE k = $1", true},
		{"SELECT 1 ; \n\t", "SELECT 1 ", true},
		{"SELECT 1 -- a comment;", "SELECT 1 -- a comment", true},
		{"SELECT 1; SELECT 2", "", false},
		{"SELECT 1;\nSELECT 2;\n", "", false},
		{"SELECT ';'", "", false},
		{"SELECT 1 /* ; */", "", false},
		{"SELECT 1" + strings.Repeat(" ", stmtCacheMax), "", false},
	} {
		text, ok := statement(tc.query)
		if text != tc.text || ok != tc.ok {
			t.Errorf("statement(%q) = %q, %v; want %q, %v", tc.query, text, ok, tc.text, tc.ok)
		}
	}
}

// BenchmarkStatement runs one read of a row as the store's statements are
// written (in a file, ending with a semicolon and a newline) on a
// connection that keeps its statements and on the driver's own, which
// compiles it at every run.
func BenchmarkStatement(b *testing.B) {
	const read = "-- one row by its key\nSELECT v FROM t WHERE k = $1;\n"
	dir := b.TempDir()
	for _, side := range []struct {
		name string
		open func(path string) (*sql.DB, error)
	}{
		{"kept", OpenDB},
		{"driver", func(path string) (*sql.DB, error) { return sql.Open("sqlite", path) }},
	} {
		b.Run(side.name, func(b *testing.B) {
			db, err := side.open(filepath.Join(dir, side.name+".db"))
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			db.SetMaxOpenConns(1)
			if _, err := db.Exec(`CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT NOT NULL); INSERT INTO t VALUES (1, 'a')`); err != nil {
				b.Fatal(err)
			}
			var v string
			for b.Loop() {
				if err := db.QueryRow(read, 1).Scan(&v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
