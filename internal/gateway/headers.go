package gateway

import (
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/govkey"
)

// The gateway's own view of the key and of the request's flow, on every
// answer to a chat request — 200s, streams and refusals alike — beside the
// provider's x-ratelimit-* headers, which are passed on as the provider
// sent them. Every value is an ASCII number; times are milliseconds.
const (
	// WaitHeader says how long the request waited for admission, in
	// milliseconds.
	WaitHeader = "X-Sluice-Wait-Ms" // canonical, as are the others: set directly in the header map
	// LimitHeaderPrefix, followed by Limit-, Remaining- or Reset- and the
	// limit's name (Tpm, Otpm, …), gives each configured limit's allowance,
	// what is left of it now, and in how many milliseconds everything its
	// window counts now will have aged out, as the governor counts them:
	// X-Sluice-Ratelimit-Remaining-Tpm: 1200, X-Sluice-Ratelimit-Reset-Tpm: 42000.
	LimitHeaderPrefix = "X-Sluice-Ratelimit-"
	// FlowShareHeader is the flow's part of the key while the flows with
	// requests waiting share it (its weight × 4^priority over theirs), 0 to 1.
	FlowShareHeader = "X-Sluice-Flow-Share"
	// FlowWaitingHeader counts the flow's requests waiting for admission.
	FlowWaitingHeader = "X-Sluice-Flow-Waiting"
	// FlowEstimateHeader estimates, in milliseconds, how long a request like
	// this one, sent now, would wait for admission: the same estimate as a
	// 429's retry-after, from the calls ahead of it and the limits' rates.
	FlowEstimateHeader = "X-Sluice-Flow-Estimate-Ms"
)

// limitHeaders sets the gateway's headers on the answer.
func (c *chatCall) limitHeaders() {
	g := c.g
	h := c.w.Header()
	now := g.cfg.Now()
	h[WaitHeader] = []string{millis(c.waited)}
	o := g.gov.Inside(govkey.Key{}).Outlook(now, c.who.flow, c.cost)
	for _, ls := range o.Limits {
		if ls.Max <= 0 {
			continue
		}
		name := limitNames[ls.Limit]
		h[name.limit] = []string{strconv.FormatInt(ls.Max, 10)}
		h[name.remaining] = []string{strconv.FormatInt(ls.Capacity, 10)}
		h[name.reset] = []string{millis(ls.ResetAt.Sub(now))}
	}
	h[FlowShareHeader] = []string{strconv.FormatFloat(o.Share, 'f', 3, 64)}
	h[FlowWaitingHeader] = []string{strconv.Itoa(o.Waiting)}
	if c.cost != (governor.Cost{}) {
		h[FlowEstimateHeader] = []string{millis(o.Estimate)}
	}
}

// millis formats d as whole milliseconds, rounded up: a wait of 8µs is 1.
func millis(d time.Duration) string {
	if d <= 0 {
		return "0"
	}
	return strconv.FormatInt(int64((d+time.Millisecond-1)/time.Millisecond), 10)
}

type limitHeaderNames struct{ limit, remaining, reset string }

// limitNames are the canonical header names of each limit.
var limitNames = func() (n [governor.NumLimits]limitHeaderNames) {
	for l := range governor.NumLimits {
		s := l.String()
		n[l] = limitHeaderNames{http.CanonicalHeaderKey(LimitHeaderPrefix + "Limit-" + s),
			http.CanonicalHeaderKey(LimitHeaderPrefix + "Remaining-" + s), http.CanonicalHeaderKey(LimitHeaderPrefix + "Reset-" + s)}
	}
	return n
}()
