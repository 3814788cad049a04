package bench

import (
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/forecast"
)

// The models of LiteLLM's router (docs/bench.md says what each models and
// from which source).
const (
	// FixedFallback is a fixed primary and its fallbacks on error: each
	// target a model group of its own, fallbacks in the flow's route order.
	FixedFallback = "fixed-fallback"
	// LiteLLMShuffle is LiteLLM's default routing, simple-shuffle: the
	// flow's targets are one model group, and each try picks a healthy
	// deployment at random, weighted by rpm (else tpm) when set.
	LiteLLMShuffle = "litellm-shuffle"
	// LiteLLMUsage is LiteLLM's usage-based-routing: the healthy deployment
	// with the lowest TPM used this minute among those whose tpm and rpm
	// still allow the call; none: a 429 to the client.
	LiteLLMUsage = "litellm-usage"
)

// LiteLLM's settings, as its documentation gives them.
const (
	// litellmNumRetries is num_retries: tries again in the same model
	// group after the first (the documented default, 2).
	litellmNumRetries = 2
	// litellmAllowedFails is allowed_fails: a deployment that fails more
	// often within a minute is cooled down (the documented example, 3).
	litellmAllowedFails = 3
	// litellmCooldown is cooldown_time (DEFAULT_COOLDOWN_TIME_SECONDS, 5).
	litellmCooldown = 5 * time.Second
	// A retry's sleep when the model group has one healthy deployment and
	// the answer set no usable Retry-After: 0.5 s doubling each retry, at
	// most 8 s, less up to a quarter of jitter (INITIAL_RETRY_DELAY,
	// MAX_RETRY_DELAY).
	litellmRetryDelay    = 500 * time.Millisecond
	litellmMaxRetryDelay = 8 * time.Second
	// litellmConcurrency is the client's requests in flight per flow: a
	// client that sends as fast as its items allow, at a fixed concurrency
	// (a semaphore around the router's acompletion).
	litellmConcurrency = 8
	// A request the router fails (every retry and fallback failed, or no
	// deployment was available) is sent again by the client after a
	// backoff of 1 s doubling to a minute, reset by a success.
	clientBackoffMin = time.Second
	clientBackoffMax = time.Minute
)

// llDeployment is one target as LiteLLM's router sees it: a deployment
// with its litellm_params rpm and tpm (the target's announced RPM and TPM;
// LiteLLM takes no other limit), its price, its budget (max_budget with
// budget_duration 1d, or 30d for a month's budget alone) and the router's
// state of it.
type llDeployment struct {
	t          int
	rpm, tpm   int64
	price      governor.Price
	budget     llBudget // max_budget and budget_duration; none: no budget
	defaultMax int64

	coolUntil   time.Time
	failMinute  int64 // the minute fails counts
	fails       int
	usageMinute int64 // the minute rpmUsed and tpmUsed count
	rpmUsed     int64
	tpmUsed     int64
}

// llBudget is a LiteLLM budget: max_budget over budget_duration, of a
// deployment, or of a virtual key (a flow's budget per day) and its team
// (the flow's budget per month).
type llBudget struct {
	budget float64       // money; 0: none
	period time.Duration // budget_duration
	// spend is what the calls that ended in the budget window cost, as
	// LiteLLM records it after a call ends; windowStart is the window's
	// start, at the first spend after the last window ended.
	spend       float64
	windowStart time.Time
}

// inBudget reports whether b lets a call through: no budget, or its
// window's spend below it.
func (b *llBudget) inBudget(now time.Time) bool {
	if b.budget <= 0 || b.windowStart.IsZero() || !now.Before(b.windowStart.Add(b.period)) {
		return true
	}
	return b.spend < b.budget
}

// record adds what a call that ended now cost.
func (b *llBudget) record(now time.Time, cost float64) {
	if b.windowStart.IsZero() || !now.Before(b.windowStart.Add(b.period)) {
		b.windowStart, b.spend = now, 0
	}
	b.spend += cost
}

type litellmPolicy struct {
	name  string
	sc    *forecast.Scenario
	deps  []*llDeployment
	flows []*llFlow
	rng   *rand.Rand
}

type llFlow struct {
	f        *forecast.FlowState
	groups   [][]int // model groups (deployment indexes), the first the flow's, then its fallbacks
	requests int     // the client's requests under way
	taken    int     // items in them
	inflight int     // of those, items in calls sent and not answered
	backoff  time.Duration
	// budgets are the flow's own, as a virtual key's max_budget per day
	// and its team's per month, spent at price (its model's).
	budgets []llBudget
	price   governor.Price
}

// llRequest is one of a client's requests, through the router's retries
// and fallbacks and the client's own tries.
type llRequest struct {
	fl      *llFlow
	items   []forecast.Item
	group   int
	attempt int
	failed  map[int]bool // deployments that failed it in this group
}

