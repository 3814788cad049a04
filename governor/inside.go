package governor

import "github.com/sluice-dev/sluice/internal/govkey"

// Inside returns the parts of g that serve sluice's own packages and are no
// part of this package's API: leases, for a key several processes share
// (sluice's cluster grants them from its store); what a provider's refusal
// means for the key, which llm.Feedback decides; and the outlook sluice's
// gateway gives on every answer. Its argument comes from one of sluice's
// internal packages, so code outside sluice's module cannot call it: such
// code tells the governor how a call ended with llm.Feedback, and reads its
// state with Stats.
func (g *Governor) Inside(govkey.Key) inside {
	g.mustBeNew()
	return inside{g}
}

// inside is what Inside returns. Its methods are safe for simultaneous use,
// as the Governor's are.
type inside struct{ g *Governor }
