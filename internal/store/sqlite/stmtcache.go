package sqlite

import (
	"container/list"
	"context"
	"database/sql/driver"
	"errors"
	"reflect"
	"strings"

	sqlitedrv "modernc.org/sqlite"
)

// A statement the driver runs through database/sql's Exec and Query is
// compiled anew every time: modernc.org/sqlite prepares the text, runs it
// and finalizes it. DBOS runs every statement of a run that way, the same
// few dozen texts over and over, and compiling them was about a third of
// the CPU a run took on SQLite — more than running them. Each connection of
// the store's handle therefore keeps the statements it compiled (at most
// stmtCacheSize of them, the least recently used dropped first) and runs a
// text it has seen on the statement it kept, as a prepared statement:
// SQLite rebinds the arguments and, if the schema changed since, compiles
// it again by itself. A text of several statements (a migration), a text
// longer than stmtCacheMax, or a statement whose rows are still being read
// when the same text comes again goes the driver's way, once.

const (
	// stmtCacheSize bounds the statements one connection keeps. DBOS and
	// the store run about a hundred different texts in all; the ones a
	// run, a poll or a backfill's batch repeats are fewer.
	stmtCacheSize = 128
	// stmtCacheMax is the longest text kept: longer ones are those built
	// for a number of rows (a page of items added in one INSERT), which
	// rarely come back with the same number.
	stmtCacheMax = 4096
)

// Connector returns a connector for sql.OpenDB that opens connections to
// dsn (a path with modernc.org/sqlite DSN parameters, taken as given) each
// keeping the statements it compiled: for SQLite databases other than the
// store's, such as a job's source database.
func Connector(dsn string) driver.Connector { return connector{dsn: dsn, drv: sqliteDriver} }

// connector opens the handle's connections with modernc.org/sqlite's
// driver, each with its cache of statements.
type connector struct {
	dsn string
	drv *sqlitedrv.Driver
}

var _ driver.Connector = connector{}

func (c connector) Connect(context.Context) (driver.Conn, error) {
	dc, err := c.drv.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return newCachingConn(dc)
}

func (c connector) Driver() driver.Driver { return c.drv }

// The driver's connection, as cachingConn needs it: every method it
// forwards to.
type sqliteConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
}

// cachingConn is a connection of the driver that keeps the statements it
// ran. database/sql uses a connection from one goroutine at a time, so it
// needs no lock of its own.
type cachingConn struct {
	sqliteConn
	lru   *list.List               // of *cachedStmt, most recently used first
	byKey map[string]*list.Element // by query
}

var _ sqliteConn = (*cachingConn)(nil)

type cachedStmt struct {
	query string // as run, the key it is kept by
	stmt  driver.Stmt
	busy  bool // its rows are being read
}

func newCachingConn(dc driver.Conn) (driver.Conn, error) {
	sc, ok := dc.(sqliteConn)
	if !ok {
		_ = dc.Close()
		return nil, errors.New("sqlite: the driver's connection lacks a method the store needs")
	}
	return &cachingConn{sqliteConn: sc, lru: list.New(), byKey: map[string]*list.Element{}}, nil
}

// statement returns query as one statement to keep, without the final
// semicolon and the blanks around it (the driver takes whatever follows a
// statement's semicolon, a newline included, as more statements, and would
// compile the text at every run); false when query is too long to keep or
// may be several statements.
func statement(query string) (string, bool) {
	if len(query) > stmtCacheMax {
		return "", false
	}
	// A semicolon anywhere but at the end may separate statements; a text
	// that merely quotes one goes uncached, which costs only the compile.
	i := strings.IndexByte(query, ';')
	if i < 0 {
		return query, true
	}
	if strings.TrimSpace(query[i+1:]) != "" {
		return "", false
	}
	return query[:i], true
}

