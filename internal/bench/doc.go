// Package bench replays a quota scenario in virtual time under several
// scheduling policies — sluice's production governor, faithful models of the
// alternatives and a greedy reference that sends whatever fits — against one
// provider model (internal/sim), and reports side by side how much of the
// provider's capacity became the items' work.
//
// Every policy sees the same provider model, the same items (real output per
// item and arrival times are drawn from the scenario's seed by the item's
// identity, not by the order in which a policy asks) and the same faults,
// and is configured with the same limits: those the scenario announces.
// docs/bench.md says what each anchor policy models and from which source.
package bench
