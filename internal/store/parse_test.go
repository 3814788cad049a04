package store

import (
	"context"
	"strings"
	"testing"
)

func TestParseURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		url, driver, target string
		wantErr             string
	}{
		{url: "sqlite:sluice.db", driver: DriverSQLite, target: "sluice.db"},
		{url: "sqlite:/var/lib/sluice/sluice.db", driver: DriverSQLite, target: "/var/lib/sluice/sluice.db"},
		{url: "sqlite:///var/lib/sluice.db", driver: DriverSQLite, target: "/var/lib/sluice.db"},
		{url: "SQLite3:data/sluice", driver: DriverSQLite, target: "data/sluice"},
		{url: "sqlite::memory:", driver: DriverSQLite, target: ":memory:"},
		{url: "sqlite:sluice.db?_pragma=busy_timeout(100)", driver: DriverSQLite, target: "sluice.db?_pragma=busy_timeout(100)"},
		{url: "sluice.db", driver: DriverSQLite, target: "sluice.db"},
		{url: "./data/Sluice.SQLITE", driver: DriverSQLite, target: "./data/Sluice.SQLITE"},
		{url: "/tmp/x.sqlite3", driver: DriverSQLite, target: "/tmp/x.sqlite3"},
		{url: "postgres://u:p@db:5432/sluice", driver: DriverPostgres, target: "postgres://u:p@db:5432/sluice"},
		{url: "postgresql://db/sluice?sslmode=disable", driver: DriverPostgres, target: "postgresql://db/sluice?sslmode=disable"},

		{url: "", wantErr: "no database URL"},
		{url: "  ", wantErr: "no database URL"},
		{url: "sqlite:", wantErr: "sqlite URL has no path"},
		{url: "sqlite://dbhost/sluice.db", wantErr: "names a file, not a host"},
		{url: "postgres:db/sluice", wantErr: "must start with postgres://"},
		{url: "mysql://root@db/sluice", wantErr: `unsupported scheme "mysql"`},
		{url: "https://example.com/sluice.db", wantErr: `unsupported scheme "https"`},
		{url: "sluice.txt", wantErr: "not a database URL"},
		{url: "data/sluice", wantErr: "not a database URL"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			t.Parallel()
			driver, target, err := parseURL(tt.url)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseURL(%q) error = %v, want one containing %q", tt.url, err, tt.wantErr)
				}
				return
			}
			if err != nil || driver != tt.driver || target != tt.target {
				t.Fatalf("parseURL(%q) = %q, %q, %v; want %q, %q", tt.url, driver, target, err, tt.driver, tt.target)
			}
		})
	}
}

// TestOpenWithoutDriver runs alone (not parallel): it empties the driver
// registry that the drivers' packages, linked into this test, filled.
func TestOpenWithoutDriver(t *testing.T) {
	driversMu.Lock()
	saved := drivers
	drivers = map[string]OpenFunc{}
	driversMu.Unlock()
	defer func() {
		driversMu.Lock()
		drivers = saved
		driversMu.Unlock()
	}()
	_, err := Open(context.Background(), "postgres://u:hunter2@db/sluice")
	if err == nil || !strings.Contains(err.Error(), "import github.com/sluice-dev/sluice/internal/store/postgres") {
		t.Fatalf("Open with no driver linked: error = %v, want one saying which package to import", err)
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("error shows the password: %v", err)
	}
}

func TestRegisterTwicePanics(t *testing.T) {
	t.Parallel()
	defer func() {
		if recover() == nil {
			t.Fatal("registering a second driver under one name did not panic")
		}
	}()
	Register("test-twice", func(context.Context, string) (Store, error) { return nil, nil })
	Register("test-twice", func(context.Context, string) (Store, error) { return nil, nil })
}
