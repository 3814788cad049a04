// Package forecast says what a configuration of flows on one provider key
// will do before it runs, by replaying it in virtual time: the quota
// scenario that describes the key and its flows, an exact model of the
// provider's limits, and sluice's governor sending the flows' calls against
// that model. The planner (internal/plan) plans over its scenarios and its
// replay; the quota bench replays the same scenarios, with the same model
// and the same policy of sluice's, beside models of other schedulers; the
// HTTP simulator serves the same model.
//
// # Scenarios
//
// [Scenario] is one provider key with its limits and the flows (jobs) that
// share it. [Parse] reads one, [Format] writes it back and [Edit] changes
// one as `sluice plan --set` does. The format is a contract with files
// written by others, so parsing is strict: an unknown key or a bad value is
// an error that names the key, its place ("flows[2].batchmax: unknown key
// (line 31)") and, for values, the value.
//
// Every size a scenario states is bounded (see the Max constants), so that
// the largest scenario that loads runs within a few GB: a scenario is input
// from others, and a replay must not grow without end on a typo.
//
// # The provider model
//
// [Model] implements the provider section of a scenario: the limits (rpm
// rpd tpm tpd itpm otpm), rolling or fixed windows, reserve or settle
// accounting, latency and faults. Every method takes the current time, so
// the same model runs on a virtual clock in a replay (a week in seconds)
// and, behind an HTTP server, on the wall clock or on a faster one.
//
// A request is charged {1 request, input tokens, n × max_tokens} — the
// provider's default max when it sets none — on every limit at once, all or
// nothing. A charge larger than a limit's whole allowance can never fit and
// is refused as too large; a charge that does not fit now is refused with the
// time until the limit it names has room for it. An admitted request may
// still fail (5xx, timeout, reset, truncated JSON) with the configured
// probabilities; it was charged all the same, as real providers count such
// requests.
//
// Each profile (groq, openai, anthropic) has its own status codes, rate-limit
// headers and error bodies, as llm defines them. The model builds them when
// ModelConfig.Wire is set, as a replay and an HTTP server need; without it
// Submit decides only, free of allocations.
//
// # Replay
//
// [Replay] plays a scenario to its end under a [Policy], which decides when
// each flow's requests are sent through the [World] it is handed, and
// returns a [Result]: each limit's use, the work done, each flow's stalls
// and waits, and hourly series for a chart ([WriteSVG]). [NewSluice] is the
// policy of sluice's governor: the production governor, fed by the
// provider's answers through llm.Feedback exactly as the engine and the
// gateway feed it.
//
// Items and arrivals are drawn from the scenario's seed by each item's
// identity, not by the order in which a policy asks, and the model's faults
// by the order of the requests, so a replay is deterministic and every
// policy replayed on a scenario sees the same items. A policy is configured
// with the limits the scenario announces ([Scenario.Announced]); the model
// enforces all of them.
//
// docs/simulator.md describes the model's every choice and where it differs
// from the real providers; docs/bench.md the replay and its report.
package forecast
