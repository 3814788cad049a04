// Package govkey holds the key to the parts of a governor.Governor that
// serve sluice's own packages and are no part of package governor's API:
// the leases of a key several processes share (internal/quota), what a
// provider's refusal means for the key (llm.Feedback), the outlook the
// gateway gives on every answer. Code outside sluice's module cannot import
// an internal package, so it cannot make a Key, and cannot call
// Governor.Inside.
package govkey

// Key is the argument of governor.Governor.Inside.
type Key struct{}
