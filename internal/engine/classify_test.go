package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/llm"
	"github.com/sluice-dev/sluice/run"
)

// TestClassifyLLM checks each class an LLM error gets, and that errors the
// llm package does not know are left to the engine.
func TestClassifyLLM(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		err   error
		class run.Class
		after time.Duration
		ok    bool
	}{
		{"never fits the governor", &governor.TooLargeError{Limit: governor.TPM, Need: 10, Max: 5}, run.Fatal, 0, true},
		{"never fits the provider", &llm.TooLargeError{Status: 413}, run.Fatal, 0, true},
		{"quota exhausted", &llm.QuotaError{Status: 429}, run.Fatal, 0, true},
		{"no maximum", fmt.Errorf("apply: %w", llm.ErrNoMaxTokens), run.Fatal, 0, true},
		{"rate limit with a wait", &llm.RateLimitError{Status: 429, RetryAfter: 7 * time.Second}, run.RetryAfter, 7 * time.Second, true},
		{"rate limit without", &llm.RateLimitError{Status: 429}, run.Retry, 0, true},
		{"overloaded with a wait", &llm.OverloadedError{Status: 529, RetryAfter: time.Second}, run.RetryAfter, time.Second, true},
		{"5xx", &llm.StatusError{Status: 502}, run.Retry, 0, true},
		{"408", &llm.StatusError{Status: 408}, run.Retry, 0, true},
		{"other 4xx", &llm.StatusError{Status: 401}, run.Fatal, 0, true},
		{"a redirect, never followed", &llm.StatusError{Status: 307}, run.Fatal, 0, true},
		{"transport", &llm.TransportError{Kind: llm.Reset}, run.Retry, 0, true},
		{"cut by a cancelled context", &llm.TransportError{Kind: llm.Reset, Err: context.Canceled}, 0, 0, false},
		{"not an llm error", errors.New("disk full"), 0, 0, false},
	} {
		c, d, ok := ClassifyLLM(tc.err)
		if c != tc.class || d != tc.after || ok != tc.ok {
			t.Errorf("%s: ClassifyLLM = %v, %s, %t; want %v, %s, %t", tc.name, c, d, ok, tc.class, tc.after, tc.ok)
		}
	}
}
