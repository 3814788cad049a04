package bench

import (
	"bytes"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/forecast"
)

// cookbookPolicy models the OpenAI cookbook's api_request_parallel_processor.py:
// one FIFO of requests over all flows; a bucket per limit the user told it of
// that refills continuously (the script has two, max_requests_per_minute and
// max_tokens_per_minute; the user who read the whole limits page adds one of
// the same kind for every other limit of the key); a request is sent when
// every bucket holds its estimate (the script's count: prompt tokens +
// max_tokens, or 15 when it sets none, split into input and output for the
// limits that count only one); any error whose message says "rate limit"
// pauses every request for 15 s; failed requests go to a retry queue served
// first, up to 5 attempts. Requests are built from eligible items oldest
// first, each carrying the largest batch, up to batch_max, that fits the
// limits it knows. Items of a request that failed 5 times go back to the end
// of the line, as a user re-running the failures would.
//
// Told every announced limit ("cookbook"), it leaves out of the file items
// that no request can carry within them (never_fit), as that user would; the
// script itself would wait for them forever. Told only RPM and TPM
// ("cookbook-rpm-tpm"), it meets every other limit only as errors — as
// DevPick met OTPM (seed 000) — and sends such items like any other. Told
// neither RPM nor TPM, it runs with the script's defaults for them (1,500 and
// 125,000).
type cookbookPolicy struct {
	known         governor.Limits             // the limits it was told of
	avail         [governor.NumLimits]float64 // what each bucket holds
	last          time.Time
	lastRateLimit time.Time
	retries       []*cookbookReq
	batch         map[*forecast.FlowState]int
	turn          int // where the search for the oldest item starts
	wakeAt        time.Time
}

type cookbookReq struct {
	f        *forecast.FlowState
	items    []forecast.Item
	attempts int
}

const (
	cookbookPause       = 15 * time.Second
	cookbookMaxAttempts = 5
	cookbookDefaultMax  = 15 // the script's completion estimate when max_tokens is unset
	// The defaults of the script's --max_requests_per_minute and
	// --max_tokens_per_minute: 3,000 × 0.5 and 250,000 × 0.5.
	cookbookDefaultRPM = 1500
	cookbookDefaultTPM = 125000
)

// newCookbook models the script told every limit sc announces, or with
// rpmTPMOnly only RPM and TPM, its two command-line limits.
func newCookbook(sc *forecast.Scenario, rpmTPMOnly bool) *cookbookPolicy {
	p := &cookbookPolicy{known: sc.Provider.Limits, batch: map[*forecast.FlowState]int{}}
	if rpmTPMOnly {
		p.known = governor.Limits{}
		p.known[governor.RPM], p.known[governor.TPM] = sc.Provider.Limits[governor.RPM], sc.Provider.Limits[governor.TPM]
	}
	// The script's two limits are command-line flags with defaults: a user
	// told neither runs it with those.
	if p.known[governor.RPM] == 0 {
		p.known[governor.RPM] = cookbookDefaultRPM
	}
	if p.known[governor.TPM] == 0 {
		p.known[governor.TPM] = cookbookDefaultTPM
	}
	for l := range governor.NumLimits {
		p.avail[l] = float64(p.known[l]) // the script's buckets start full
	}
	return p
}

// informed reports whether it knows more than RPM and TPM.
func (p *cookbookPolicy) informed() bool {
	for l := range governor.NumLimits {
		if p.known[l] > 0 && l != governor.RPM && l != governor.TPM {
			return true
		}
	}
	return false
}

func (p *cookbookPolicy) Start(w *forecast.World) {
	p.last = w.Now()
	for _, f := range w.Flows() {
		p.batch[f] = userBatch(w.Scenario(), p.known, f)
	}
}

func (p *cookbookPolicy) Wake(w *forecast.World) { p.pump(w) }

// next picks the next request: a retry first, else the oldest eligible item's flow.
func (p *cookbookPolicy) next(w *forecast.World) *cookbookReq {
	if len(p.retries) > 0 {
		return p.retries[0]
	}
	// Items that became eligible at the same moment (a backlog) are taken
	// from their flows in turn, as a request file listing them would.
	var oldest *forecast.FlowState
	flows := w.Flows()
	for i := range flows {
		f := flows[(p.turn+i)%len(flows)]
		if f.Queued() > 0 && (oldest == nil || f.Oldest().Before(oldest.Oldest())) {
			oldest = f
		}
	}
	if oldest == nil {
		return nil
	}
	p.turn = (oldest.Index() + 1) % len(flows)
	return &cookbookReq{f: oldest}
}

