package redact_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/redact"
)

func TestError(t *testing.T) {
	t.Parallel()
	inner := fmt.Errorf("dial user=u password=hunter2: %w", context.DeadlineExceeded)
	err := redact.Error(inner, "xxxxx", "hunter2", "")
	if strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "password=xxxxx") {
		t.Fatalf("Error = %q, want the secret replaced", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal("the redacted error no longer wraps the cause")
	}
	plain := errors.New("connection refused")
	if got := redact.Error(plain, "xxxxx", "hunter2"); got != plain {
		t.Fatalf("Error of an error without secrets = %v, want it unchanged", got)
	}
	if redact.Error(nil, "xxxxx", "x") != nil {
		t.Fatal("Error(nil) != nil")
	}
}

func TestString(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		secrets  []string
		want     string
	}{
		{"every occurrence of every secret", "sk-a then sk-b then sk-a", []string{"sk-a", "sk-b"}, "[redacted] then [redacted] then [redacted]"},
		{"an empty secret hides nothing", "text", []string{""}, "text"},
		{"no secret", "text", nil, "text"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := redact.String(tc.in, redact.KeyMark, tc.secrets...); got != tc.want {
				t.Errorf("String(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}
