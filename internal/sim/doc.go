// Package sim simulates an LLM provider's rate limits exactly, so that
// sluice can be measured and tested against a provider whose every decision
// is known.
//
// # One model, two clocks
//
// [Model] implements the provider section of a quota scenario: the limits
// (rpm rpd tpm tpd itpm otpm), rolling or fixed windows, reserve or settle
// accounting, latency and faults. Every method takes the current time, so the
// same model runs on a virtual clock in the quota bench (a week in seconds)
// and behind [Server], the OpenAI-compatible HTTP simulator that `sluice
// sim-provider` serves, on the wall clock or on a faster one
// (ServerConfig.Now and ServerConfig.Speed).
//
// # Decisions
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
// # Wire formats
//
// Each profile (groq, openai, anthropic) has its own status codes, rate-limit
// headers and error bodies, as DESIGN.md "Provider facts" records them. The
// model builds them when Config.Wire is set; the bench leaves it off and
// reads only the decision, which keeps Submit free of allocations.
//
// docs/simulator.md describes every choice and where the simulation differs
// from the real providers.
package sim
