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

// limitHeaders sets the gateway's headers on the answer. Their values are
// written into one string and one array of strings, each header's value a
// slice of them: two allocations for every header instead of two each.
func (c *chatCall) limitHeaders() { c.ownHeaders("") }

// ownHeaders sets the gateway's headers (limitHeaders) and, unless it is
// empty, the answer's Content-Type with them.
func (c *chatCall) ownHeaders(contentType string) {
	g := c.g
	v := headerValues{buf: make([]byte, 0, 64)}
	v.buf = appendMillis(v.buf, c.waited)
	v.end(WaitHeader)
	if c.t == nil {
		// No target: a routed request none was picked for, or a model the
		// gateway does not serve.
		if contentType != "" {
			v.buf = append(v.buf, contentType...)
			v.end("Content-Type")
		}
		v.set(c.w.Header())
		return
	}
	if c.rt != nil {
		v.buf = append(v.buf, c.t.name...)
		v.end(TargetHeader)
	}
	now := g.cfg.Now()
	o := c.t.gov.Inside(govkey.Key{}).Outlook(now, c.who.flow, c.cost)
	for _, ls := range o.Limits {
		if ls.Max <= 0 {
			continue
		}
		name := limitNames[ls.Limit]
		v.buf = strconv.AppendInt(v.buf, ls.Max, 10)
		v.end(name.limit)
		v.buf = strconv.AppendInt(v.buf, ls.Capacity, 10)
		v.end(name.remaining)
		v.buf = appendMillis(v.buf, ls.ResetAt.Sub(now))
		v.end(name.reset)
	}
	v.buf = strconv.AppendFloat(v.buf, o.Share, 'f', 3, 64)
	v.end(FlowShareHeader)
	v.buf = strconv.AppendInt(v.buf, int64(o.Waiting), 10)
	v.end(FlowWaitingHeader)
	if c.cost != (governor.Cost{}) {
		v.buf = appendMillis(v.buf, o.Estimate)
		v.end(FlowEstimateHeader)
	}
	if contentType != "" {
		v.buf = append(v.buf, contentType...)
		v.end("Content-Type")
	}
	v.set(c.w.Header())
}

// headerValues collects header values written one after the other into
// buf, each ended by end with its header's name.
type headerValues struct {
	buf  []byte
	n    int
	keys [3*governor.NumLimits + 5]string
	ends [3*governor.NumLimits + 5]int
}

func (v *headerValues) end(key string) {
	v.keys[v.n], v.ends[v.n] = key, len(v.buf)
	v.n++
}

// set sets every header collected on h, each to one value; a slice of
// the shared array whose capacity ends with it, so that adding a value to
// one header never writes over the next.
func (v *headerValues) set(h http.Header) {
	s := string(v.buf)
	vals := make([]string, v.n)
	start := 0
	for i := range v.n {
		vals[i] = s[start:v.ends[i]]
		h[v.keys[i]] = vals[i : i+1 : i+1]
		start = v.ends[i]
	}
}

// appendMillis appends d as whole milliseconds, rounded up: a wait of 8µs
// is 1.
func appendMillis(b []byte, d time.Duration) []byte {
	if d <= 0 {
		return append(b, '0')
	}
	return strconv.AppendInt(b, int64((d+time.Millisecond-1)/time.Millisecond), 10)
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