// estimate is the script's count of a request of n items of f.
func (p *cookbookPolicy) estimate(f *forecast.FlowState, n int) governor.Cost {
	out := int64(n) * f.Flow().ItemMaxTokens
	if out == 0 {
		out = cookbookDefaultMax
	}
	return governor.Cost{Requests: 1, Input: f.Flow().PromptTokens + int64(n)*f.Flow().ItemInputTokens, Output: out}
}

func (p *cookbookPolicy) pump(w *forecast.World) {
	for {
		elapsed := w.Now().Sub(p.last)
		for l := range governor.NumLimits {
			if lim := float64(p.known[l]); lim > 0 {
				p.avail[l] = min(p.avail[l]+lim*float64(elapsed)/float64(l.Period()), lim)
			}
		}
		p.last = w.Now()
		if pauseEnd := p.lastRateLimit.Add(cookbookPause); w.Now().Before(pauseEnd) {
			p.wakeLater(w, pauseEnd)
			return
		}
		r := p.next(w)
		if r == nil {
			return
		}
		n := len(r.items)
		if r.items == nil {
			n = min(p.batch[r.f], r.f.Queued())
			if n == 0 && p.informed() {
				// Not even one item fits a limit it knows: left out of the file.
				w.Refuse(r.f, w.Take(r.f, 1))
				continue
			}
			if n == 0 {
				n = min(max(r.f.Flow().BatchMax, 1), r.f.Queued())
			}
		}
		c := p.estimate(r.f, n)
		var need time.Duration // until every bucket holds the estimate
		for l := range governor.NumLimits {
			if lim := float64(p.known[l]); lim > 0 && p.avail[l] < float64(c.On(l)) {
				need = max(need, time.Duration((float64(c.On(l))-p.avail[l])/lim*float64(l.Period())))
			}
		}
		if need > 0 {
			p.wakeLater(w, w.Now().Add(need+time.Millisecond))
			return
		}
		for l := range governor.NumLimits {
			if p.known[l] > 0 {
				p.avail[l] -= float64(c.On(l))
			}
		}
		if r.items == nil {
			r.items = w.Take(r.f, n)
		} else {
			p.retries = p.retries[1:]
		}
		r.attempts++
		maxTok := int64(len(r.items)) * r.f.Flow().ItemMaxTokens
		w.Send(r.f, r.items, maxTok, func(o forecast.Outcome) {
			if o.Response.Status == 200 && o.Response.Fault == forecast.NoFault {
				return
			}
			if bytes.Contains(bytes.ToLower(o.Response.Body), []byte("rate limit")) || o.Response.Status == 429 && len(o.Response.Body) == 0 {
				p.lastRateLimit = w.Now()
			}
			if r.attempts < cookbookMaxAttempts {
				p.retries = append(p.retries, r)
			} else {
				// failed for good: the user re-runs these items later
				w.Requeue(r.f, r.items)
			}
			if o.Response.Rejected {
				w.At(w.Now(), func() { p.pump(w) })
			}
		})
	}
}

func (p *cookbookPolicy) wakeLater(w *forecast.World, t time.Time) {
	if !p.wakeAt.After(w.Now()) || t.Before(p.wakeAt) {
		p.wakeAt = t
		w.At(t, func() { p.pump(w) })
	}
}

// userBatch is the batch a user would configure for a flow knowing the
// limits ls: the most items, up to batch_max, whose request fits each of
// them in one go (0 if not even one does).
func userBatch(sc *forecast.Scenario, ls governor.Limits, f *forecast.FlowState) int {
	g, err := governor.New(governor.Config{Limits: ls, DayBurst: -1})
	if err != nil {
		return 1
	}
	base := governor.Cost{Requests: 1, Input: f.Flow().PromptTokens}
	if f.Flow().ItemMaxTokens == 0 {
		base.Output = sc.Provider.DefaultMaxTokens
	}
	return g.LargestBatch(base, governor.Cost{Input: f.Flow().ItemInputTokens, Output: f.Flow().ItemMaxTokens}, max(f.Flow().BatchMax, 1))
}
