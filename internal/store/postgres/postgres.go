// Package postgres is the store driver for PostgreSQL, for running sluice on
// several nodes: every node's governor records its charges in one database,
// so each sees what the others spent. The pool it opens is shared with DBOS
// (dbos.Config.SystemDBPool) through Handle.
//
// Tables live in the connection's default schema (search_path), next to
// DBOS's own "dbos" schema. Times are stored as timestamptz, truncated to the
// millisecond so that both drivers return the same values.
package postgres

import (
	"context"
	"embed"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
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

var (
	//go:embed migrations/*.sql
	migrationFS embed.FS

	//go:embed sql/lock_migrations.sql
	lockMigrationsSQL string
	//go:embed sql/create_migrations.sql
	createMigrationsSQL string
	//go:embed sql/migrations.sql
	migrationsSQL string
	//go:embed sql/record_migration.sql
	recordMigrationSQL string
	//go:embed sql/upsert_charges.sql
	upsertChargesSQL string
	//go:embed sql/charges.sql
	chargesSQL string
	//go:embed sql/prune_charges.sql
	pruneChargesSQL string
)

// Store is a store.Store on one PostgreSQL database. It is safe for
// simultaneous use by multiple goroutines and by many processes.
type Store struct {
	// EngineTables gives CountStart, RecordDroppedEvent, DroppedEvents,
	// RecordCancel, RecordRunEnd and RunEnds.
	driver.EngineTables
	// Backfills gives the methods on backfills' items, jobs and runs.
	driver.Backfills
	// History gives the methods on config versions and flows' samples.
	driver.History
	// Leases gives the methods on leases of a provider key's capacity.
	driver.Leases

	pool *pgxpool.Pool
	url  string // redacted

	closeOnce sync.Once
}

var _ store.Store = (*Store)(nil)

// Open connects to the database at dbURL ("postgres://…" or "postgresql://…",
// with any pgx pool parameter such as pool_max_conns) and applies the
// migrations it lacks. The pool is set up as DBOS sets up its own: at most
// 20 connections unless the URL says otherwise, a 10 s connect timeout.
// The password in dbURL never appears in errors or String.
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
	s := &Store{pool: pool, url: shown}
	if s.EngineTables, s.Backfills, s.History, err = tables(pool); err == nil {
		s.Leases, err = driver.NewLeases(conn{pool}, sqlFS)
	}
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres %s: %w", shown, err)
	}
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres %s: %w", shown, redact.Error(err, store.Mark, secrets...))
	}
	return s, nil
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

// migrate applies the migrations the database lacks in one transaction that
// first takes a transaction-level advisory lock: concurrent openers queue on
// the lock (CREATE TABLE IF NOT EXISTS alone races in PostgreSQL), and each
// finds what the one before it recorded.
func (s *Store) migrate(ctx context.Context) error {
	files, err := driver.Load(migrationFS, "migrations")
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, lockMigrationsSQL); err != nil {
			return fmt.Errorf("migrate: lock: %w", err)
		}
		if _, err := tx.Exec(ctx, createMigrationsSQL); err != nil {
			return fmt.Errorf("migrate: create sluice_migrations: %w", err)
		}
		applied, err := queryMigrations(ctx, tx)
		if err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		done := make(map[int]bool, len(applied))
		for _, m := range applied {
			done[m.Version] = true
		}
		if err := driver.CheckApplied(files, done); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		now := driver.Millis(time.Now())
		for _, f := range files {
			if done[f.Version] {
				continue
			}
			if _, err := tx.Exec(ctx, f.SQL); err != nil {
				return fmt.Errorf("migrate: apply %03d_%s: %w", f.Version, f.Name, err)
			}
			if _, err := tx.Exec(ctx, recordMigrationSQL, f.Version, f.Name, now); err != nil {
				return fmt.Errorf("migrate: record %03d_%s: %w", f.Version, f.Name, err)
			}
		}
		return nil
	})
}

// Migrations returns the schema migrations applied to the database, in order.
func (s *Store) Migrations(ctx context.Context) ([]store.Migration, error) {
	ms, err := queryMigrations(ctx, s.pool)
	if err != nil {
		return nil, fmt.Errorf("list migrations: %w", err)
	}
	return ms, nil
}

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func queryMigrations(ctx context.Context, q querier) ([]store.Migration, error) {
	rows, err := q.Query(ctx, migrationsSQL)
	if err != nil {
		return nil, err
	}
	ms, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Migration, error) {
		var m store.Migration
		err := row.Scan(&m.Version, &m.Name, &m.AppliedAt)
		m.AppliedAt = m.AppliedAt.UTC()
		return m, err
	})
	return ms, err
}

// UpsertCharges implements store.Store. The batch goes to the server as one
// statement over parallel arrays, whatever its size.
func (s *Store) UpsertCharges(ctx context.Context, key string, charges []store.Charge) error {
	if err := driver.CheckCharges(key, charges); err != nil {
		return fmt.Errorf("upsert charges: %w", err)
	}
	if len(charges) == 0 {
		return nil
	}
	charges = driver.LastByID(charges)
	n := len(charges)
	ids, flows := make([]string, n), make([]string, n)
	ats := make([]time.Time, n)
	requests, inputs, outputs := make([]int64, n), make([]int64, n), make([]int64, n)
	for i, c := range charges {
		ids[i], flows[i], ats[i] = c.ID, c.Flow, driver.Millis(c.At)
		requests[i], inputs[i], outputs[i] = c.Cost.Requests, c.Cost.Input, c.Cost.Output
	}
	if _, err := s.pool.Exec(ctx, upsertChargesSQL, key, ids, flows, ats, requests, inputs, outputs); err != nil {
		return fmt.Errorf("upsert charges: %w", err)
	}
	return nil
}

// Charges implements store.Store.
func (s *Store) Charges(ctx context.Context, key string, since time.Time) ([]store.Charge, error) {
	rows, err := s.pool.Query(ctx, chargesSQL, key, driver.Millis(since))
	if err != nil {
		return nil, fmt.Errorf("read charges: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Charge, error) {
		var c store.Charge
		err := row.Scan(&c.ID, &c.Flow, &c.At, &c.Cost.Requests, &c.Cost.Input, &c.Cost.Output)
		c.At = c.At.UTC()
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("read charges: %w", err)
	}
	return out, nil
}

// PruneCharges implements store.Store.
func (s *Store) PruneCharges(ctx context.Context, key string, before time.Time) (int64, error) {
	tag, err := s.pool.Exec(ctx, pruneChargesSQL, key, driver.Millis(before))
	if err != nil {
		return 0, fmt.Errorf("prune charges: %w", err)
	}
	return tag.RowsAffected(), nil
}

// hasParam reports whether the query of a connection URL sets name.
func hasParam(connURL, name string) bool {
	u, err := url.Parse(connURL)
	return err == nil && u.Query().Has(name)
}
