package store

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"time"
)

// MaxConfigBytes bounds a ConfigVersion's Config: a larger one is an
// error, never cut, since a cut configuration is no longer JSON.
const MaxConfigBytes = 1 << 20 // 1 MiB

// ConfigVersion is the effective configuration a process of sluice ran
// with from At: what `sluice report` attributes changes in the rates to.
type ConfigVersion struct {
	// At is when the process started with it (or reloaded it): UTC at
	// millisecond precision, as every time of the store.
	At time.Time
	// Source is what recorded it: "app", "gateway". At most MaxKeyBytes
	// of UTF-8 without NUL.
	Source string
	// Hash is the hex digest of Config and Code, which identifies the
	// version: the store compares it and nothing else. At most
	// MaxKeyBytes of UTF-8 without NUL.
	Hash string
	// Code is the code version: a module version or VCS revision. Cut to
	// MaxReasonBytes like a reason; may be empty.
	Code string
	// Config is the configuration (limits, flows, weights, batch
	// sizes …) as JSON: valid JSON, which is UTF-8, of at most
	// MaxConfigBytes, or RecordConfig refuses it. It comes back byte for
	// byte as recorded.
	Config json.RawMessage
}

// Sample is what one flow (a backfill, a function's flow, a gateway
// flow) did in one interval, as the health monitor records it every
// minute. Names are at most MaxKeyBytes of UTF-8 without NUL. Each
// process of a source records its own; two that end an interval in the
// same millisecond make one sample of what both did (see RecordSamples).
type Sample struct {
	At     time.Time // end of the interval: UTC at millisecond precision
	Flow   string    // required
	Source string    // "app" or "gateway"; required
	// State is the flow's health state at At: progressing,
	// waiting-for-quota, failing, stalled, idle, done; empty when it was
	// not judged.
	State string
	// Reason says why, for waiting, failing and stalled: cut to
	// MaxReasonBytes like other reasons.
	Reason string
	Done   int64 // items processed in the interval
	// DoneFrom and DoneTo, when DoneTo is above 0, are the flow's job's
	// items done (saved and parked) at the start and at the end of the
	// interval Done counts, as one process read them. The store then
	// records as Done only what no sample of the job recorded before: the
	// part of DoneFrom to DoneTo above the most any earlier one reached
	// (the job's sampled mark, kept on its row; it never goes down, so
	// after items were removed the progress is counted again only above
	// it). So processes that share a job, each sampling its progress,
	// count it once between them. A flow that is no job keeps Done as
	// given.
	DoneFrom, DoneTo int64
	Remaining        int64 // items eligible and not done at At
	Admitted         int64 // calls the governor admitted in the interval
	Tokens           int64 // tokens charged in the interval
	// Rejections are the provider's rejections in the interval by the
	// limit they named ("tpm", "otpm", …), Refusals the governor's
	// up-front refusals (a request that can never fit) by limit. A limit's
	// name is non-empty. Nil and empty are the same: an empty map comes
	// back nil, a non-empty one as recorded, zero counts included.
	Rejections map[string]int64
	Refusals   map[string]int64
	// Money is what the flow's calls cost in the interval, in billionths
	// of the unit of its key's prices (governor.Nano); 0 on a key without
	// a price.
	Money int64
	// Priced says the flow's key had a price at At: Money is what its
	// calls cost, and budgets in money can apply.
	Priced bool
	// Budgets are the budgets in money that applied to the flow at At,
	// each with what it had counted then: the flow's own and its key's.
	// Nil and empty are the same: an empty list comes back nil.
	Budgets []SampleBudget
}

// SampleBudget is a budget in money that applied to a sample's flow at the
// sample's At, and what it had counted by then, in billionths of the unit
// of the key's prices (governor.Nano).
type SampleBudget struct {
	// Limit is the budget as the governor's limit: "mpd" (any 24 hours)
	// or "mpm" (any 30 days). A name, bounded as a limit's name is.
	Limit string `json:"limit"`
	// Key says it is the budget of the flow's provider key, which all the
	// key's flows share; false: the flow's own (governor.FlowConfig.Budget).
	Key bool `json:"key,omitempty"`
	// Max is the budget; Spent what it counted at At: the flow's calls in
	// the budget's period for the flow's own, all the key's flows' for the
	// key's. Neither is negative.
	Max   int64 `json:"max"`
	Spent int64 `json:"spent"`
}

// NewConfigVersion returns the version of config (JSON) and code recorded
// by source at at, its Hash the SHA-256 of both: the same configuration
// and code always make the same hash.
func NewConfigVersion(at time.Time, source, code string, config []byte) ConfigVersion {
	sum := sha256.Sum256(append(append(slices.Clip(config), 0), code...))
	return ConfigVersion{At: at, Source: source, Hash: hex.EncodeToString(sum[:]), Code: code, Config: config}
}
