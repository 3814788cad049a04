// Package postgres is the store driver for PostgreSQL, for running sluice on
// several nodes: every node's governor records its charges in one database,
// so each sees what the others spent. The pool it opens is shared with DBOS
// (dbos.Config.SystemDBPool) through Handle.
//
// Tables live in the connection's default schema (search_path), next to
// DBOS's own "dbos" schema. The charges' and the migrations' times are
// stored as timestamptz, the other tables' as BIGINT Unix milliseconds,
// both truncated to the millisecond so that both drivers return the same
// values.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-dev/sluice/internal/redact"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/store/internal/driver"
)

func init() {
	store.Register(store.DriverPostgres, func(ctx context.Context, dbURL string) (store.Store, error) {
		s, err := Open(ctx, dbURL)
		if err != nil {
			return nil, err // not a nil *Store in a non-nil interface
		}
		return s, nil
	})
}

// Store is a store.Store on one PostgreSQL database. It is safe for
// simultaneous use by multiple goroutines and by many processes.
type Store struct {
	// Tables gives every method of store.Store but Handle, String,
	// Close and the locks, and Migrations.
	driver.Tables

	pool *pgxpool.Pool
	url  string // redacted

	closeOnce sync.Once
}

var _ store.Store = (*Store)(nil)

// Open connects to the database at dbURL ("postgres://…" or "postgresql://…",
// with any pgx pool parameter such as pool_max_conns) and applies the
// migrations it lacks. A database the server does not have is created
// first, as DBOS creates its own (see createMissing). The pool is set up as
// DBOS sets up its own: at most 20 connections unless the URL says
// otherwise, a 10 s connect timeout. The password in dbURL never appears in
// errors or String.
func Open(ctx context.Context, dbURL string) (*Store, error) {
	shown := store.Redact(dbURL)
	secrets := store.Secrets(dbURL)
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, fmt.Errorf("open postgres %s: %w", shown, redact.Error(err, store.Mark, secrets...))
	}
	if !hasParam(dbURL, "pool_max_conns") {
		// DBOS holds connections for its own listeners and queues when it
		// shares the pool; pgx's default (4 or the CPU count) is too few.
		cfg.MaxConns = 20
	}
	cfg.MaxConnLifetime = time.Hour
	cfg.MaxConnIdleTime = 5 * time.Minute
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 10 * time.Second
	}
	if cfg.ConnConfig.Password != "" {
		secrets = append(secrets, cfg.ConnConfig.Password)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres %s: %w", shown, redact.Error(err, store.Mark, secrets...))
	}
	if err := createMissing(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres %s: %w", shown, redact.Error(err, store.Mark, secrets...))
	}
	s := &Store{pool: pool, url: shown}
	if s.Tables, err = driver.NewTables(conn{s.pool}, sqlFS, dialect); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres %s: %w", shown, err)
	}
	if err := s.Migrate(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres %s: %w", shown, redact.Error(err, store.Mark, secrets...))
	}
	return s, nil
}

// createMissing creates pool's database if the server answers that it has
// none by that name (SQLSTATE 3D000), as createdb would: connected to the
// server's "postgres" database (or "template1", as createdb falls back to)
// with the same role, which needs CREATEDB. Nodes starting at once may
// race to create it: one that finds it created meanwhile goes on. Any other
// failure to connect is returned as it is.
func createMissing(ctx context.Context, pool *pgxpool.Pool) error {
	err := pool.Ping(ctx)
	var pe *pgconn.PgError
	if err == nil || !errors.As(err, &pe) || pe.Code != "3D000" {
		return err
	}
	cfg := pool.Config().ConnConfig
	name := cfg.Database
	var conn *pgx.Conn
	for _, maint := range []string{"postgres", "template1"} {
		c := cfg.Copy()
		c.Database = maint
		if conn, err = pgx.ConnectConfig(ctx, c); err == nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("database %q does not exist, and the server's postgres database to create it from cannot be reached: %w", name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	// Another node's CREATE DATABASE got there first: duplicate_database,
	// or unique_violation when both were under way at once.
	if errors.As(err, &pe) && (pe.Code == "42P04" || pe.Code == "23505") {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("database %q does not exist and could not be created (create it, or give the role CREATEDB): %w", name, err)
	}
	return pool.Ping(ctx)
}

// Pool returns the pool the store uses: the one Handle gives DBOS to share.
// DBOS closes the pool it is given when it shuts down: shut DBOS
// down after the last call on the Store, then Close the Store (a no-op by
// then). Close closes the pool too.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// String returns the database URL with its password replaced by "xxxxx".
func (s *Store) String() string { return s.url }

// Close closes the pool, waiting for connections in use to be released.
// Calls after the first return at once.
func (s *Store) Close() error {
	s.closeOnce.Do(s.pool.Close)
	return nil
}

// hasParam reports whether the query of a connection URL sets name.
func hasParam(connURL, name string) bool {
	u, err := url.Parse(connURL)
	return err == nil && u.Query().Has(name)
}
