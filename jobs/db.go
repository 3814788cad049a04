package jobs

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/sluice-dev/sluice/internal/store/sqlite"
)

// dbRef is a database a job names: its URL as given, and its dialect.
type dbRef struct {
	url      string
	postgres bool
	path     string // SQLite: the file
}

func parseDB(u string) dbRef {
	if strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://") {
		return dbRef{url: u, postgres: true}
	}
	p, _ := strings.CutPrefix(u, "sqlite:")
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	return dbRef{url: u, path: p}
}

// same reports whether r and o are one database: one SQLite file, or one
// PostgreSQL database on one server.
func (r dbRef) same(o dbRef) bool {
	if r.postgres != o.postgres {
		return false
	}
	if !r.postgres {
		a, err1 := filepath.Abs(r.path)
		b, err2 := filepath.Abs(o.path)
		return err1 == nil && err2 == nil && a == b
	}
	a, err1 := pgx.ParseConfig(r.url)
	b, err2 := pgx.ParseConfig(o.url)
	return err1 == nil && err2 == nil && a.Host == b.Host && a.Port == b.Port && a.Database == b.Database
}

// redacted is the database's URL without its password, to name it in
// errors and logs.
func (r dbRef) redacted() string {
	if !r.postgres {
		return r.path
	}
	u, err := url.Parse(r.url)
	if err != nil {
		return "postgres://…"
	}
	return u.Redacted()
}

// open opens the database and checks it answers within 10s. An SQLite
// file must exist: a job's database is the team's, never made up here.
// SQLite is opened as sluice opens its own — WAL, a 5s busy timeout,
// transactions that take the write lock up front, each connection keeping
// the statements it compiled — so that the team's programs and sluice
// share the file without failing on each other's locks.
func (r dbRef) open(ctx context.Context) (*sql.DB, error) {
	var db *sql.DB
	var err error
	if r.postgres {
		db, err = sql.Open("pgx", r.url)
	} else {
		if fi, serr := os.Stat(r.path); serr != nil {
			return nil, fmt.Errorf("database %s: %w", r.path, serr)
		} else if !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("database %s: not a regular file", r.path)
		}
		params := "_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate"
		db = sql.OpenDB(sqlite.Connector("file:" + r.path + "?" + params))
	}
	if err != nil {
		return nil, fmt.Errorf("database %s: %w", r.redacted(), err)
	}
	db.SetMaxOpenConns(4)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("database %s: %w", r.redacted(), err)
	}
	return db, nil
}

// source is a job's source query on its database.
type source struct {
	q        string // the query, trimmed of a final ;
	key      string // the key column
	postgres bool
}

// keyText is the key as text, in byte order on both databases, whatever
// collation the column has.
func (s source) keyText() string {
	if s.postgres {
		return "CAST(src." + s.key + ` AS TEXT) COLLATE "C"`
	}
	return "CAST(src." + s.key + " AS TEXT) COLLATE BINARY"
}

// keyColumn is the column the reads of rows add for the key as text: the
// key as the pages list it, whatever the value's type.
const keyColumn = "sluice_key"

// pageSQL lists the keys after $1, increasing, at most $2.
func (s source) pageSQL() string {
	return "SELECT " + s.keyText() + " AS " + keyColumn + " FROM (" + s.q + ") AS src WHERE " + s.keyText() +
		" > $1 ORDER BY 1 LIMIT $2"
}

// columns runs the query with LIMIT 0 and returns its columns.
func (s source) columns(ctx context.Context, db *sql.DB) ([]string, error) {
	rows, err := db.QueryContext(ctx, "SELECT * FROM ("+s.q+") AS src LIMIT 0")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return rows.Columns()
}

// sample reads one row of the query, nil if it has none.
func (s source) sample(ctx context.Context, db *sql.DB) (*row, error) {
	rows, err := s.rows(ctx, db, "SELECT "+s.keyText()+" AS "+keyColumn+", src.* FROM ("+s.q+") AS src LIMIT 1")
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	return &rows[0], nil
}

// pending lists a page of keys.
func (s source) pending(ctx context.Context, db *sql.DB, after string, limit int) ([]string, error) {
	rows, err := db.QueryContext(ctx, s.pageSQL(), after, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, rows.Err()
}

// load reads the rows of keys that the query still lists, as JSON, by key.
func (s source) load(ctx context.Context, db *sql.DB, keys []string) (map[string]json.RawMessage, error) {
	out := make(map[string]json.RawMessage, len(keys))
	for len(keys) > 0 {
		n := min(len(keys), 500)
		marks := make([]string, n)
		args := make([]any, n)
		for i := range n {
			marks[i], args[i] = fmt.Sprintf("$%d", i+1), keys[i]
		}
		rows, err := s.rows(ctx, db, "SELECT "+s.keyText()+" AS "+keyColumn+", src.* FROM ("+s.q+") AS src WHERE "+s.keyText()+" IN ("+strings.Join(marks, ", ")+")", args...)
		if err != nil {
			return nil, err
		}
		for _, r := range rows {
			b, err := json.Marshal(r.Fields)
			if err != nil {
				return nil, fmt.Errorf("item %s: %w", r.Key, err)
			}
			out[r.Key] = b
		}
		keys = keys[n:]
	}
	return out, nil
}

// rows runs q and reads its rows, each column's value as text, a number,
// a bool or "" for NULL.
func (s source) rows(ctx context.Context, db *sql.DB, q string, args ...any) ([]row, error) {
	rs, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	cols, err := rs.Columns()
	if err != nil {
		return nil, err
	}
	var out []row
	for rs.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rs.Scan(ptrs...); err != nil {
			return nil, err
		}
		r := row{Fields: make(map[string]any, len(cols))}
		first := 0
		if len(cols) > 0 && cols[0] == keyColumn {
			// The key as the pages list it: the database's text of it.
			r.Key, first = fmt.Sprint(plain(vals[0])), 1
		}
		for i, c := range cols[first:] {
			r.Fields[c] = plain(vals[first+i])
		}
		k, ok := r.Fields[s.key]
		if !ok {
			return nil, fmt.Errorf("the query gives no column %s (the key)", s.key)
		}
		if first == 0 {
			r.Key = fmt.Sprint(k)
		}
		out = append(out, r)
	}
	return out, rs.Err()
}

// plain is a column's value as the templates and JSON take it.
func plain(v any) any {
	switch v := v.(type) {
	case nil:
		return ""
	case []byte:
		return string(v)
	case time.Time:
		return v.UTC().Format(time.RFC3339Nano)
	}
	return v
}

// decodeRow reads an item's data as Load recorded it: numbers stay as
// written.
func decodeRow(data []byte) (map[string]any, error) {
	d := json.NewDecoder(strings.NewReader(string(data)))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, errors.New("not an object")
	}
	return m, nil
}
