package governor

import "time"

// Observed is what a provider said about one limit in one response.
// Fields the provider did not send are left zero, with Known false.
type Observed struct {
	Known     bool
	Limit     int64         // the allowance the provider enforces, 0 if not sent
	Remaining int64         // what is left in the current window
	Reset     time.Duration // until the window has fully (or, for buckets, enough) refilled; 0 if not sent
	// Source says where the provider said it, for the log line when a value
	// is not taken as said (see Config.Logger): the name of the limit's header
	// ("X-Ratelimit-Limit-Tokens"), "429 body". "" reads as "headers".
	Source string
}

// Snapshot is the provider's view of a key's limits, read from the headers of
// one response. Each provider reports only some limits (Groq: RPD and TPM;
// OpenAI: RPM and TPM; Anthropic: RPM, TPM, ITPM, OTPM).
type Snapshot [NumLimits]Observed

// Any reports whether the snapshot holds anything.
func (s Snapshot) Any() bool {
	for _, o := range s {
		if o.Known {
			return true
		}
	}
	return false
}
