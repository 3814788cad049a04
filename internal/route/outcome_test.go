package route

import (
	"errors"
	"fmt"
	"testing"

	"github.com/sluice-dev/sluice/llm"
)

func TestOutcomeOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want Outcome
	}{
		{nil, OK},
		{&llm.RateLimitError{}, Refused},
		{fmt.Errorf("call: %w", &llm.RateLimitError{}), Refused},
		{&llm.QuotaError{Status: 429, Code: "insufficient_quota"}, Exhausted},
		{&llm.TooLargeError{}, OK},
		{&llm.OverloadedError{Status: 529}, Failed},
		{&llm.TransportError{Err: errors.New("connection reset")}, Failed},
		{&llm.StatusError{Status: 500}, Failed},
		{&llm.StatusError{Status: 503}, Failed},
		{&llm.StatusError{Status: 401}, Failed},
		{&llm.StatusError{Status: 403}, Failed},
		{fmt.Errorf("call: %w", &llm.StatusError{Status: 404}), Failed},
		{&llm.StatusError{Status: 400}, OK},
		{&llm.StatusError{Status: 422}, OK},
	} {
		if got := OutcomeOf(tc.err); got != tc.want {
			t.Errorf("%#v: %d, want %d", tc.err, got, tc.want)
		}
	}
}
