package governor

import "testing"

// TestHint checks each branch of the one wording of what would make a call
// that can never fit a limit fit.
func TestHint(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		limit     Limit
		maxOutput int64
		field     string
		n         int64
		want      string
	}{
		{RPM, 100, "", 1, "the key allows no request at all"},
		{RPD, 100, "", 1, "the key allows no request at all"},
		{ITPM, 100, "", 1, "shorten the prompt"},
		{OTPM, -1, "", 1, "lower max_tokens"},
		{TPM, -1, "max_completion_tokens", 1, "shorten the prompt or lower max_completion_tokens"},
		{TPD, 0, "", 1, "shorten the prompt: it alone does not fit"},
		{OTPM, 1000, "", 1, "lower max_tokens: max_tokens ≤ 1,000 fits"},
		{OTPM, 1000, "", 0, "lower max_tokens: max_tokens ≤ 1,000 fits"},
		{TPM, 1000, "max_completion_tokens", 3, "lower max_completion_tokens or n: with n = 3, max_completion_tokens ≤ 333 fits"},
		{TPD, 2, "", 3, "lower n: even max_tokens 1 does not fit 3 choices"},
	} {
		e := &TooLargeError{Limit: tc.limit, MaxOutput: tc.maxOutput}
		if got := e.Hint(tc.field, tc.n); got != tc.want {
			t.Errorf("%s, MaxOutput %d, %q, n %d: Hint = %q, want %q", tc.limit, tc.maxOutput, tc.field, tc.n, got, tc.want)
		}
	}
}
