package forecast

import (
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-dev/sluice/governor"
)

// targetState is one target in a replay: its provider model and what it
// did.
type targetState struct {
	idx   int
	name  string
	model string
	cfg   *Target // nil in a scenario without targets
	prov  *Model
	price governor.Price

	requests    int64    // succeeded requests
	tokens      int64    // what they were charged, input + output
	spent       spendLog // their real usage at the price
	rejects     map[int]int64
	outageFails int64
	faults      int64
}

// spendLog is money spent, in billionths: in all, and by the simulated day
// and hour each call was sent.
type spendLog struct {
	total  int64
	byDay  []int64
	byHour []int64
}

func (w *World) newSpendLog() spendLog {
	days := int((w.sc.Duration + 24*time.Hour - 1) / (24 * time.Hour))
	return spendLog{byDay: make([]int64, days), byHour: make([]int64, w.hours)}
}

// add counts usage at price (nothing when free) for a call sent then.
func (s *spendLog) add(sent time.Time, price governor.Price, usage governor.Cost) {
	if price.IsZero() {
		return
	}
	m := price.Of(usage)
	s.total += m
	if d := int(sent.Sub(epoch) / (24 * time.Hour)); d >= 0 && d < len(s.byDay) {
		s.byDay[d] += m
	}
	if h := int(sent.Sub(epoch) / time.Hour); h >= 0 && h < len(s.byHour) {
		s.byHour[h] += m
	}
}

// days returns the spend of each day, in money, and the largest.
func (s *spendLog) days() ([]float64, float64) {
	out, most := make([]float64, len(s.byDay)), 0.0
	for d, m := range s.byDay {
		out[d] = money(m)
		most = max(most, out[d])
	}
	return out, most
}

// outageState is one target's outage and when the route's work moved off
// it and back.
type outageState struct {
	target     *targetState
	o          Outage
	start, end time.Time
	// elsewhere is when the first call of a flow whose route starts with
	// the target, sent during the outage, completed on another target;
	// back is when the first call sent after the outage completed on it.
	elsewhere, back time.Time
}

// makeTargets builds the world's targets: sc's, or its provider section as
// the one target.
func (w *World) makeTargets(sc *Scenario) error {
	if !sc.Routed() {
		cfg := sc.Provider.ModelConfig(sc.Seed)
		cfg.Wire = true // headers and error bodies, as the policies' clients would read them
		prov, err := NewModel(cfg)
		if err != nil {
			return err
		}
		w.targets = []*targetState{{name: "provider", prov: prov, rejects: map[int]int64{}, spent: w.newSpendLog()}}
		return nil
	}
	w.routed = true
	for i := range sc.Targets {
		t := &sc.Targets[i]
		cfg := t.Provider.ModelConfig(sc.Seed + int64(i)*0x5851F42D4C957F2D)
		cfg.Wire, cfg.Model = true, t.Model
		prov, err := NewModel(cfg)
		if err != nil {
			return err
		}
		ts := &targetState{idx: i, name: t.Name, model: t.Model, cfg: t, prov: prov, price: t.Price,
			rejects: map[int]int64{}, spent: w.newSpendLog()}
		w.targets = append(w.targets, ts)
		for _, o := range t.Outages {
			w.outages = append(w.outages, &outageState{target: ts, o: o, start: epoch.Add(o.Start), end: epoch.Add(o.End())})
		}
	}
	return nil
}

// Targets is how many targets calls can go to: the scenario's, or 1.
func (w *World) Targets() int { return len(w.targets) }

// outageAt returns the outage the target is in at d since the start.
func (ts *targetState) outageAt(d time.Duration) (Outage, bool) {
	if ts.cfg == nil {
		return Outage{}, false
	}
	return ts.cfg.outage(d)
}

// failOutage answers a call to a target in an outage: after
// outageLatency, a failure that charged nothing, as the outage's mode
// makes it.
func (w *World) failOutage(f *FlowState, ts *targetState, o Outage, items []Item, req Request, done func(Outcome)) {
	profile := ts.prov.cfg.Profile
	resp := Response{Latency: outageLatency, Header: http.Header{}}
	switch o.Mode {
	case Outage5xx:
		resp.Fault, resp.Status = Fault5xx, http.StatusInternalServerError
		resp.Body = ServerErrorBody(profile, resp.Status, 0)
	case OutageOverload:
		resp.Fault, resp.Status = Fault5xx, http.StatusServiceUnavailable
		if profile == "anthropic" {
			resp.Status = 529
		}
		resp.Body = ServerErrorBody(profile, resp.Status, 0)
	case Outage429:
		// A 429 that names no limit: the provider sheds load.
		resp.Status, resp.RetryAfter = http.StatusTooManyRequests, time.Second
		resp.Header.Set("Retry-After", strconv.Itoa(1))
		resp.Body = ErrorBody(profile, "rate_limit_error", "", "The service is receiving too many requests. Please retry shortly.", 0)
	case OutageDown:
		resp.Fault = FaultReset
	}
	sent := w.now
	f.sent += len(items)
	out := Outcome{Response: resp, Items: items, Request: req}
	w.At(w.now.Add(resp.Latency), func() {
		f.sent -= len(items)
		ts.outageFails++
		w.record(sent, w.now, f, ts, items, req, resp, governor.Cost{})
		done(out)
		w.pol.Wake(w)
	})
}

