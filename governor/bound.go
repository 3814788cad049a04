package governor

import "time"

// The bounds on every number that comes from outside (see the package
// documentation, "Bounds" and "What a provider announces"): each part of a
// call's cost, a flow's priority and weight (New refuses a configuration
// beyond them), and what a provider announces about a key. A provider's
// headers and error bodies adjust the governor — another client may share
// the key, a tier may change — but they are input like a client's: no
// value a provider sends can lift a configured allowance, stop the key for
// longer than a limit's period, or stay in force after the provider stops
// saying it.
const (
	// MaxCost bounds each part of a Cost: 2^40, about 1.1 trillion. No real
	// call comes near it — the largest context windows hold a few million
	// tokens, and a batch of 128 choices of a million output tokens each is
	// 2^27 — while sums of millions of calls that large still fit in an
	// int64. A cost over it can only come from a client's absurd numbers
	// (max_tokens 2^62 times n), which would otherwise wrap the governor's
	// sums and switch a limit off.
	MaxCost = 1 << 40

	// MinPriority and MaxPriority are the range of FlowConfig.Priority. Six
	// steps apart, at the largest PriorityFactor (16), the most urgent
	// flow's share is 16^6 ≈ 1.7e7 times the least urgent one's: a finite
	// ratio, so the least urgent flow still gets its calls in. An unbounded
	// priority (1000 steps of 4 is +Inf) would stop every other flow, which
	// priority must never do.
	MinPriority = -3
	MaxPriority = 3

	// MinWeight and MaxWeight are the range of FlowConfig.Weight. A weight
	// expresses a relative share; a ratio beyond 10^12 between two flows
	// says nothing a smaller one does not, and a weight near 0 or +Inf makes
	// a flow's fair-queuing tags infinite, so that it is never admitted or
	// holds every other flow back.
	MinWeight = 1e-6
	MaxWeight = 1e6

	// LearnFor is how long an allowance a provider announced lowers a
	// configured one after the provider last said it; then the configured
	// allowance is back, until an answer says otherwise. An allowance
	// announced for a limit nobody configured stays in force until the
	// provider says another, or until, LearnFor after it last said it, a
	// call that can never fit it comes: then it is dropped and the call
	// goes, so the provider's answer to it says the allowance again.
	LearnFor = 10 * time.Minute
	// LearnFloor: an announced allowance lowers a configured one to no less
	// than 1/LearnFloor of it, nor, configured or not, below the largest
	// charge of one call the provider accepted on that limit in the last
	// LearnFor. A provider that just accepted a 500-token call cannot have
	// a TPM of 1.
	LearnFloor = 10
	// MaxLag bounds Config.Lag: transit takes seconds, and a lag of a
	// period or more would count every charge in two windows.
	MaxLag = time.Minute
	// MaxWait bounds a wait a provider asks for that names no limit: the
	// longest period, a day, plus MaxLag. Limit.MaxWait bounds one that
	// names a limit.
	MaxWait = 24*time.Hour + MaxLag
	// InputFactor and InputSlack bound the input a provider may report for
	// a call (llm.Feedback settles with at most that; see the package
	// documentation, "Bounds"): InputFactor times the input the call was
	// admitted with, its estimate, plus InputSlack, unless a minute limit
	// that counts input allows more. The estimate already carries the
	// estimator's margin and the correction it learned for the model.
	// Tokenizers other than the estimator's count a text within about 0.7
	// to 1.5 times its count, up to 3 times for digits and some scripts
	// (Llama 2 and Mistral take a digit a token where tiktoken groups
	// three), and the estimator learns no correction beyond 8 for the same
	// reason; images, audio and files are priced at the most a profile
	// charges. A provider's chat template and the system prompt it adds for
	// tools are a few hundred tokens (Anthropic's is at most 530, its
	// built-in tools about 1,200 more): InputSlack covers them with room
	// to spare, where 8 times a tiny prompt's estimate would not.
	InputFactor = 8
	InputSlack  = 4096
	// NoticeEvery is how often at most a value bounded on the same limit,
	// of the same kind, from the same source, is logged (see Config.Logger).
	NoticeEvery = 10 * time.Minute
)
