package governor

import "time"

// A key told no limit at all is probed. Its governor knows nothing of what
// the provider allows until the provider says so — in a header, or in the
// body of a refusal — so a burst of calls at the start would all meet the
// same limit before the first answer taught it: on a DevPick key with
// every limit unannounced, 32 batches too large for TPM and 31 calls over
// OTPM were refused in the first second. So, as TCP's slow start does,
// its first call goes alone, and each call the provider accepts lets one
// more be in flight — twice as many with each round of answers — until
// probeCap may be, or for probeFor after the first call at most (a caller
// that never ends its calls is not held for longer). A governor told any
// limit does not probe: its day pacers start their credit the same way
// (see pacer).
const (
	probeFor = time.Minute
	probeCap = 64
)

// probing reports whether the probe holds a call back at now, and until when
// at most: a call that ends may let it go sooner.
func (g *Governor) probing(now int64) (bool, int64) {
	if g.probe == 0 || now >= g.probeEnd || g.inflight < g.probe {
		return false, 0
	}
	return true, g.probeEnd
}

// ended records that an admitted call ended; accepted says the provider
// answered it with a success, which widens the probe.
func (g *Governor) ended(accepted bool) {
	g.inflight--
	if accepted && g.probe > 0 {
		if g.probe++; g.probe >= probeCap {
			g.probe = 0
		}
	}
}
