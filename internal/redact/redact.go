// Package redact hides secrets in the text sluice writes — error messages,
// logs, answers — so that a provider key or a database password quoted by
// a library, a proxy or a provider goes no further. It is the low-level
// helper: what a provider sends is scrubbed by llm.Scrubber, which builds
// the forms a key takes in a body, a header or a URL and replaces them
// with KeyMark.
package redact

import "strings"

// KeyMark stands for a provider key wherever one would be written.
const KeyMark = "[redacted]"

// MinKeyLen is the shortest provider key hidden wherever it appears:
// replacing a shorter string everywhere would corrupt ordinary text, and no
// provider issues one (llm.Scrubber hides a shorter key after "Bearer ").
const MinKeyLen = 6

// String returns s with every secret replaced by mark. Empty secrets are
// skipped.
func String(s, mark string, secrets ...string) string {
	for _, secret := range secrets {
		if secret != "" {
			s = strings.ReplaceAll(s, secret, mark)
		}
	}
	return s
}

// Error returns err with every secret in its message replaced by mark, or
// err itself when none appears. errors.Is and errors.As still see err.
func Error(err error, mark string, secrets ...string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if hidden := String(msg, mark, secrets...); hidden != msg {
		return &redactedError{msg: hidden, err: err}
	}
	return err
}

// redactedError keeps an error's identity for errors.Is and errors.As while
// its text has the secrets hidden.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }
