package store

import (
	"context"
	"fmt"
	"strings"
	"sync"
)

// OpenFunc opens a Store on target: a file path (or ":memory:") for the
// sqlite driver, a postgres:// URL for the postgres driver.
type OpenFunc func(ctx context.Context, target string) (Store, error)

// The driver names Open dispatches to.
const (
	DriverSQLite   = "sqlite"
	DriverPostgres = "postgres"
)

var (
	driversMu sync.RWMutex
	drivers   = map[string]OpenFunc{}
)

// Register makes a driver available to Open under name (DriverSQLite or
// DriverPostgres). Drivers call it from init; registering a name twice panics,
// as it means two drivers claim the same databases.
func Register(name string, open OpenFunc) {
	driversMu.Lock()
	defer driversMu.Unlock()
	if open == nil {
		panic("store: Register of a nil OpenFunc for " + name)
	}
	if _, dup := drivers[name]; dup {
		panic("store: driver registered twice: " + name)
	}
	drivers[name] = open
}

// Open opens the store named by dbURL and applies its migrations:
//
//   - "sqlite:PATH", "sqlite:///ABSOLUTE/PATH", or a bare PATH ending in .db,
//     .sqlite or .sqlite3: SQLite, file created if missing, in WAL mode with a
//     busy timeout and foreign keys on;
//   - "sqlite::memory:": a private in-memory SQLite database, for tests;
//   - "postgres://…" or "postgresql://…": PostgreSQL via pgx.
//
// Errors and messages show the URL only through Redact.
func Open(ctx context.Context, dbURL string) (Store, error) {
	driver, target, err := parseURL(dbURL)
	if err != nil {
		return nil, fmt.Errorf("open store %q: %w", Redact(dbURL), err)
	}
	driversMu.RLock()
	open := drivers[driver]
	driversMu.RUnlock()
	if open == nil {
		return nil, fmt.Errorf("open store %q: the %s driver is not linked into this program (import github.com/sluice-dev/sluice/internal/store/%s)",
			Redact(dbURL), driver, driver)
	}
	return open(ctx, target)
}

// parseURL returns the driver named by dbURL and what that driver opens.
func parseURL(dbURL string) (driver, target string, err error) {
	if strings.TrimSpace(dbURL) == "" {
		return "", "", fmt.Errorf("no database URL given (want sqlite:PATH, PATH.db or postgres://…)")
	}
	scheme, rest, hasScheme := strings.Cut(dbURL, ":")
	switch lower := strings.ToLower(scheme); {
	case hasScheme && (lower == "sqlite" || lower == "sqlite3"):
		if strings.HasPrefix(rest, "//") {
			// sqlite:///abs/path.db: the authority must be empty, since
			// SQLite has no host.
			rest = rest[2:]
			if !strings.HasPrefix(rest, "/") {
				return "", "", fmt.Errorf("a sqlite URL names a file, not a host: write sqlite:PATH or sqlite:///ABSOLUTE/PATH")
			}
		}
		if rest == "" {
			return "", "", fmt.Errorf("sqlite URL has no path: write sqlite:PATH, or sqlite::memory: for a database in memory")
		}
		return DriverSQLite, rest, nil
	case hasScheme && (lower == "postgres" || lower == "postgresql"):
		if !strings.HasPrefix(rest, "//") {
			return "", "", fmt.Errorf("a %s URL must start with %s://", lower, lower)
		}
		return DriverPostgres, dbURL, nil
	}
	if hasSQLiteSuffix(dbURL) && !strings.Contains(dbURL, "://") {
		return DriverSQLite, dbURL, nil
	}
	if s, _, ok := strings.Cut(dbURL, "://"); ok {
		return "", "", fmt.Errorf("unsupported scheme %q (want sqlite:PATH, PATH.db or postgres://…)", s)
	}
	return "", "", fmt.Errorf("not a database URL: want sqlite:PATH, a path ending in .db, .sqlite or .sqlite3, or postgres://…")
}

func hasSQLiteSuffix(path string) bool {
	p := strings.ToLower(path)
	return strings.HasSuffix(p, ".db") || strings.HasSuffix(p, ".sqlite") || strings.HasSuffix(p, ".sqlite3")
}
