// Package bench replays a quota scenario in virtual time under several
// scheduling policies — sluice's production governor, faithful models of the
// alternatives and a greedy reference that sends whatever fits — against one
// provider model, and reports side by side how much of the provider's
// capacity became the items' work.
//
// Each policy is replayed by internal/forecast (forecast.Replay), the replay
// the planner runs: the sluice policy is forecast.NewSluice, the one behind
// a plan's ETAs, and the anchors here are forecast.Policy values driven
// through the same forecast.World. So every policy sees the same provider
// model, the same items (real output per item and arrival times are drawn
// from the scenario's seed by the item's identity, not by the order in which
// a policy asks) and the same faults, and is configured with the same
// limits: those the scenario announces. docs/bench.md says what each anchor
// policy models and from which source.
package bench
