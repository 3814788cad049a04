package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/chart/charttest"
	"github.com/sluice-dev/sluice/internal/forecast"
)

func load(t *testing.T, name string) *forecast.Scenario {
	t.Helper()
	sc, err := forecast.Load(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func run(t *testing.T, sc *forecast.Scenario, opts Options) map[string]forecast.Result {
	t.Helper()
	rep, err := Run(context.Background(), sc, Policies, opts)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]forecast.Result{}
	for _, r := range rep.Results {
		out[r.Policy] = r
	}
	return out
}

// TestDevPickTargets checks the governor issue's targets on the DevPick
// scenario (the same checks as ../shared/tools/check-quota-report, but for
// wall time, which is a benchmark's business).
func TestDevPickTargets(t *testing.T) {
	t.Parallel()
	res := run(t, load(t, "devpick.yaml"), Options{})
	s := res["sluice"]
	if s.BottleneckUtilization < 0.98 {
		t.Errorf("sluice bottleneck_utilization %.4f, want ≥ 0.98", s.BottleneckUtilization)
	}
	if n := s.ProviderRejections["429"] + s.ProviderRejections["413"]; n != 0 {
		t.Errorf("sluice drew %d provider rejections, want none", n)
	}
	for name, f := range s.Flows {
		if f.MaxStallMinutes > 60 {
			t.Errorf("sluice flow %s stalled %.1f min, want ≤ 60", name, f.MaxStallMinutes)
		}
	}
	if s.BottleneckUtilization < 0.99 {
		t.Errorf("sluice bottleneck_utilization %.4f, want ≥ 0.99 with priority work prompt", s.BottleneckUtilization)
	}
	// Priority is prompt: day pacing spreads the backfills, never the
	// analysis of new articles.
	if w := s.Flows["analysis"].P95WaitMinutes; w > 2 {
		t.Errorf("sluice analysis p95 wait %.1f min, want ≤ 2", w)
	}
	if w := s.Flows["analysis"].MaxWaitMinutes; w > 10 {
		t.Errorf("sluice analysis max wait %.1f min, want ≤ 10", w)
	}
	for name, r := range res {
		if name == "sluice" || name == Greedy {
			continue
		}
		if s.BottleneckUtilization < r.BottleneckUtilization-0.005 {
			t.Errorf("sluice utilization %.4f behind %s's %.4f", s.BottleneckUtilization, name, r.BottleneckUtilization)
		}
		// Work tokens are compared only with anchors that serve every flow
		// (scenarios README): one that starves a flow buys its work with it.
		if servesEveryFlow(r) && s.WorkTokens <= r.WorkTokens {
			t.Errorf("sluice work_tokens %d not ahead of %s's %d", s.WorkTokens, name, r.WorkTokens)
		}
	}
	// The greedy reference sends whatever fits: the practical ceiling of
	// utilization (issue 7: sluice within 3 % of it).
	if g := res[Greedy].BottleneckUtilization; s.BottleneckUtilization < 0.97*g {
		t.Errorf("sluice utilization %.4f below 0.97 × greedy's %.4f", s.BottleneckUtilization, g)
	}
	if g := res[Greedy]; g.ProviderRejections["429"]+g.ProviderRejections["413"] != 0 {
		t.Errorf("greedy drew rejections %v; it knows every limit and never sends what cannot fit", g.ProviderRejections)
	}
	// The gap, as it stands (issue "An honest bench"): the cookbook told
	// every limit does more work than sluice — 1,146,700 work tokens against
	// 1,076,640 when this was written — by spending the week on the summary
	// backfill, the flow with the least instructions per item, while the
	// analysis of new articles never runs and titles stall for days. Under
	// the README's rule it is compared on utilization only; this check holds
	// both facts so the gap is not forgotten. When sluice closes it, make
	// this a target.
	c := res["cookbook"]
	if s.WorkTokens > c.WorkTokens {
		t.Errorf("sluice work_tokens %d now ahead of the cookbook's %d: the gap is closed; make it a target", s.WorkTokens, c.WorkTokens)
	}
	if servesEveryFlow(c) {
		t.Errorf("the cookbook's %d work tokens, ahead of sluice's %d, no longer starve a flow", c.WorkTokens, s.WorkTokens)
	}
	// The naive model reproduces the seed: the title backfill never moves.
	if st := res["devpick-naive"].Flows["title"].MaxStallMinutes; st < 480 {
		t.Errorf("devpick-naive title stall %.0f min, want ≥ 480 (seed 000's starvation)", st)
	}
	if d := res["devpick-naive"].Flows["title"].Done; d != 0 {
		t.Errorf("devpick-naive finished %d titles, the seed's run finished none", d)
	}
	// After the fix titles move but the summary backfill is the one left behind.
	if res["devpick-fixed"].Flows["title"].Done == 0 {
		t.Error("devpick-fixed finished no titles; the reorder should let them through")
	}
	if res["devpick-fixed"].ProviderRejections["429"] == 0 {
		t.Error("devpick-fixed drew no 429s; the seed's fixed scheduler still hit OTPM")
	}
}

// servesEveryFlow reports whether r left no flow with eligible work stalled
// past two hours, the seed's own stall alert (scenarios README).
func servesEveryFlow(r forecast.Result) bool {
	for _, f := range r.Flows {
		if f.MaxStallMinutes > 120 && f.Remaining > 0 {
			return false
		}
	}
	return true
}

// TestVariedScenarios runs scenarios written for the bench — other profiles,
// fixed windows, settle accounting with separate input and output limits
// and slow responses, weights and priorities, calls of a large fraction of a
// minute limit, faults, items that can never fit — and checks the governor's
// targets on each: utilization within 3 % of greedy's (the practical
// ceiling) and not behind any anchor, no provider rejection, no flow with
// work stalled past an hour, priority work waiting at most 2 minutes at the
// 95th percentile, and backlogged flows sharing the key by weight, within
// 5 %, in dominant share (docs/bench.md).
func TestVariedScenarios(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file     string
		neverFit map[string]int
		shares   []string // backlogged flows whose dominant share per unit of weight must match
	}{
		{file: "openai-fixed.yaml", shares: []string{"gold", "bulk", "reports"}},
		{file: "anthropic-settle.yaml"},
		{file: "groq-faults.yaml", neverFit: map[string]int{"essays": 50}},
		{file: "rolling-minute.yaml", shares: []string{"a", "b", "c", "big"}},
		{file: "settle-split-latency.yaml", shares: []string{"extract", "write"}},
		{file: "big-call.yaml", shares: []string{"big", "small-a", "small-b"}},
		{file: "tenants.yaml", shares: []string{"tenant-1", "tenant-2", "tenant-3", "tenant-4"}},
		{file: "faults-day.yaml", shares: []string{"backfill-a", "backfill-b"}},
		{file: "fixed-weighted.yaml", shares: []string{"heavy", "light"}},
		{file: "many-flows.yaml", shares: []string{"flow-001", "flow-003", "flow-006", "flow-008", "flow-011", "flow-013"}},
		{file: "two-limits-huge.yaml", shares: []string{"huge", "write", "extract"}},
		{file: "two-limits-output.yaml", shares: []string{"huge", "write", "extract"}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			sc := load(t, tt.file)
			var trace bytes.Buffer
			rep, err := Run(context.Background(), sc, Policies, Options{Trace: &trace})
			if err != nil {
				t.Fatal(err)
			}
			res := map[string]forecast.Result{}
			for _, r := range rep.Results {
				res[r.Policy] = r
			}
			s := res["sluice"]
			if n := s.ProviderRejections["429"] + s.ProviderRejections["413"]; n != 0 {
				t.Errorf("sluice drew %d provider rejections, want none", n)
			}
			if g := res[Greedy].BottleneckUtilization; s.BottleneckUtilization < 0.97*g {
				t.Errorf("sluice bottleneck %s utilization %.4f, want ≥ 0.97 × greedy's %.4f", s.Bottleneck, s.BottleneckUtilization, g)
			}
			for _, fc := range sc.Flows {
				f := s.Flows[fc.Name]
				if f.MaxStallMinutes > 60 {
					t.Errorf("sluice flow %s stalled %.1f min, want ≤ 60", fc.Name, f.MaxStallMinutes)
				}
				if want := tt.neverFit[fc.Name]; f.NeverFit != want {
					t.Errorf("sluice flow %s refused %d items up front, want %d", fc.Name, f.NeverFit, want)
				}
				if fc.Priority > 0 && f.P95WaitMinutes > 2 {
					t.Errorf("sluice priority flow %s p95 wait %.1f min, want ≤ 2", fc.Name, f.P95WaitMinutes)
				}
			}
			// Greedy knows every limit and how the provider counts it: it is
			// never refused.
			if g := res[Greedy]; g.ProviderRejections["429"]+g.ProviderRejections["413"] != 0 {
				t.Errorf("greedy drew rejections %v", g.ProviderRejections)
			}
			for name, r := range res {
				if name == "sluice" || name == Greedy {
					continue
				}
				if s.BottleneckUtilization < r.BottleneckUtilization-0.005 {
					t.Errorf("sluice utilization %.4f behind %s's %.4f", s.BottleneckUtilization, name, r.BottleneckUtilization)
				}
			}
			if len(tt.shares) > 0 {
				share := dominantShares(t, sc, trace.Bytes(), "sluice")
				weight := map[string]float64{}
				for _, f := range sc.Flows {
					weight[f.Name] = f.Weight
				}
				var mean float64
				for _, name := range tt.shares {
					if s.Flows[name].Remaining == 0 {
						t.Fatalf("flow %s ran out of work: it is not backlogged, pick another", name)
					}
					mean += share[name] / weight[name] / float64(len(tt.shares))
				}
				for _, name := range tt.shares {
					if per := share[name] / weight[name]; math.Abs(per-mean) > 0.05*mean {
						t.Errorf("flow %s got %.0f s of the key per unit of weight, the mean is %.0f: want within 5 %%", name, per, mean)
					}
				}
			}
		})
	}
}

