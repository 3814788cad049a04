// Package governor admits calls to an LLM provider against every limit of one
// provider key at once — requests, tokens, input and output tokens, per minute
// and per day — and shares the key fairly, in tokens, across the flows (jobs,
// tenants) that draw on it.
//
// # Shape
//
// The package follows golang.org/x/time/rate: every decision takes the current
// time as an argument, so the same code runs on the wall clock in production
// and on a virtual clock in sluice's simulator and bench.
package governor
