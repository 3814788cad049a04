package benchcmd

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sluice-dev/sluice/internal/cli"
)

// benchDB reads and writes a bench's database, PostgreSQL or SQLite, with
// $N placeholders on both.
type benchDB struct {
	pg      pgHandle      // a *pgx.Conn, or a *pgxpool.Pool that goroutines share
	pool    *pgxpool.Pool // pg when it is a pool
	closePG func()
	lite    *sql.DB
}

// pgHandle is what benchDB uses of a PostgreSQL connection or pool.
type pgHandle interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error)
}

// openBenchDB opens one connection on PostgreSQL, or a handle on an SQLite
// file (a path, or "sqlite:PATH").
func openBenchDB(ctx context.Context, dbURL string) (*benchDB, error) {
	if cli.IsPostgresURL(dbURL) {
		conn, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			return nil, err
		}
		return &benchDB{pg: conn, closePG: func() { _ = conn.Close(context.Background()) }}, nil
	}
	h, err := sql.Open("sqlite", strings.TrimPrefix(dbURL, "sqlite:"))
	if err != nil {
		return nil, err
	}
	return &benchDB{lite: h}, nil
}

// openBenchPool opens a pool of at most conns connections on PostgreSQL, for
// goroutines to share; on SQLite it is openBenchDB (database/sql pools),
// waiting up to 5 s for a lock unless the path sets busy_timeout.
func openBenchPool(ctx context.Context, dbURL string, conns int32) (*benchDB, error) {
	if !cli.IsPostgresURL(dbURL) {
		if !strings.Contains(dbURL, "busy_timeout") {
			dbURL += "?_pragma=busy_timeout(5000)"
		}
		return openBenchDB(ctx, dbURL)
	}
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = conns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &benchDB{pg: pool, pool: pool, closePG: pool.Close}, nil
}

func (d *benchDB) close() {
	if d.pg != nil {
		d.closePG()
		return
	}
	_ = d.lite.Close()
}

// exec runs q, a statement that returns no rows.
func (d *benchDB) exec(ctx context.Context, q string, args ...any) error {
	if d.pg != nil {
		_, err := d.pg.Exec(ctx, q, args...)
		return err
	}
	_, err := d.lite.ExecContext(ctx, q, args...)
	return err
}

// each runs q and calls row for every row.
func (d *benchDB) each(ctx context.Context, q string, args []any, row func(scan func(...any) error) error) error {
	var rows interface {
		Next() bool
		Scan(...any) error
		Err() error
	}
	if d.pg != nil {
		r, err := d.pg.Query(ctx, q, args...)
		if err != nil {
			return err
		}
		defer r.Close()
		rows = r
	} else {
		r, err := d.lite.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		defer r.Close()
		rows = r
	}
	for rows.Next() {
		if err := row(rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}

// freshDB returns a new database named for tag and name: an SQLite file in
// dir when admin is empty, else a database created on the PostgreSQL server
// admin names (the --db flag); drop removes the latter.
func freshDB(ctx context.Context, dir, admin, tag, name string) (db string, drop func(), err error) {
	if admin == "" {
		return filepath.Join(dir, name+".db"), func() {}, nil
	}
	u, err := url.Parse(admin)
	if err != nil {
		return "", nil, fmt.Errorf("--db: %w", err)
	}
	dbName := "sluice_bench_backfill_" + tag + "_" + name
	onServer := func(ctx context.Context, q string) error {
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			return err
		}
		defer c.Close(context.Background())
		_, err = c.Exec(ctx, q)
		return err
	}
	if err := onServer(ctx, "CREATE DATABASE "+dbName); err != nil {
		return "", nil, fmt.Errorf("create database %s: %w", dbName, err)
	}
	u.Path = "/" + dbName
	// Dropped also when the bench is interrupted: not on its context.
	drop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = onServer(ctx, "DROP DATABASE IF EXISTS "+dbName+" WITH (FORCE)")
	}
	return u.String(), drop, nil
}

// databaseSize is the size of the database: on SQLite its file and WAL.
func databaseSize(ctx context.Context, db *benchDB, dbURL string) (int64, error) {
	if db.pg != nil {
		var n int64
		err := db.each(ctx, `SELECT pg_database_size(current_database())`, nil, func(scan func(...any) error) error { return scan(&n) })
		return n, err
	}
	var n int64
	for _, f := range []string{dbURL, dbURL + "-wal"} {
		if fi, err := os.Stat(f); err == nil {
			n += fi.Size()
		}
	}
	return n, nil
}