// succeed counts a call that succeeded on the target: its items, its
// tokens and its real usage at the target's price, by the day it was sent;
// and the outage times it ends.
func (ts *targetState) succeed(w *World, f *FlowState, sent time.Time, items []Item, charged governor.Cost, req Request, resp Response) {
	ts.requests++
	ts.tokens += charged.Tokens()
	usage := governor.Cost{Input: req.Input, Output: resp.Output}
	ts.spent.add(sent, ts.price, usage)
	if ts.cfg == nil {
		// One key: the flow pays its model's price.
		f.spent.add(sent, f.price, usage)
	} else {
		f.spent.add(sent, ts.price, usage)
	}
	f.doneOn[ts.idx] += len(items)
	for _, o := range w.outages {
		switch {
		case o.target == ts && o.back.IsZero() && !sent.Before(o.end):
			o.back = w.now
		case o.target != ts && o.elsewhere.IsZero() && !sent.Before(o.start) && sent.Before(o.end) && w.startsWith(f, o.target):
			o.elsewhere = w.now
		}
	}
}

// startsWith reports whether f's route starts with target ts.
func (w *World) startsWith(f *FlowState, ts *targetState) bool {
	r := w.sc.RouteOf(&f.cfg)
	return len(r) > 0 && r[0] == ts.idx
}

// TargetResult is one target's part of a run.
type TargetResult struct {
	Name  string `json:"name"`
	Model string `json:"model,omitempty"`
	// Requests and Tokens count the calls that succeeded on it and what
	// they were charged (input + output).
	Requests int64 `json:"requests"`
	Tokens   int64 `json:"tokens"`
	// Done counts the items done on it, all flows together.
	Done int `json:"done"`
	// Spend is the succeeded calls' real usage at the target's price;
	// SpendByDay the same by the simulated day each call was sent,
	// MaxDaySpend the largest of those, and BudgetDay the target's budget
	// per day (absent: none).
	Spend       float64   `json:"spend"`
	SpendByDay  []float64 `json:"spend_by_day"`
	MaxDaySpend float64   `json:"max_day_spend"`
	BudgetDay   *float64  `json:"budget_day,omitempty"`
	// SpendByHour is the spend by the simulated hour each call was sent,
	// in billionths; not in the JSON (the planner reads it).
	SpendByHour []int64  `json:"-"`
	BudgetMonth *float64 `json:"budget_month,omitempty"`
	// ProviderRejections counts the target's refusals by status (429,
	// 413); OutageFailures the calls it failed in an outage; Faults the
	// calls it admitted and failed (the scenario's faults).
	ProviderRejections map[string]int64 `json:"provider_rejections"`
	OutageFailures     int64            `json:"outage_failures"`
	Faults             int64            `json:"faults"`
}

// OutageResult is how a run went through one outage.
type OutageResult struct {
	Target       string  `json:"target"`
	Mode         string  `json:"mode"`
	StartSeconds float64 `json:"start_seconds"`
	EndSeconds   float64 `json:"end_seconds"`
	// FallbackAfterSeconds is from the outage's start until the first call
	// of a flow whose route starts with the target, sent during the
	// outage, completed on another target; absent if none did.
	FallbackAfterSeconds *float64 `json:"fallback_after_seconds"`
	// BackAfterSeconds is from the outage's end until the first call sent
	// to the target after it completed; absent if none did.
	BackAfterSeconds *float64 `json:"back_after_seconds"`
}

// routedResult adds the targets' parts to r.
func (w *World) routedResult(r *Result) {
	r.routed = true
	var spend int64
	for _, ts := range w.targets {
		tr := TargetResult{Name: ts.name, Model: ts.model, Requests: ts.requests, Tokens: ts.tokens,
			Spend: money(ts.spent.total), ProviderRejections: map[string]int64{"429": 0, "413": 0},
			OutageFailures: ts.outageFails, Faults: ts.faults, SpendByHour: ts.spent.byHour}
		for status, n := range ts.rejects {
			tr.ProviderRejections[strconv.Itoa(status)] += n
		}
		tr.SpendByDay, tr.MaxDaySpend = ts.spent.days()
		if b := ts.cfg.Budget.Day; b > 0 {
			tr.BudgetDay = &b
		}
		if b := ts.cfg.Budget.Month; b > 0 {
			tr.BudgetMonth = &b
		}
		for _, f := range w.flows {
			tr.Done += f.doneOn[ts.idx]
		}
		spend += ts.spent.total
		r.Targets = append(r.Targets, tr)
	}
	r.Spend = money(spend)
	if spend > 0 {
		v := round4(float64(r.WorkTokens) / (float64(spend) / governor.Nano))
		r.WorkPerDollar = &v
	}
	for _, f := range w.flows {
		r.DoubleRuns += f.doubleRuns
		// Every item made is done, refused, in line, in a call in flight,
		// or held by the policy (taken, to be sent again); any other is
		// lost.
		made := int(f.serial)
		held := 0
		if h, ok := w.pol.(interface{ Holding(*FlowState) int }); ok {
			held = h.Holding(f)
		}
		r.Lost += made - f.done - f.neverFit - len(f.queue) - f.sent - held
		fr := r.Flows[f.cfg.Name]
		fr.DoneByTarget = map[string]int{}
		for _, ts := range w.targets {
			fr.DoneByTarget[ts.name] = f.doneOn[ts.idx]
		}
		r.Flows[f.cfg.Name] = fr
	}
	for _, o := range w.outages {
		or := OutageResult{Target: o.target.name, Mode: o.o.Mode.String(),
			StartSeconds: o.o.Start.Seconds(), EndSeconds: o.o.End().Seconds()}
		if !o.elsewhere.IsZero() {
			v := round1(o.elsewhere.Sub(o.start).Seconds())
			or.FallbackAfterSeconds = &v
		}
		if !o.back.IsZero() {
			v := round1(o.back.Sub(o.end).Seconds())
			or.BackAfterSeconds = &v
		}
		r.Outages = append(r.Outages, or)
	}
}
