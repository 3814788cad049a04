// Package governor admits calls to an LLM provider against every limit of one
// provider key at once — requests, tokens, input and output tokens, per minute
// and per day — and shares the key fairly, in tokens, across the flows (jobs,
// tenants) that draw on it.
//
// # Shape
//
// The package follows golang.org/x/time/rate: every decision takes the current
// time as an argument, so the same code runs on the wall clock in production
// and on a virtual clock in sluice's simulator and bench. Wait and Await,
// which block, read Config.Now and sleep on Config.After, its timer: a test
// can give them a clock it moves by hand.
//
// # Bounds
//
// Every number that comes from outside is bounded where it enters: each part
// of a Cost lies in [0, MaxCost] (Check, Reserve and Wait refuse others with
// errInvalidCost), a flow's priority in [MinPriority, MaxPriority] and its
// weight in [MinWeight, MaxWeight] (New refuses others), and the usage and
// headers a provider reports are held to what a call can use: llm.Feedback
// settles a call with at most its reserved output and, as input, at most
// InputFactor times its estimate plus InputSlack, or the key's smallest
// minute allowance of input when that is more. Sums of these
// numbers saturate instead of wrapping, so no cost, however large, can turn
// a full limit into an empty one.
//
// # What a provider announces
//
// The provider is the source of truth about a key, within bounds: its
// headers and error bodies (Observe, Reservation.Observe, and llm.Feedback,
// which turns a call's outcome into feedback) adjust the governor, but no
// value it sends can lift a configured allowance, stop the key for longer
// than a limit's period, or stay in force once it stops saying it.
//
//   - A configured allowance is a ceiling: an announced one above it is
//     ignored. One below it is taken down to a floor — 1/LearnFloor (a
//     tenth) of the configured allowance, or the largest charge on the limit
//     of one call the provider accepted (settled as a success) in the last
//     LearnFor, whichever is more — and for LearnFor (10 minutes) after the
//     provider last said it; then the configured allowance is back.
//   - An allowance for a limit none configures is taken at most MaxCost,
//     floored by the largest call the provider accepted on it. It stays
//     until the provider says another, or until a call that can never fit
//     it comes LearnFor or more after the provider last said it: then it is
//     dropped and that call goes, and the provider's answer is the check.
//   - A reset, and a rejection's retry-after, hold a limit for at most its
//     period plus Config.Lag (a minute limit a minute plus lag, a day limit
//     a day plus lag); package llm bounds the waits it reads to the period
//     plus MaxLag, or MaxWait (a day plus MaxLag) for a wait that names no
//     limit. No charge, however large, moves a day pacer (or a budget's)
//     more than its period plus Config.Lag past now.
//
// Every value not taken as said is logged through Config.Logger with the
// number and where the provider said it (a header's name, "429 body"), at
// most once per limit, kind and source every NoticeEvery; Stats shows each
// limit's configured allowance beside the one in force and until when.
//
// # What is sluice's own
//
// A few parts serve only sluice's own packages and are no part of this
// package's API: the leases of a key several processes share (sluice's
// cluster grants them from its store), what a provider's refusal means for
// the key (a limit held, a pause of the key: llm.Feedback decides it, so
// every caller that ends its calls with Feedback gets the same answer), and
// the outlook sluice's gateway gives on every answer. Governor.Inside
// reaches them, with an argument only code inside sluice's module can make.
package governor
