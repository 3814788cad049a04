// Package testenv gives tests the real services they need — a PostgreSQL
// database of their own, a store opened on it, the Node packages of the
// client tests — and makes a missing one fail the test under CI=true instead
// of skipping it.
package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-dev/sluice/internal/store"
	// The drivers OpenStore may pick.
	_ "github.com/sluice-dev/sluice/internal/store/postgres"
	_ "github.com/sluice-dev/sluice/internal/store/sqlite"
)

// InCI reports whether the tests run under CI (CI=true), where nothing a test
// needs may be missing.
func InCI() bool { return os.Getenv("CI") == "true" || os.Getenv("CI") == "1" }

// unavailable skips the test, or fails it under CI.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if InCI() {
		t.Fatalf("%s (CI=true: this test must run; scripts/test.sh sets it up)", msg)
	}
	t.Skip(msg + " (run scripts/test.sh to set it up)")
}

// Postgres creates a fresh database on the server named by
// SLUICE_TEST_POSTGRES, drops it when the test ends, and returns its URL.
func Postgres(t testing.TB) string {
	t.Helper()
	admin := os.Getenv("SLUICE_TEST_POSTGRES")
	if admin == "" {
		unavailable(t, "SLUICE_TEST_POSTGRES is not set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		unavailable(t, "PostgreSQL at SLUICE_TEST_POSTGRES: %v", err)
	}
	defer conn.Close(ctx)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "sluice_test_" + hex.EncodeToString(b[:])
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Logf("drop test database %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("drop test database %s: %v", name, err)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("SLUICE_TEST_POSTGRES is not a URL: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

// NodeModules returns the node_modules folder of clients/node, with the
// node binary on PATH, for tests that run real JavaScript clients.
func NodeModules(t testing.TB) (node, modules string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		unavailable(t, "node is not installed")
	}
	modules = os.Getenv("SLUICE_TEST_NODE_MODULES")
	if modules == "" {
		unavailable(t, "SLUICE_TEST_NODE_MODULES is not set")
	}
	if _, err := os.Stat(filepath.Join(modules, "openai")); err != nil {
		unavailable(t, "the openai npm package is not installed in %s", modules)
	}
	return node, modules
}

// Databases runs test on SQLite (a file in a temporary folder) and on
// PostgreSQL (a fresh database, see Postgres), as parallel subtests: every
// store behaviour must hold on both.
func Databases(t *testing.T, test func(t *testing.T, url string)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		test(t, filepath.Join(t.TempDir(), "sluice.db"))
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		test(t, Postgres(t))
	})
}

// OpenStore opens the store at url (see store.Open), closed when the test
// ends: after whatever the test shut down on it, as its cleanups run last
// registered first.
func OpenStore(t testing.TB, url string) store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// Buffer is an io.Writer safe for writers on several goroutines (a log
// sink, a command's stderr) whose text can be read at any time.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns what was written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Lines returns the lines written so far, each without its newline.
func (l *Buffer) Lines() []string {
	s := strings.TrimSuffix(l.String(), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}