// dominantShares sums, per flow of policy's run, the dominant share of each
// call the provider admitted, as the governor schedules it: the largest, over
// the limits the provider enforces, of the call's admission cost (input +
// max_tokens) in seconds of that limit's capacity.
func dominantShares(t *testing.T, sc *forecast.Scenario, trace []byte, policy string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	sc2 := bufio.NewScanner(bytes.NewReader(trace))
	sc2.Buffer(make([]byte, 1<<20), 1<<26)
	for sc2.Scan() {
		var r forecast.TraceRecord
		if err := json.Unmarshal(sc2.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		if r.Policy != policy || r.Kind != forecast.KindRequest || r.Limit != "" {
			continue
		}
		c := governor.Cost{Requests: 1, Input: r.Input, Output: r.MaxTokens}
		var size float64
		for l := range governor.NumLimits {
			if lim := sc.Provider.Limits[l]; lim > 0 {
				size = math.Max(size, float64(c.On(l))*l.Period().Seconds()/float64(lim))
			}
		}
		out[r.Flow] += size
	}
	if err := sc2.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestTraceRecomputesReport rebuilds every figure of the report but wall
// time from the --trace lines and the scenario alone, on scenarios with
// faults, items that never fit, arrivals, a flow that follows another and
// settle accounting.
func TestTraceRecomputesReport(t *testing.T) {
	t.Parallel()
	seen := map[string]int{} // kinds of line, and faults, over every scenario
	var mu sync.Mutex
	t.Cleanup(func() {
		// Every kind of line the recomputation relies on was there.
		for _, k := range []string{forecast.KindRequest, forecast.KindNeverFit, forecast.KindInFlight, forecast.KindWaiting, "fault", "429"} {
			if seen[k] == 0 {
				t.Errorf("no %s in any trace: the test does not exercise it", k)
			}
		}
	})
	for _, file := range []string{"groq-faults.yaml", "devpick.yaml", "anthropic-settle.yaml", "devpick-otpm-unannounced.yaml"} {
		t.Run(file, func(t *testing.T) {
			t.Parallel()
			sc := load(t, file)
			if file == "anthropic-settle.yaml" {
				sc.Duration = 2 * time.Hour // settle accounting and a flow after another, in less time
			}
			var buf bytes.Buffer
			policies := append(append([]string(nil), Policies...), ExtraPolicies...)
			rep, err := Run(context.Background(), sc, policies, Options{Trace: &buf})
			if err != nil {
				t.Fatal(err)
			}
			byPolicy := map[string][]forecast.TraceRecord{}
			lines := bufio.NewScanner(&buf)
			lines.Buffer(make([]byte, 1<<20), 1<<20)
			for lines.Scan() {
				var rec forecast.TraceRecord
				if err := json.Unmarshal(lines.Bytes(), &rec); err != nil {
					t.Fatalf("trace line %q: %v", lines.Text(), err)
				}
				if len(rec.IDs) != rec.Items || len(rec.Eligible) != rec.Items {
					t.Fatalf("trace line of %d items with %d ids and %d eligible times", rec.Items, len(rec.IDs), len(rec.Eligible))
				}
				byPolicy[rec.Policy] = append(byPolicy[rec.Policy], rec)
				mu.Lock()
				seen[rec.Kind]++
				if rec.Fault != "" {
					seen["fault"]++
				}
				if rec.Status == 429 {
					seen["429"]++
				}
				mu.Unlock()
			}
			if err := lines.Err(); err != nil {
				t.Fatal(err)
			}
			want := map[string]forecast.Result{}
			for _, r := range rep.Results {
				r.WallSeconds, r.Series = 0, nil
				for name, f := range r.Flows {
					f.DoneByHour = nil // the chart's, as series
					r.Flows[name] = f
				}
				want[r.Policy] = r
			}
			// Tracing changes nothing of the run.
			untraced, err := Run(context.Background(), sc, policies, Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range untraced.Results {
				r.WallSeconds, r.Series = 0, nil
				for name, f := range r.Flows {
					f.DoneByHour = nil
					r.Flows[name] = f
				}
				if !reflect.DeepEqual(r, want[r.Policy]) {
					t.Errorf("%s: the report of a run with --trace differs from one without", r.Policy)
				}
			}
			got := map[string]forecast.Result{}
			for _, name := range policies {
				got[name] = resultFromTrace(t, sc, name, byPolicy[name])
			}
			if g, ok := got[Greedy]; ok && g.BottleneckUtilization > 0 {
				for name, r := range got {
					v := round4(r.BottleneckUtilization / g.BottleneckUtilization)
					r.UtilizationVsGreedy = &v
					got[name] = r
				}
			}
			for _, name := range policies {
				if !reflect.DeepEqual(got[name], want[name]) {
					g, _ := json.Marshal(got[name])
					w, _ := json.Marshal(want[name])
					t.Errorf("%s: the trace gives\n%s\nthe report says\n%s", name, g, w)
				}
			}
		})
	}
}

// resultFromTrace computes a policy's forecast.Result, but for its wall time and
// utilization_vs_greedy, from its trace lines and the scenario, following the
// definitions of the scenarios README.
func resultFromTrace(t *testing.T, sc *forecast.Scenario, policy string, recs []forecast.TraceRecord) forecast.Result {
	t.Helper()
	end := sc.Duration.Seconds()
	r := forecast.Result{
		Policy: policy, SimulatedHours: sc.Duration.Hours(), Limits: map[string]forecast.LimitResult{},
		ProviderRejections: map[string]int64{"429": 0, "413": 0}, Flows: map[string]forecast.FlowResult{},
	}
	var used, useful [governor.NumLimits]int64
	// What happened to each item: an event list per flow for the stalls.
	type event = traceEvent
	type itemKey struct {
		flow string
		id   uint32
	}
	eligible := map[itemKey]float64{}
	fate := map[itemKey]string{}
	events := map[string][]event{}
	waits := map[string][]float64{}
	flows := map[string]forecast.FlowResult{}
	note := func(rec forecast.TraceRecord) {
		for i, id := range rec.IDs {
			k := itemKey{rec.Flow, id}
			if e, ok := eligible[k]; ok && e != rec.Eligible[i] {
				t.Fatalf("%s item %d eligible at %v and at %v", rec.Flow, id, e, rec.Eligible[i])
			}
			eligible[k] = rec.Eligible[i]
		}
	}
	settle := func(rec forecast.TraceRecord, how string) {
		for _, id := range rec.IDs {
			k := itemKey{rec.Flow, id}
			if fate[k] != "" {
				t.Fatalf("%s item %d %s, already %s", rec.Flow, id, how, fate[k])
			}
			fate[k] = how
		}
	}
	for _, rec := range recs {
		note(rec)
		f := flows[rec.Flow]
		switch rec.Kind {
		case forecast.KindRequest:
			switch {
			case rec.Status == 200 && rec.Fault == "":
				for l := range governor.NumLimits {
					used[l] += rec.Charged.On(l)
					useful[l] += governor.Cost{Requests: 1, Input: rec.Input, Output: rec.Output}.On(l)
				}
				f.Requests++
				f.Tokens += rec.Charged.Tokens()
				f.Done += rec.Items
				settle(rec, "done")
				events[rec.Flow] = append(events[rec.Flow], event{at: rec.End, change: -rec.Items, done: true})
				for _, e := range rec.Eligible {
					waits[rec.Flow] = append(waits[rec.Flow], (rec.End-e)/60)
				}
			case rec.Limit != "":
				r.ProviderRejections[strconv.Itoa(rec.Status)]++
				if rec.Charged != (governor.Cost{}) {
					t.Errorf("a refused request was charged %+v", rec.Charged)
				}
			case rec.Fault != "":
				if rec.Charged.Requests != 1 {
					t.Errorf("a faulted request was charged %+v, want its charge", rec.Charged)
				}
			}
		case forecast.KindNeverFit:
			if rec.Limit == "" {
				t.Errorf("%s: %d items refused naming no limit", rec.Flow, rec.Items)
			}
			f.NeverFit += rec.Items
			settle(rec, "refused")
			events[rec.Flow] = append(events[rec.Flow], event{at: rec.Time, change: -rec.Items})
		case forecast.KindInFlight, forecast.KindWaiting:
			settle(rec, "left")
		default:
			t.Fatalf("trace line of kind %q", rec.Kind)
		}
		flows[rec.Flow] = f
	}
	// Every item that became eligible is on some line. Those neither done
	// nor refused remain: waiting, in flight, or held by the policy after a
	// failed call (seen then only on the failed call's line).
	for k, e := range eligible {
		events[k.flow] = append(events[k.flow], event{at: e, change: 1})
		if fate[k] != "done" && fate[k] != "refused" {
			f := flows[k.flow]
			f.Remaining++
			flows[k.flow] = f
		}
	}
	for l := range governor.NumLimits {
		lim := sc.Provider.Limits[l]
		if lim == 0 {
			continue
		}
		capacity := int64(math.Round(float64(lim) * float64(sc.Duration) / float64(l.Period())))
		lr := forecast.LimitResult{Limit: lim, Capacity: capacity, Used: used[l], Useful: useful[l], Utilization: round4(float64(used[l]) / float64(capacity))}
		r.Limits[l.String()] = lr
		if lr.Utilization > r.BottleneckUtilization || r.Bottleneck == "" {
			r.Bottleneck, r.BottleneckUtilization = l.String(), lr.Utilization
		}
	}
	for _, fc := range sc.Flows {
		f := flows[fc.Name]
		f.WorkTokens = int64(f.Done) * (fc.ItemInputTokens + fc.ItemOutputTokens)
		r.WorkTokens += f.WorkTokens
		if fc.ArrivalsPerDay > 0 {
			f.P95WaitMinutes = round1(percentile(waits[fc.Name], 0.95))
			f.MaxWaitMinutes = round1(percentile(waits[fc.Name], 1))
		}
		// A stall runs from when the flow got work, or last finished some,
		// to its next completion, or until it has no work left.
		evs := events[fc.Name]
		sort.SliceStable(evs, func(i, j int) bool {
			if evs[i].at != evs[j].at {
				return evs[i].at < evs[j].at
			}
			return evs[i].change > 0 && evs[j].change <= 0 // what became eligible at a moment counts first
		})
		work, from, longest := 0, -1.0, 0.0
		for _, e := range evs {
			switch {
			case e.change > 0:
				if work == 0 {
					from = e.at
				}
			case e.done:
				longest = max(longest, e.at-from)
				from = -1
				if work+e.change > 0 {
					from = e.at
				}
			case work+e.change == 0:
				longest = max(longest, e.at-from)
				from = -1
			}
			work += e.change
		}
		if from >= 0 {
			longest = max(longest, end-from)
		}
		f.MaxStallMinutes = round1(longest / 60)
		f.ClearedHours = clearedFromTrace(sc, fc, events)
		r.Flows[fc.Name] = f
	}
	return r
}

// percentile is the p-quantile of xs by the nearest rank: the smallest of
// them that at least a fraction p of them are at or below.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	return s[max(int(math.Ceil(p*float64(len(s))))-1, 0)]
}

func round1(x float64) float64 { return math.Round(x*10) / 10 }

// traceEvent is what happened to items of a flow at a moment.
type traceEvent struct {
	at     float64
	change int // +1 eligible, -n done or refused
	done   bool
}

// clearedFromTrace is when fc's work and that of every flow it is after
// were first all done, at a completion or refusal, in hours; nil if never
// or fc has nothing to clear.
func clearedFromTrace(sc *forecast.Scenario, fc forecast.Flow, events map[string][]traceEvent) *float64 {
	chain := []string{fc.Name}
	byName := map[string]forecast.Flow{}
	for _, f := range sc.Flows {
		byName[f.Name] = f
	}
	for u := fc.After; u != ""; u = byName[u].After {
		chain = append(chain, u)
	}
	if fc.Backlog == 0 && len(chain) == 1 {
		return nil
	}
	type ev struct {
		at     float64
		change int
		flow   int
	}
	var all []ev
	for i, name := range chain {
		for _, e := range events[name] {
			all = append(all, ev{e.at, e.change, i})
		}
	}
	sort.SliceStable(all, func(i, j int) bool {
		if all[i].at != all[j].at {
			return all[i].at < all[j].at
		}
		return all[i].change > 0 && all[j].change <= 0
	})
	work := make([]int, len(chain))
	for _, e := range all {
		work[e.flow] += e.change
		if e.change < 0 && !slices.ContainsFunc(work, func(n int) bool { return n != 0 }) {
			h := round1(e.at / 3600)
			return &h
		}
	}
	return nil
}

// TestUnannounced: a limit the scenario marks unannounced is enforced by the
// provider and measured in the report, and no policy is configured with it.
func TestUnannounced(t *testing.T) {
	t.Parallel()
	sc := load(t, "devpick-otpm-unannounced.yaml")
	if !sc.Provider.Unannounced[governor.OTPM] || sc.Provider.Limits[governor.OTPM] != 1000 {
		t.Fatalf("scenario provider %+v, want otpm 1000 unannounced", sc.Provider)
	}
	// A replay hands a policy the announced view of the scenario, and its
	// provider model every limit (forecast's TestReplayUnannounced);
	// newPolicy makes every policy from that view.
	if k := newCookbook(sc.Announced(), false).known; k[governor.OTPM] != 0 || k[governor.TPD] != 200000 {
		t.Errorf("the cookbook told every announced limit knows %v", k)
	}
	res := run(t, sc, Options{})
	for name, r := range res {
		if _, ok := r.Limits["otpm"]; !ok {
			t.Errorf("%s: the report does not measure otpm", name)
		}
	}
	// Greedy never sends what its limits say cannot fit: told of OTPM, it
	// is never refused (TestDevPickTargets); not told, it is.
	if g := res[Greedy]; g.ProviderRejections["429"] == 0 {
		t.Errorf("greedy drew no 429 from a limit it was not told of")
	}
	// sluice learns the limit nobody told it from the provider's errors:
	// about as much work as when told, few rejections, and a batch refused
	// as too large is split rather than refused.
	told := run(t, load(t, "devpick.yaml"), Options{})["sluice"]
	checkLearns(t, res["sluice"], told, 0.97, 10)
	// Learning OTPM costs no flow a stall past the hour: the promoted
	// flow's start is not pushed later by room held for the priority flow
	// as its credit refills (it was 61.4 min).
	for name, f := range res["sluice"].Flows {
		if f.MaxStallMinutes > 60 {
			t.Errorf("sluice flow %s stalled %.1f min, want ≤ 60", name, f.MaxStallMinutes)
		}
	}
}

// TestAllUnannounced: a governor told nothing of the key but its provider's
// profile learns RPD and TPM from Groq's headers and every other limit from
// its errors, and still does most of the work of one told every limit.
func TestAllUnannounced(t *testing.T) {
	t.Parallel()
	sc := load(t, "devpick-all-unannounced.yaml")
	if got := sc.Announced().Provider.Limits; got != (governor.Limits{}) {
		t.Fatalf("policies are told %v, want nothing", got)
	}
	rep, err := Run(context.Background(), sc, []string{"sluice"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	told := run(t, load(t, "devpick.yaml"), Options{})["sluice"]
	// It probes the key told nothing (one call, then more as answers come)
	// and learns TPM, OTPM and TPD from a few refusals (4 measured; 64,
	// all in the first second, before it probed), and keeps what it
	// learned: a limit it forgot would cost a refusal every time it is
	// forgotten (once: 57,643 in the week).
	checkLearns(t, rep.Results[0], told, 0.9, 10)
}

// checkLearns checks a run of sluice on a key with unannounced limits
// against a run told every limit: at least frac of its work tokens, no item
// refused as never fitting, and at most max429 provider refusals, 429s and
// 413s (-1: any).
func checkLearns(t *testing.T, s, told forecast.Result, frac float64, max429 int64) {
	t.Helper()
	if float64(s.WorkTokens) < frac*float64(told.WorkTokens) {
		t.Errorf("sluice did %d work tokens, want ≥ %.2f × the %d it does when told every limit", s.WorkTokens, frac, told.WorkTokens)
	}
	if n := s.ProviderRejections["429"] + s.ProviderRejections["413"]; max429 >= 0 && n > max429 {
		t.Errorf("sluice drew %d provider refusals (429, 413) learning the limits, want ≤ %d", n, max429)
	}
	for name, f := range s.Flows {
		if f.NeverFit != 0 {
			t.Errorf("sluice refused %d items of %s as never fitting; one item per request fits", f.NeverFit, name)
		}
	}
}

// TestUtilizationVsGreedy: with greedy in the run, every result gives its
// utilization as a fraction of greedy's; without it, none does.
func TestUtilizationVsGreedy(t *testing.T) {
	t.Parallel()
	sc := load(t, "openai-fixed.yaml")
	rep, err := Run(context.Background(), sc, []string{"sluice", Greedy, "cookbook"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	g := rep.Results[1].BottleneckUtilization
	for _, r := range rep.Results {
		if r.UtilizationVsGreedy == nil || *r.UtilizationVsGreedy != round4(r.BottleneckUtilization/g) {
			t.Errorf("%s: utilization_vs_greedy %v, want %.4f", r.Policy, r.UtilizationVsGreedy, round4(r.BottleneckUtilization/g))
		}
	}
	data, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(data, []byte(`"utilization_vs_greedy":`)); n != 3 {
		t.Errorf("the JSON report has utilization_vs_greedy %d times, want 3", n)
	}
	rep, err = Run(context.Background(), sc, []string{"sluice"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if data, _ := json.Marshal(rep); bytes.Contains(data, []byte("utilization_vs_greedy")) {
		t.Errorf("without greedy the report has utilization_vs_greedy: %s", data)
	}
}

func TestSameSeedSameReport(t *testing.T) {
	t.Parallel()
	sc := load(t, "groq-faults.yaml")
	a, err := Run(context.Background(), sc, Policies, Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Run(context.Background(), sc, Policies, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range a.Results {
		a.Results[i].WallSeconds, b.Results[i].WallSeconds = 0, 0
		a.Results[i].Series, b.Results[i].Series = nil, nil
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two runs of the same scenario and seed differ")
	}
}

func TestUnknownPolicy(t *testing.T) {
	t.Parallel()
	_, err := Run(context.Background(), load(t, "devpick.yaml"), []string{"fifo"}, Options{})
	if err == nil || !strings.Contains(err.Error(), `unknown policy "fifo"`) || !strings.Contains(err.Error(), "cookbook-rpm-tpm") {
		t.Fatalf("error = %v, want it to name the policy and list the known ones", err)
	}
}

func TestSVG(t *testing.T) {
	t.Parallel()
	policies := []string{"sluice", "devpick-naive"}
	rep, err := Run(context.Background(), load(t, "devpick.yaml"), policies, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Results[1].ProviderRejections["429"] == 0 {
		t.Fatal("devpick-naive met no 429: the test needs a policy that does")
	}
	var buf bytes.Buffer
	if err := WriteSVG(&buf, rep); err != nil {
		t.Fatal(err)
	}
	// Every panel: one frame, all drawn inside it, nice ticks.
	panels := charttest.Panels(t, charttest.Parse(t, buf.Bytes()))
	if len(panels) != 1+2*len(policies) {
		t.Fatalf("%d panels, want 1 + 2 per policy", len(panels))
	}
	// The first panel: every policy's progress, side by side.
	if got := charttest.Series(panels[0]); !slices.Equal(got, policies) {
		t.Errorf("first panel draws %q, want one line per policy %q", got, policies)
	}
	var progressTop, useTop []float64
	for i, res := range rep.Results {
		done, use := panels[1+2*i], panels[2+2*i]
		if got, want := charttest.Series(done), []string{"analysis", "summary", "title"}; !slices.Equal(got, want) {
			t.Errorf("%s: progress panel draws %q, want the flows %q", res.Policy, got, want)
		}
		if got, want := charttest.Series(use), []string{"rpm", "rpd", "tpm", "tpd", "otpm"}; !slices.Equal(got, want) {
			t.Errorf("%s: use panel draws %q, want the limits %q", res.Policy, got, want)
		}
		if l := use.All("refline-label"); len(l) != 1 || l[0].Text != "limit" {
			t.Errorf("%s: use panel's reference lines %v, want the limit", res.Policy, l)
		}
		// The marks count every rejection, hour by hour.
		var marked int64
		for _, m := range use.All("mark") { // titled "12 × 429 rejections, 1 × 413 rejections at 3.5 h"
			counts, _, _ := strings.Cut(m.Children[0].Text, " at ")
			for _, part := range strings.Split(counts, ", ") {
				n, _, _ := strings.Cut(part, " × ")
				k, err := strconv.ParseInt(strings.ReplaceAll(n, ",", ""), 10, 64)
				if err != nil {
					t.Fatalf("%s: mark titled %q: %v", res.Policy, m.Children[0].Text, err)
				}
				marked += k
			}
		}
		if want := res.ProviderRejections["429"] + res.ProviderRejections["413"]; marked != want {
			t.Errorf("%s: marks count %d rejections, want %d", res.Policy, marked, want)
		}
		v := charttest.YTicks(t, done)
		progressTop = append(progressTop, v[len(v)-1])
		v = charttest.YTicks(t, use)
		useTop = append(useTop, v[len(v)-1])
	}
	if progressTop[0] != progressTop[1] || useTop[0] != useTop[1] {
		t.Errorf("progress panels top at %v, use panels at %v: want one scale each", progressTop, useTop)
	}
	if len(panels[4].All("mark")) == 0 {
		t.Error("devpick-naive's use panel marks no rejection")
	}
}

// largeScenario takes far longer than a test may to run to its end: a year
// of steady arrivals besides a large backlog.
func largeScenario(t *testing.T) *forecast.Scenario {
	t.Helper()
	sc := &forecast.Scenario{Name: "large", Duration: forecast.MaxDuration, Seed: 1,
		Provider: forecast.Provider{Profile: "openai", Latency: time.Second, DefaultMaxTokens: 1000,
			Limits: governor.Limits{governor.RPM: 100_000, governor.TPM: 100_000_000}},
		Flows: []forecast.Flow{
			{Name: "backlog", Weight: 1, BatchMax: 1, Backlog: 300_000, ItemInputTokens: 10, ItemOutputTokens: 10, ItemMaxTokens: 10},
			{Name: "steady", Weight: 1, BatchMax: 2, ArrivalsPerDay: 1500, ItemInputTokens: 10, ItemOutputTokens: 10, ItemMaxTokens: 10},
		}}
	if err := sc.Validate(); err != nil {
		t.Fatal(err)
	}
	return sc
}

// cancelAfter is a trace writer that cancels a run after n lines and then
// counts the lines written after that.
type cancelAfter struct {
	n, after int
	cancel   func()
}

func (c *cancelAfter) Write(p []byte) (int, error) {
	if c.n > 0 {
		if c.n--; c.n == 0 {
			c.cancel()
		}
	} else {
		c.after++
	}
	return len(p), nil
}

// eventsPerCheck is how many events a replay runs between two looks at its
// context (forecast's checkEvery).
const eventsPerCheck = 4096

// TestBenchCancelled: every policy's run stops soon after its context ends,
// on a scenario far too large to finish in a test, and the error is
// context.Canceled.
func TestBenchCancelled(t *testing.T) {
	t.Parallel()
	sc := largeScenario(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, sc, Policies, Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled before the start: %v", err)
	}
	for _, name := range append(append([]string(nil), Policies...), ExtraPolicies...) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			w := &cancelAfter{n: 1000, cancel: cancel}
			_, err := Run(ctx, sc, []string{name}, Options{Trace: w})
			if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "policy "+name+" stopped at") {
				t.Fatalf("error = %v, want context.Canceled naming the policy", err)
			}
			if w.n != 0 {
				t.Fatalf("the run ended before it was cancelled: %v", err)
			}
			// A run checks its context every few thousand events, so only a
			// few thousand requests can follow the cancel; the whole run has
			// hundreds of thousands.
			if w.after > 4*eventsPerCheck {
				t.Errorf("%d requests after the cancel", w.after)
			}
		})
	}
}

// TestBenchSeriesFromTrace: the chart's hourly series, kept per hour during
// the run, equal what the trace of every request gives.
func TestBenchSeriesFromTrace(t *testing.T) {
	t.Parallel()
	sc := load(t, "groq-faults.yaml")
	var buf bytes.Buffer
	rep, err := Run(context.Background(), sc, Policies, Options{Trace: &buf})
	if err != nil {
		t.Fatal(err)
	}
	hours := int(sc.Duration.Hours())
	type want struct {
		done map[string][]float64
		use  map[string][]float64
	}
	got := map[string]*want{}
	lines := bufio.NewScanner(&buf)
	for lines.Scan() {
		var rec forecast.TraceRecord
		if err := json.Unmarshal(lines.Bytes(), &rec); err != nil {
			t.Fatal(err)
		}
		wt := got[rec.Policy]
		if wt == nil {
			wt = &want{done: map[string][]float64{}, use: map[string][]float64{}}
			got[rec.Policy] = wt
		}
		if rec.Status != 200 || rec.Fault != "" {
			continue
		}
		if wt.done[rec.Flow] == nil {
			wt.done[rec.Flow] = make([]float64, hours)
		}
		// Completions count in the hour whose end is at or after them.
		for h := max(int(math.Ceil(rec.End/3600))-1, 0); h < hours; h++ {
			wt.done[rec.Flow][h] += float64(rec.Items)
		}
		for l := range governor.NumLimits {
			if lim := sc.Provider.Limits[l]; lim > 0 {
				if wt.use[l.String()] == nil {
					wt.use[l.String()] = make([]float64, hours)
				}
				wt.use[l.String()][int(rec.End/3600)] += float64(rec.Charged.On(l)) / (float64(lim) * float64(time.Hour) / float64(l.Period()))
			}
		}
	}
	for _, r := range rep.Results {
		wt := got[r.Policy]
		for _, fs := range r.Series.Flows {
			for h, v := range fs.Done {
				if w := wt.done[fs.Name]; w != nil && w[h] != v || w == nil && v != 0 {
					t.Fatalf("%s %s hour %d: done %v, trace says %v", r.Policy, fs.Name, h, v, w)
				}
			}
		}
		for _, ls := range r.Series.Limits {
			for h, v := range ls.Use {
				if w := wt.use[ls.Name]; math.Abs(w[h]-v) > 1e-9 {
					t.Fatalf("%s %s hour %d: use %v, trace says %v", r.Policy, ls.Name, h, v, w[h])
				}
			}
		}
	}
}
