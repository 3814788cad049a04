package postgres_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

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
