package store_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/store/postgres"
	"github.com/sluice-dev/sluice/internal/store/sqlite"
	"github.com/sluice-dev/sluice/internal/testenv"
)

func TestOpenDispatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	sqliteCases := []struct {
		url, want string // want: the store's String()
	}{
		{"sqlite:" + filepath.Join(dir, "a.db"), "sqlite:" + filepath.Join(dir, "a.db")},
		{filepath.Join(dir, "b.db"), "sqlite:" + filepath.Join(dir, "b.db")},
		{filepath.Join(dir, "c.sqlite"), "sqlite:" + filepath.Join(dir, "c.sqlite")},
		{"sqlite://" + filepath.Join(dir, "d.db"), "sqlite:" + filepath.Join(dir, "d.db")},
		{"sqlite3:" + filepath.Join(dir, "e"), "sqlite:" + filepath.Join(dir, "e")},
		{"sqlite::memory:", "sqlite::memory:"},
	}
	for _, tc := range sqliteCases {
		t.Run(tc.url, func(t *testing.T) {
			t.Parallel()
			s, err := store.Open(ctx, tc.url)
			if err != nil {
				t.Fatalf("Open(%q): %v", tc.url, err)
			}
			defer s.Close()
			if _, ok := s.(*sqlite.Store); !ok {
				t.Fatalf("Open(%q) = %T, want *sqlite.Store", tc.url, s)
			}
			if got := s.(*sqlite.Store).String(); got != tc.want {
				t.Fatalf("String() = %q, want %q", got, tc.want)
			}
		})
	}
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		pgURL := testenv.Postgres(t)
		for _, u := range []string{pgURL, "postgresql" + strings.TrimPrefix(pgURL, "postgres")} {
			s, err := store.Open(ctx, u)
			if err != nil {
				t.Fatalf("Open(%q): %v", u, err)
			}
			if _, ok := s.(*postgres.Store); !ok {
				t.Fatalf("Open(%q) = %T, want *postgres.Store", u, s)
			}
			s.Close()
		}
	})
}

func TestOpenErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct{ url, want string }{
		{"mysql://root:hunter2@db/sluice", `open store "mysql://root:xxxxx@db/sluice": unsupported scheme "mysql"`},
		{"postgres:root:hunter2@db/sluice", `open store "postgres:root:xxxxx@db/sluice": a postgres URL must start with postgres://`},
		{"sluice.json", `open store "sluice.json": not a database URL`},
		// The driver's own errors name the store and hide the password too.
		{"postgres://root:hunter2@127.0.0.1:1/sluice?connect_timeout=5", `open postgres postgres://root:xxxxx@127.0.0.1:1/sluice?connect_timeout=5: `},
		{"sqlite:" + t.TempDir(), "open sqlite "},
	} {
		s, err := store.Open(ctx, tc.url)
		if err == nil {
			s.Close()
			t.Errorf("Open(%q): no error", store.Redact(tc.url))
			continue
		}
		if s != nil {
			t.Errorf("Open(%q) returned a store with its error", store.Redact(tc.url))
		}
		if !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("Open error = %q, want it to start %q", err, tc.want)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Open error shows the password: %v", err)
		}
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"postgres://sluice:secret@db:5432/sluice", "postgres://sluice:xxxxx@db:5432/sluice"},
		{"postgres://sluice@db/sluice?sslmode=disable", "postgres://sluice@db/sluice?sslmode=disable"},
		{"postgres://db/sluice?sslmode=disable&password=secret", "postgres://db/sluice?sslmode=disable&password=xxxxx"},
		{"postgres://u:secret@db/sluice?sslpassword=k3y", "postgres://u:xxxxx@db/sluice?sslpassword=xxxxx"},
		{"postgres://u:se%2Fcret@db/sluice", "postgres://u:xxxxx@db/sluice"},
		{"postgres://u:12/secret@db/sluice", "postgres://u:xxxxx@db/sluice"}, // parses, wrongly, as host u port 12
		{"postgres://u:p@ss:w0rd@db/sluice", "postgres://u:xxxxx@db/sluice"}, // does not parse
		{"postgres://u:secret@db:port/sluice", "postgres://u:xxxxx@db:port/sluice"},
		{"postgres:u:secret@db", "postgres:u:xxxxx@db"},
		{"mysql://root:hunter2@db/x", "mysql://root:xxxxx@db/x"},
		{"host=db user=u password=secret dbname=x", "host=db user=u password=xxxxx dbname=x"},
		{"sqlite:/var/lib/sluice.db", "sqlite:/var/lib/sluice.db"},
		{"sqlite::memory:", "sqlite::memory:"},
		{"sluice.db", "sluice.db"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := store.Redact(tt.in); got != tt.want {
			t.Errorf("Redact(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestSecrets(t *testing.T) {
	t.Parallel()
	got := store.Secrets("postgres://u:se%2Fcret@db/sluice?password=other&sslpassword=k3y")
	want := []string{"se%2Fcret", "se/cret", "other", "k3y"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("Secrets = %q, want %q", got, want)
	}
	if got := store.Secrets("postgres://u@db/sluice"); len(got) != 0 {
		t.Fatalf("Secrets of a URL without password = %q", got)
	}
}
