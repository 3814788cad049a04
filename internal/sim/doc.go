// Package sim serves an LLM provider whose rate limits are simulated
// exactly, so that sluice can be measured and tested against a provider
// whose every decision is known.
//
// # One model, two clocks
//
// The provider is a forecast.Model: the provider section of a quota
// scenario (the limits rpm rpd tpm tpd itpm otpm, rolling or fixed windows,
// reserve or settle accounting, latency and faults, each profile's status
// codes, headers and error bodies). Every method of the model takes the
// current time, so the same model runs on a virtual clock in the planner's
// replay and the quota bench (a week in seconds) and behind [Server], the
// OpenAI-compatible HTTP simulator that `sluice sim-provider` serves, on the
// wall clock or on a faster one (ServerConfig.Now and ServerConfig.Speed).
//
// # What the server adds
//
// The server reads requests as the providers do (their 400s, in their
// words), counts their tokens (cl100k_base), charges them on the model,
// holds each answer for the model's latency and writes it, plain or
// streamed, or fails it as the model's fault says.
//
// # Several models, and outages
//
// NewServer serves one model under any name, its limits the key's.
// NewMultiServer serves several, each with its own limits, windows and stats,
// chosen by the request's model field, as providers that limit each model
// apart do. Any model served can be put in an outage for a while
// (Server.ScheduleOutages, Server.SetOutage, POST /sim/outage): it answers a
// 5xx, an overload, a 429 it cannot wait out, or no answer at all, and
// charges nothing.
//
// docs/simulator.md describes every choice and where the simulation differs
// from the real providers.
package sim
