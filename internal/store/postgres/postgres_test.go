package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/store/postgres"
	"github.com/sluice-dev/sluice/internal/store/storetest"
	"github.com/sluice-dev/sluice/internal/testenv"
)

var _ store.Store = (*postgres.Store)(nil)

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Exercise(t, func(t *testing.T) storetest.OpenFunc {
		dbURL := testenv.Postgres(t)
		return func(ctx context.Context) (store.Store, error) {
			s, err := postgres.Open(ctx, dbURL)
			if err != nil {
				return nil, err
			}
			return s, nil
		}
	})
}

// withPassword returns dbURL with a password the server does not check
// (the test server trusts local connections), to see where it shows.
func withPassword(t *testing.T, dbURL, password string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), password)
	return u.String()
}

func TestPasswordNeverShows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const secret = "s3cr3t-Pw"
	dbURL := withPassword(t, testenv.Postgres(t), secret)
	s, err := postgres.Open(ctx, dbURL)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer s.Close()
	if got := s.String(); strings.Contains(got, secret) || !strings.Contains(got, ":xxxxx@") {
		t.Errorf("String() = %q, want the password shown as xxxxx", got)
	}

	for _, bad := range []string{
		// Nothing listens on port 1.
		"postgres://sluice:" + secret + "@127.0.0.1:1/sluice?sslmode=disable&connect_timeout=5",
		// Not a port.
		"postgres://sluice:" + secret + "@127.0.0.1:port/sluice",
		// An unescaped "/" in the password.
		"postgres://sluice:" + secret + "/x@127.0.0.1:1/sluice?connect_timeout=5",
		// Password as a parameter, and an option pgx does not know.
		"postgres://sluice@127.0.0.1:1/sluice?password=" + secret + "&pool_max_conns=many",
	} {
		_, err := postgres.Open(ctx, bad)
		if err == nil {
			t.Errorf("Open(%s): no error", store.Redact(bad))
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("Open error shows the password: %v", err)
		}
		if !strings.Contains(err.Error(), "open postgres") {
			t.Errorf("Open error = %v, want it to start with what failed", err)
		}
	}
}

// TestPoolIsUsable checks the pool handed to DBOS works and that the store
// owns it.
func TestPoolIsUsable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := postgres.Open(ctx, testenv.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := s.Pool().QueryRow(ctx, "SELECT count(*) FROM sluice_quota_charges").Scan(&n); err != nil {
		t.Fatalf("query through Pool: %v", err)
	}
	if max := s.Pool().Config().MaxConns; max != 20 {
		t.Errorf("pool MaxConns = %d, want 20 when the URL does not set pool_max_conns", max)
	}
	s.Close()
	if err := s.Pool().Ping(ctx); err == nil {
		t.Error("pool still usable after Close")
	}
}

func TestPoolSizeFromURL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := postgres.Open(ctx, testenv.Postgres(t)+"&pool_max_conns=3")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if max := s.Pool().Config().MaxConns; max != 3 {
		t.Errorf("pool MaxConns = %d, want the 3 the URL asks for", max)
	}
}

func BenchmarkUpsertCharges(b *testing.B) {
	s, err := postgres.Open(context.Background(), testenv.Postgres(b))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	storetest.Benchmark(b, s)
}

// BenchmarkBackfills measures a backfill of 1,000,000 items (see
// storetest.BenchmarkBackfills).
func BenchmarkBackfills(b *testing.B) {
	s, err := postgres.Open(context.Background(), testenv.Postgres(b))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	storetest.BenchmarkBackfills(b, s, 1_000_000)
}

// BenchmarkHistory measures Samples over 48 hours of 100 flows (see
// storetest.BenchmarkHistory).
func BenchmarkHistory(b *testing.B) {
	s, err := postgres.Open(context.Background(), testenv.Postgres(b))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	storetest.BenchmarkHistory(b, s)
}