func newLiteLLM(name string, sc *forecast.Scenario) (*litellmPolicy, error) {
	p := &litellmPolicy{name: name, sc: sc, rng: rand.New(rand.NewPCG(uint64(sc.Seed), 0x11e1_1a00))}
	if !sc.Routed() {
		p.deps = append(p.deps, &llDeployment{rpm: sc.Provider.Limits[governor.RPM], tpm: sc.Provider.Limits[governor.TPM], defaultMax: sc.Provider.DefaultMaxTokens})
		return p, nil
	}
	for i := range sc.Targets {
		t := &sc.Targets[i]
		d := &llDeployment{t: i, rpm: t.Provider.Limits[governor.RPM], tpm: t.Provider.Limits[governor.TPM],
			price: t.Price, defaultMax: t.Provider.DefaultMaxTokens}
		switch {
		case t.Budget.Day > 0:
			d.budget = llBudget{budget: t.Budget.Day, period: 24 * time.Hour}
		case t.Budget.Month > 0:
			d.budget = llBudget{budget: t.Budget.Month, period: governor.Month}
		}
		p.deps = append(p.deps, d)
	}
	return p, nil
}

func (p *litellmPolicy) Start(w *forecast.World) {
	for _, f := range w.Flows() {
		rt := []int{0}
		if p.sc.Routed() {
			rt = p.sc.RouteOf(f.Flow())
		}
		fl := &llFlow{f: f}
		if b := f.Flow().Budget; !b.IsZero() {
			fl.price = p.sc.KeyPrice()
			if b.Day > 0 {
				fl.budgets = append(fl.budgets, llBudget{budget: b.Day, period: 24 * time.Hour})
			}
			if b.Month > 0 {
				fl.budgets = append(fl.budgets, llBudget{budget: b.Month, period: governor.Month})
			}
		}
		if p.name == FixedFallback {
			for _, t := range rt {
				fl.groups = append(fl.groups, []int{t})
			}
		} else {
			fl.groups = [][]int{rt}
		}
		p.flows = append(p.flows, fl)
	}
}

func (p *litellmPolicy) Wake(w *forecast.World) {
	for _, fl := range p.flows {
		p.fill(w, fl)
	}
}

// Holding is how many of f's items the client holds in requests that are
// not in flight: sleeping before a retry or a try of its own.
func (p *litellmPolicy) Holding(f *forecast.FlowState) int {
	for _, fl := range p.flows {
		if fl.f == f {
			return fl.taken - fl.inflight
		}
	}
	return 0
}

// fill starts requests while the client has room and items.
func (p *litellmPolicy) fill(w *forecast.World, fl *llFlow) {
	for fl.requests < litellmConcurrency && fl.f.Queued() > 0 {
		items := w.Take(fl.f, max(fl.f.Flow().BatchMax, 1))
		fl.requests++
		fl.taken += len(items)
		p.try(w, &llRequest{fl: fl, items: items, failed: map[int]bool{}})
	}
}

func minuteOf(t time.Time) int64 { return t.Unix() / 60 }

// healthy returns the deployments of group not cooling down and within
// their budgets.
func (p *litellmPolicy) healthy(now time.Time, group []int) []int {
	var out []int
	for _, i := range group {
		d := p.deps[i]
		if now.Before(d.coolUntil) || !d.budget.inBudget(now) {
			continue
		}
		out = append(out, i)
	}
	return out
}

// pick chooses a deployment of the request's group for its next try, or
// -1 when none may serve it.
func (p *litellmPolicy) pick(w *forecast.World, q *llRequest, input int64) int {
	now := w.Now()
	cands := p.healthy(now, q.fl.groups[q.group])
	// A retry goes to a deployment that has not failed this request, when
	// one is left.
	var fresh []int
	for _, i := range cands {
		if !q.failed[i] {
			fresh = append(fresh, i)
		}
	}
	if len(fresh) > 0 {
		cands = fresh
	}
	if len(cands) == 0 {
		return -1
	}
	switch p.name {
	case LiteLLMUsage:
		best := -1
		for _, i := range cands {
			d := p.deps[i]
			if m := minuteOf(now); d.usageMinute != m {
				d.usageMinute, d.rpmUsed, d.tpmUsed = m, 0, 0
			}
			if (d.tpm > 0 && d.tpmUsed+input > d.tpm) || (d.rpm > 0 && d.rpmUsed+1 > d.rpm) {
				continue
			}
			if best < 0 || d.tpmUsed < p.deps[best].tpmUsed {
				best = i
			}
		}
		return best
	case LiteLLMShuffle:
		// Weighted by rpm when the first deployment sets it, else by tpm,
		// else uniform.
		weight := func(d *llDeployment) float64 { return 1 }
		switch first := p.deps[cands[0]]; {
		case first.rpm > 0:
			weight = func(d *llDeployment) float64 { return float64(d.rpm) }
		case first.tpm > 0:
			weight = func(d *llDeployment) float64 { return float64(d.tpm) }
		}
		var sum float64
		for _, i := range cands {
			sum += weight(p.deps[i])
		}
		if sum <= 0 {
			return cands[p.rng.IntN(len(cands))]
		}
		x := p.rng.Float64() * sum
		for _, i := range cands {
			if x -= weight(p.deps[i]); x < 0 {
				return i
			}
		}
		return cands[len(cands)-1]
	}
	return cands[0]
}

