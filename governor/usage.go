package governor

import "time"

// Usage returns used, the usage a provider reported for the call admitted
// by r, bounded by what that call could have used, and logs each part it
// cut through Config.Logger, as the values a provider announces are logged
// (at most once per part every NoticeEvery). llm.Feedback passes every
// provider's usage through it before settling, so the engine, the gateway
// and the bench hold a provider to the same bounds:
//
//   - Output at most what was reserved for it, max_tokens times the
//     choices: the provider stops there.
//   - Input at most the larger of InputFactor times the admitted estimate
//     plus InputSlack, which covers what the request itself carries however
//     the provider's tokenizer and chat template count it, and the smallest
//     allowance in force of the minute limits that count input (TPM, ITPM),
//     which covers what a provider adds that the request does not carry
//     (the results of a tool it runs itself): a provider accepts no call
//     above those.
//
// Without it one answer reporting a billion prompt tokens for a 10-token
// prompt was charged whole: every window, pacer and budget of the key took
// it, and the key waited months for its day pacers (see pacer.bounded, which
// bounds those for any charge). A usage within the bounds is returned as
// given, and so is every usage of a reservation that is not admitted:
// settling it does nothing.
func (in inside) Usage(now time.Time, r *Reservation, used Cost) Cost {
	g := in.g
	g.mu.Lock()
	defer g.unlockAndLog()
	if r.state != admitted {
		return used
	}
	n := now.UnixNano()
	if most := g.inputBound(r.cost.Input); used.Input > most {
		g.notice(n, notice{Kind: "input", Source: "usage", Said: used.Input, Used: most, Reserved: r.cost.Input})
		used.Input = most
	}
	if most := max(r.cost.Output, 0); used.Output > most {
		g.notice(n, notice{Kind: "output", Source: "usage", Said: used.Output, Used: most, Reserved: r.cost.Output})
		used.Output = most
	}
	return used
}

// inputBound is the most input a call whose input was estimated at est can
// be settled with (see Usage). g.mu is held.
func (g *Governor) inputBound(est int64) int64 {
	most := addSat(mulSat(max(est, 0), InputFactor), InputSlack)
	minute := int64(0)
	for _, l := range [...]Limit{TPM, ITPM} {
		if a := g.limits[l]; a > 0 && (minute == 0 || a < minute) {
			minute = a
		}
	}
	return min(max(most, minute), MaxCost)
}