// The statements that read or change a batch's items search the primary
// key with the batch's keys, whatever the planner estimates of the table:
// here a backfill of 10,000 items that was never analyzed (autovacuum off,
// or not yet come round), where a join read them all for each batch.
func TestBatchStatementsReadOnlyTheBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := postgres.Open(ctx, testenv.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for page := range 10 {
		keys := make([]string, 1000)
		for i := range keys {
			keys[i] = fmt.Sprintf("item-%06d", page*1000+i)
		}
		if _, err := s.AddItems(ctx, "bench", keys, at, ""); err != nil {
			t.Fatal(err)
		}
	}
	keys := `["item-000005", "item-000006"]`
	rows := `[{"key": "item-000005", "state": "saved", "processed_at": 1, "rejects": 0, "reason": "", "retry_at": null}]`
	for name, args := range map[string][]any{
		"lock_items":   {"bench", keys},
		"items":        {"bench", keys},
		"settle_items": {"bench", rows, int64(1)},
	} {
		var plan []struct{ Plan planNode }
		if err := s.Pool().QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+postgres.Statement(name), args...).Scan(&plan); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(plan) != 1 {
			t.Fatalf("%s: %d plans", name, len(plan))
		}
		reads := 0
		for n := range plan[0].Plan.all {
			if n.Relation != "sluice_backfill_items" || n.Type == "ModifyTable" {
				continue
			}
			reads++
			if n.Type != "Index Scan" || !strings.Contains(n.IndexCond, "item_key = ANY") {
				t.Errorf("%s reads sluice_backfill_items by %s (index condition %q): want an index scan on the batch's keys", name, n.Type, n.IndexCond)
			}
		}
		if reads == 0 {
			t.Errorf("%s: no read of sluice_backfill_items in its plan", name)
		}
	}
}

// planNode is a node of a plan EXPLAIN (FORMAT JSON) gives.
type planNode struct {
	Type      string     `json:"Node Type"`
	Relation  string     `json:"Relation Name"`
	IndexCond string     `json:"Index Cond"`
	Plans     []planNode `json:"Plans"`
}

// all yields n and every node below it.
func (n planNode) all(yield func(planNode) bool) {
	if !yield(n) {
		return
	}
	for _, c := range n.Plans {
		c.all(yield)
	}
}

// missingDatabase returns the URL and name of a database the test server
// does not have, connected as role ("" for the server's URL's), and a way
// to ask whether it exists now; the database is dropped when the test ends.
func missingDatabase(t *testing.T, role string) (dbURL, name string, exists func() bool) {
	t.Helper()
	u, err := url.Parse(testenv.Postgres(t)) // skips when there is no server
	if err != nil {
		t.Fatal(err)
	}
	name = strings.TrimPrefix(u.Path, "/") + "_new"
	u.Path = "/" + name
	if role != "" {
		u.User = url.User(role)
	}
	t.Cleanup(func() {
		if err := asAdmin(func(ctx context.Context, c *pgx.Conn) error {
			_, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			return err
		}); err != nil {
			t.Logf("drop %s: %v", name, err)
		}
	})
	return u.String(), name, func() bool {
		var ok bool
		if err := asAdmin(func(ctx context.Context, c *pgx.Conn) error {
			return c.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&ok)
		}); err != nil {
			t.Fatalf("is there a database %s: %v", name, err)
		}
		return ok
	}
}

// asAdmin runs f on a connection of its own to the server as
// SLUICE_TEST_POSTGRES names it, within 30 s.
func asAdmin(f func(ctx context.Context, c *pgx.Conn) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, os.Getenv("SLUICE_TEST_POSTGRES"))
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	return f(ctx, c)
}

// adminExec runs statement q as the server's admin.
func adminExec(q string) error {
	return asAdmin(func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, q)
		return err
	})
}

// TestOpenCreatesAMissingDatabase: a URL naming a database the server
// does not have opens, the database created, with its tables; nodes
// starting at once on it all open.
func TestOpenCreatesAMissingDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL, _, exists := missingDatabase(t, "")
	if exists() {
		t.Fatal("the database exists before Open")
	}
	const nodes = 4
	errs := make([]error, nodes)
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Go(func() {
			s, err := postgres.Open(ctx, dbURL)
			if err == nil {
				var n int
				err = s.Pool().QueryRow(ctx, "SELECT count(*) FROM sluice_backfill_items").Scan(&n)
				s.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("open a missing database from %d nodes at once: %v", nodes, err)
	}
	if !exists() {
		t.Fatal("Open succeeded, and the database does not exist")
	}
}

// TestOpenSaysWhyItCannotCreateTheDatabase: a role without CREATEDB gets
// an error naming the database and what to do, and nothing is created.
func TestOpenSaysWhyItCannotCreateTheDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	role := fmt.Sprintf("sluice_nocreate_%d", time.Now().UnixNano())
	dbURL, name, exists := missingDatabase(t, role) // skips when there is no server
	if err := adminExec("CREATE ROLE " + role + " LOGIN NOCREATEDB"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := adminExec("DROP ROLE IF EXISTS " + role); err != nil {
			t.Logf("drop role %s: %v", role, err)
		}
	})
	_, err := postgres.Open(ctx, dbURL)
	if err == nil {
		t.Fatal("Open succeeded for a role that cannot create the database")
	}
	t.Log(err)
	for _, want := range []string{"open postgres", name, "could not be created", "CREATEDB", "permission denied"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Open error %q: want it to say %q", err, want)
		}
	}
	if exists() {
		t.Error("the database exists after a failed Open")
	}
}
