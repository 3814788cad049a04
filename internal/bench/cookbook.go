package bench

import (
	"bytes"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/scenario"
	"github.com/sluice-dev/sluice/internal/sim"
)

// cookbookPolicy models the OpenAI cookbook's api_request_parallel_processor.py:
// one FIFO of requests over all flows; a request bucket and a token bucket
// sized to RPM and TPM that refill continuously; a request is sent when both
// hold its estimate (prompt tokens + max_tokens, or 15 when it sets none);
// any error whose message says "rate limit" pauses every request for 15 s;
// failed requests go to a retry queue served first, up to 5 attempts. It knows
// no other limit. Requests are built from eligible items oldest first, each
// carrying the largest batch, up to batch_max, that fits the two limits the
// script is told (RPM and TPM, its max_requests_per_minute and
// max_tokens_per_minute); a provider limit it is not told of, such as OTPM,
// is met only as errors — as DevPick met it (seed 000). Items of a request
// that failed 5 times go back to the end of the line, as a user re-running
// the failures would.
type cookbookPolicy struct {
	rpm, tpm       float64
	reqCap, tokCap float64
	last           time.Time
	lastRateLimit  time.Time
	retries        []*cookbookReq
	batch          map[*flowState]int
	turn           int  // where the search for the oldest item starts
	informed       bool // sizes batches to every limit, not only RPM and TPM
	wakeAt         time.Time
}

type cookbookReq struct {
	f        *flowState
	items    []item
	attempts int
}

const (
	cookbookPause       = 15 * time.Second
	cookbookMaxAttempts = 5
	cookbookDefaultMax  = 15 // the script's completion estimate when max_tokens is unset
)

func newCookbook(sc *scenario.Scenario, informed bool) *cookbookPolicy {
	p := &cookbookPolicy{rpm: 1e12, tpm: 1e12, batch: map[*flowState]int{}, informed: informed}
	if l := sc.Provider.Limits[governor.RPM]; l > 0 {
		p.rpm = float64(l)
	}
	if l := sc.Provider.Limits[governor.TPM]; l > 0 {
		p.tpm = float64(l)
	}
	p.reqCap, p.tokCap = p.rpm, p.tpm
	return p
}

func (p *cookbookPolicy) start(w *world) {
	p.last = w.now
	for _, f := range w.flows {
		known := w.sc.Provider.Limits
		if !p.informed {
			known = governor.Limits{}
			known[governor.RPM], known[governor.TPM] = w.sc.Provider.Limits[governor.RPM], w.sc.Provider.Limits[governor.TPM]
		}
		p.batch[f] = userBatch(w.sc, known, f)
	}
}

func (p *cookbookPolicy) wake(w *world) { p.pump(w) }

// next picks the next request: a retry first, else the oldest eligible item's flow.
func (p *cookbookPolicy) next(w *world) *cookbookReq {
	if len(p.retries) > 0 {
		return p.retries[0]
	}
	// Items that became eligible at the same moment (a backlog) are taken
	// from their flows in turn, as a request file listing them would.
	var oldest *flowState
	for i := range w.flows {
		f := w.flows[(p.turn+i)%len(w.flows)]
		if len(f.queue) > 0 && (oldest == nil || f.queue[0].eligible.Before(oldest.queue[0].eligible)) {
			oldest = f
		}
	}
	if oldest == nil {
		return nil
	}
	p.turn = (oldest.idx + 1) % len(w.flows)
	return &cookbookReq{f: oldest}
}

func (p *cookbookPolicy) estimate(w *world, r *cookbookReq, n int) float64 {
	f := r.f
	out := int64(n) * f.cfg.ItemMaxTokens
	if out == 0 {
		out = cookbookDefaultMax
	}
	return float64(f.cfg.PromptTokens + int64(n)*f.cfg.ItemInputTokens + out)
}

func (p *cookbookPolicy) pump(w *world) {
	for {
		elapsed := w.now.Sub(p.last).Minutes()
		p.reqCap = min(p.reqCap+p.rpm*elapsed, p.rpm)
		p.tokCap = min(p.tokCap+p.tpm*elapsed, p.tpm)
		p.last = w.now
		if pauseEnd := p.lastRateLimit.Add(cookbookPause); w.now.Before(pauseEnd) {
			p.wakeLater(w, pauseEnd)
			return
		}
		r := p.next(w)
		if r == nil {
			return
		}
		n := len(r.items)
		if r.items == nil {
			n = min(p.batch[r.f], len(r.f.queue))
			if n == 0 {
				n = min(max(r.f.cfg.BatchMax, 1), len(r.f.queue))
			}
		}
		tokens := p.estimate(w, r, n)
		if p.reqCap < 1 || p.tokCap < tokens {
			need := max((1-p.reqCap)/p.rpm, (tokens-p.tokCap)/p.tpm)
			p.wakeLater(w, w.now.Add(time.Duration(need*float64(time.Minute))+time.Millisecond))
			return
		}
		p.reqCap--
		p.tokCap -= tokens
		if r.items == nil {
			r.items = w.take(r.f, n)
		} else {
			p.retries = p.retries[1:]
		}
		r.attempts++
		maxTok := int64(len(r.items)) * r.f.cfg.ItemMaxTokens
		w.send(r.f, r.items, maxTok, func(o outcome) {
			if o.resp.Status == 200 && o.resp.Fault == sim.NoFault {
				return
			}
			if bytes.Contains(bytes.ToLower(o.resp.Body), []byte("rate limit")) || o.resp.Status == 429 && len(o.resp.Body) == 0 {
				p.lastRateLimit = w.now
			}
			if r.attempts < cookbookMaxAttempts {
				p.retries = append(p.retries, r)
			} else {
				// failed for good: the user re-runs these items later
				w.requeue(r.f, r.items)
			}
			if o.resp.Rejected {
				w.at(w.now, func() { p.pump(w) })
			}
		})
	}
}

func (p *cookbookPolicy) wakeLater(w *world, t time.Time) {
	if !p.wakeAt.After(w.now) || t.Before(p.wakeAt) {
		p.wakeAt = t
		w.at(t, func() { p.pump(w) })
	}
}

// userBatch is the batch a user would configure for a flow knowing the
// limits ls: the most items, up to batch_max, whose request fits each of
// them in one go (0 if not even one does).
func userBatch(sc *scenario.Scenario, ls governor.Limits, f *flowState) int {
	g, err := governor.New(governor.Config{Limits: ls, DayBurst: -1})
	if err != nil {
		return 1
	}
	base := governor.Cost{Requests: 1, Input: f.cfg.PromptTokens}
	if f.cfg.ItemMaxTokens == 0 {
		base.Output = sc.Provider.DefaultMaxTokens
	}
	return g.LargestBatch(base, governor.Cost{Input: f.cfg.ItemInputTokens, Output: f.cfg.ItemMaxTokens}, max(f.cfg.BatchMax, 1))
}
