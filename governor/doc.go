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
// ErrInvalidCost), a flow's priority in [MinPriority, MaxPriority] and its
// weight in [MinWeight, MaxWeight] (New refuses others), and the usage and
// headers a provider reports are held to what a call can use. Sums of these
// numbers saturate instead of wrapping, so no cost, however large, can turn
// a full limit into an empty one.
package governor