// take returns the kept statement of query, compiling and keeping it if
// new; nil when query goes the driver's way.
func (c *cachingConn) take(ctx context.Context, query string) (*cachedStmt, error) {
	if e, ok := c.byKey[query]; ok {
		cs := e.Value.(*cachedStmt)
		if cs.busy {
			return nil, nil
		}
		c.lru.MoveToFront(e)
		return cs, nil
	}
	text, ok := statement(query)
	if !ok {
		return nil, nil
	}
	st, err := c.sqliteConn.PrepareContext(ctx, text)
	if err != nil {
		return nil, err
	}
	cs := &cachedStmt{query: query, stmt: st}
	c.byKey[query] = c.lru.PushFront(cs)
	for c.lru.Len() > stmtCacheSize {
		if !c.evict() {
			break
		}
	}
	return cs, nil
}

// evict closes the least recently used statement not being read; false
// when every one is.
func (c *cachingConn) evict() bool {
	for e := c.lru.Back(); e != nil; e = e.Prev() {
		cs := e.Value.(*cachedStmt)
		if cs.busy {
			continue
		}
		c.lru.Remove(e)
		delete(c.byKey, cs.query)
		_ = cs.stmt.Close()
		return true
	}
	return false
}

func (c *cachingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	cs, err := c.take(ctx, query)
	if err != nil {
		return nil, err
	}
	if cs == nil {
		return c.sqliteConn.ExecContext(ctx, query, args)
	}
	return cs.stmt.(driver.StmtExecContext).ExecContext(ctx, args)
}

func (c *cachingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	cs, err := c.take(ctx, query)
	if err != nil {
		return nil, err
	}
	if cs == nil {
		return c.sqliteConn.QueryContext(ctx, query, args)
	}
	r, err := cs.stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
	if err != nil {
		return nil, err
	}
	cs.busy = true
	return &cachedRows{Rows: r, stmt: cs}, nil
}

// Close closes the kept statements, then the connection.
func (c *cachingConn) Close() error {
	for e := c.lru.Front(); e != nil; e = e.Next() {
		_ = e.Value.(*cachedStmt).stmt.Close()
	}
	c.lru.Init()
	clear(c.byKey)
	return c.sqliteConn.Close()
}

// cachedRows are the rows of a kept statement, which may run again once
// they are closed. The driver's rows also describe their columns' types.
type cachedRows struct {
	driver.Rows
	stmt *cachedStmt
}

type columnTyper interface {
	driver.RowsColumnTypeDatabaseTypeName
	driver.RowsColumnTypeLength
	driver.RowsColumnTypeNullable
	driver.RowsColumnTypePrecisionScale
	driver.RowsColumnTypeScanType
}

var _ columnTyper = (*cachedRows)(nil)

func (r *cachedRows) Close() error {
	err := r.Rows.Close()
	r.stmt.busy = false
	return err
}

func (r *cachedRows) typer() columnTyper {
	t, _ := r.Rows.(columnTyper)
	return t
}

func (r *cachedRows) ColumnTypeDatabaseTypeName(i int) string {
	if t := r.typer(); t != nil {
		return t.ColumnTypeDatabaseTypeName(i)
	}
	return ""
}

func (r *cachedRows) ColumnTypeLength(i int) (int64, bool) {
	if t := r.typer(); t != nil {
		return t.ColumnTypeLength(i)
	}
	return 0, false
}

func (r *cachedRows) ColumnTypeNullable(i int) (bool, bool) {
	if t := r.typer(); t != nil {
		return t.ColumnTypeNullable(i)
	}
	return false, false
}

func (r *cachedRows) ColumnTypePrecisionScale(i int) (int64, int64, bool) {
	if t := r.typer(); t != nil {
		return t.ColumnTypePrecisionScale(i)
	}
	return 0, 0, false
}

func (r *cachedRows) ColumnTypeScanType(i int) reflect.Type {
	if t := r.typer(); t != nil {
		return t.ColumnTypeScanType(i)
	}
	return reflect.TypeFor[any]()
}