// try makes the request's next try: a call to the deployment picked in its
// group, or, when none may serve it, a failed try.
func (p *litellmPolicy) try(w *forecast.World, q *llRequest) {
	f := q.fl.f
	for i := range q.fl.budgets {
		if !q.fl.budgets[i].inBudget(w.Now()) {
			// The proxy checks the key's and the team's budgets before it
			// routes: a budget_exceeded error, never retried by the
			// router, that the client tries again after its backoff.
			p.clientRetry(w, q)
			return
		}
	}
	input := f.Flow().PromptTokens + int64(len(q.items))*f.Flow().ItemInputTokens
	i := p.pick(w, q, input)
	if i < 0 {
		// "No deployments available": a rate-limit error the router
		// retries and falls back on as any other.
		p.failed(w, q, -1, 0, false)
		return
	}
	d := p.deps[i]
	if m := minuteOf(w.Now()); d.usageMinute != m {
		d.usageMinute, d.rpmUsed, d.tpmUsed = m, 0, 0
	}
	d.rpmUsed++ // counted before the call, as usage-based-routing-v2 does
	var maxTokens int64
	if mt := f.Flow().ItemMaxTokens; mt > 0 {
		maxTokens = int64(len(q.items)) * mt
	}
	q.fl.inflight += len(q.items)
	w.SendTo(f, d.t, q.items, maxTokens, func(o forecast.Outcome) {
		q.fl.inflight -= len(q.items)
		resp := o.Response
		if resp.Status == http.StatusOK && resp.Fault == forecast.NoFault {
			p.succeeded(w, q, d, o)
			return
		}
		var ra time.Duration
		if v := resp.Header.Get("Retry-After"); v != "" {
			if s, err := strconv.ParseFloat(v, 64); err == nil && s > 0 && s <= 60 {
				ra = time.Duration(s * float64(time.Second))
			}
		}
		p.failed(w, q, i, ra, resp.TooLarge || resp.Status == http.StatusRequestEntityTooLarge)
	})
}

func (p *litellmPolicy) succeeded(w *forecast.World, q *llRequest, d *llDeployment, o forecast.Outcome) {
	now := w.Now()
	usage := governor.Cost{Input: o.Request.Input, Output: o.Response.Output}
	if m := minuteOf(now); d.usageMinute != m {
		d.usageMinute, d.rpmUsed, d.tpmUsed = m, 0, 0
	}
	d.tpmUsed += usage.Tokens()
	if !d.price.IsZero() {
		// Spend is recorded when the call has ended, from its usage.
		d.budget.record(now, float64(d.price.Of(usage))/governor.Nano)
	}
	fl := q.fl
	if !fl.price.IsZero() {
		for i := range fl.budgets {
			fl.budgets[i].record(now, float64(fl.price.Of(usage))/governor.Nano)
		}
	}
	fl.requests--
	fl.taken -= len(q.items)
	fl.backoff = 0
	p.fill(w, fl)
}

// failed handles a failed try on deployment i (-1: none was available):
// the deployment's cooldown, then a retry in the group, the next group,
// or the client's own try after a backoff.
func (p *litellmPolicy) failed(w *forecast.World, q *llRequest, i int, retryAfter time.Duration, tooLarge bool) {
	now := w.Now()
	fl := q.fl
	if i >= 0 {
		d := p.deps[i]
		if m := minuteOf(now); d.failMinute != m {
			d.failMinute, d.fails = m, 0
		}
		d.fails++
		if d.fails > litellmAllowedFails {
			d.coolUntil = now.Add(litellmCooldown)
		}
		q.failed[i] = true
	}
	if tooLarge {
		// A request too large is not retried: the client's items can never
		// be sent.
		fl.requests--
		fl.taken -= len(q.items)
		w.Refuse(fl.f, q.items)
		p.fill(w, fl)
		return
	}
	switch {
	case q.attempt < litellmNumRetries:
		q.attempt++
		sleep := time.Duration(0)
		if len(p.healthy(now, fl.groups[q.group])) <= 1 {
			sleep = retryAfter
			if sleep == 0 {
				sleep = min(litellmRetryDelay<<(q.attempt-1), litellmMaxRetryDelay)
				sleep = time.Duration(float64(sleep) * (1 - 0.25*p.rng.Float64()))
			}
		}
		w.At(now.Add(sleep), func() { p.try(w, q) })
	case q.group+1 < len(fl.groups):
		q.group, q.attempt, q.failed = q.group+1, 0, map[int]bool{}
		w.At(now, func() { p.try(w, q) })
	default:
		// The router raised: the client tries the request again later.
		p.clientRetry(w, q)
	}
}

// clientRetry has the client send q again after its backoff, from its
// first model group.
func (p *litellmPolicy) clientRetry(w *forecast.World, q *llRequest) {
	fl := q.fl
	fl.backoff = min(max(2*fl.backoff, clientBackoffMin), clientBackoffMax)
	q.group, q.attempt, q.failed = 0, 0, map[int]bool{}
	w.At(w.Now().Add(fl.backoff), func() { p.try(w, q) })
}
