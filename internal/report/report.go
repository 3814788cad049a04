// Package report answers, from sluice's own records, what happened over a
// window and which change helped: per job, the items done per hour, the
// provider's rejections and the governor's refusals by the limit they
// named, the intervals it was stalled, and, on a key with a price, the
// money its calls cost against its budgets; and per change of the
// effective configuration, each job's rate in the stretch before it and
// after it.
//
// Its input is what the health monitor samples every minute (store.Sample:
// items done, calls admitted, money spent, rejections and refusals in the
// interval, the state and the budgets at its end) and the configuration
// versions each process records when it starts (store.ConfigVersion).
package report

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/internal/store"
)

// Report is one window's account.
type Report struct {
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	// Clock names the clock of the window when it is not the wall
	// clock's now: the app's, as its records leave it.
	Clock string `json:"clock,omitempty"`
	// Jobs are the flows and backfills sampled in the window, by name.
	Jobs map[string]*Job `json:"jobs"`
	// Versions are the configurations in effect in the window: the one in
	// effect at Since, then every change, oldest first.
	Versions []Version `json:"versions"`
	// Changes is, for each version recorded within the window, each job's
	// rate before and after it.
	Changes []Change `json:"changes"`
}

// Job is one job's window.
type Job struct {
	Done        int64   `json:"done"`
	RatePerHour float64 `json:"rate_per_hour"`
	// Hours are the items done, rejections and refusals in each hour of
	// the window, oldest first; an hour without a sample counts zero.
	Hours []Hour `json:"hours"`
	// Rejections are the provider's rejections by the limit they named;
	// Refusals the governor's up-front refusals of requests that can
	// never fit, by limit.
	Rejections map[string]int64 `json:"rejections"`
	Refusals   map[string]int64 `json:"refusals"`
	// Stalls are the intervals the job was stalled.
	Stalls []Interval `json:"stalls"`
	// State is its state at the last sample.
	State string `json:"state"`
	// Spend is what the job's calls cost, when its key has a price; nil
	// (absent) on a key without one.
	Spend *Spend `json:"spend,omitempty"`
}

// Hour is one hour of a job.
type Hour struct {
	At         time.Time        `json:"at"`
	Done       int64            `json:"done"`
	Rejections map[string]int64 `json:"rejections,omitempty"`
	Refusals   map[string]int64 `json:"refusals,omitempty"`
	// MoneyNano is what the job's calls cost in the hour, in billionths
	// of the unit of its key's prices (governor.Nano); absent when
	// nothing was spent.
	MoneyNano int64 `json:"money_nano,omitempty"`
}

// Spend is a job's money over the window, on a key with a price. Amounts
// are in billionths of the unit of the key's prices (governor.Nano: 1.84
// of the unit is 1,840,000,000), exact, as the governor counts them.
type Spend struct {
	// SpentNano is what the job's calls cost in the window; PerDayNano
	// that per 24 hours of the window.
	SpentNano  int64 `json:"spent_nano"`
	PerDayNano int64 `json:"per_day_nano"`
	// Budgets are the budgets that applied to the job at its last sample
	// in the window, with what each had counted then: the flow's own
	// first, then its key's; per day before per month. Empty without a
	// budget.
	Budgets []BudgetUse `json:"budgets"`
}

// BudgetUse is one budget of a job's and what it had counted.
type BudgetUse struct {
	// Of is "flow" for the job's flow's own budget, "key" for its key's,
	// which all the key's flows share (so its spend is theirs together).
	Of string `json:"of"`
	// Limit is the governor's limit: "mpd" or "mpm"; Period its period:
	// "day" (any 24 hours) or "month" (any 30 days).
	Limit  string `json:"limit"`
	Period string `json:"period"`
	// BudgetNano is the budget and SpentNano what it had counted at At,
	// in its period up to then; Ratio is the one over the other (0.92:
	// 92 %).
	BudgetNano int64     `json:"budget_nano"`
	SpentNano  int64     `json:"spent_nano"`
	Ratio      float64   `json:"ratio"`
	At         time.Time `json:"at"`
}

// Interval is a stretch of time in one state.
type Interval struct {
	From   time.Time `json:"from"`
	To     time.Time `json:"to"`
	Reason string    `json:"reason,omitempty"`
}

// Version is a configuration version.
type Version struct {
	At     time.Time `json:"at"`
	Source string    `json:"source"`
	Hash   string    `json:"hash"`
	Code   string    `json:"code"`
	// Diff lists what changed from the source's previous version
	// ("flows.title.max_tokens: 0 → 60"); empty for the first.
	Diff []string `json:"diff"`
}

// Change is a version recorded within the window and what followed it.
type Change struct {
	Version
	// Jobs is each job's rate in the stretch before the change (since the
	// previous change or the window's start) and after it (until the next
	// change or the window's end), in items per hour.
	Jobs map[string]Delta `json:"jobs"`
	// Helped names the jobs for which this change is the one their rate
	// rose the most across, of the changes it rose by half or more (or from
	// nothing) across: the change their recovery is attributed to.
	Helped []string `json:"helped"`
}

// Delta is a job's rate across a change.
type Delta struct {
	Before     float64 `json:"before"`
	After      float64 `json:"after"`
	Difference float64 `json:"difference"`
	// Stalled says the job was stalled at some time in the stretch before
	// or after.
	StalledBefore bool `json:"stalled_before"`
	StalledAfter  bool `json:"stalled_after"`
}

// Make builds the report of [since, until) from the samples and versions
// of that window (versions as store.ConfigVersions returns them: the one in
// effect at since first, per source).
func Make(since, until time.Time, samples []store.Sample, versions []store.ConfigVersion) (*Report, error) {
	if !until.After(since) {
		return nil, fmt.Errorf("report window: %s is not after %s", until.Format(time.RFC3339), since.Format(time.RFC3339))
	}
	since, until = since.UTC(), until.UTC()
	r := &Report{Since: since, Until: until, Jobs: map[string]*Job{}, Versions: []Version{}, Changes: []Change{}}
	hours := int(math.Ceil(until.Sub(since).Hours()))
	inStall := map[string]bool{} // by job: its last sample was stalled
	spends := map[string]*Spend{}
	// Samples come in time order, as store.Samples gives them.
	for _, s := range samples {
		if s.At.Before(since) || !s.At.Before(until) {
			continue
		}
		j := r.Jobs[s.Flow]
		if j == nil {
			j = &Job{Hours: make([]Hour, hours), Rejections: map[string]int64{}, Refusals: map[string]int64{}, Stalls: []Interval{}}
			for h := range j.Hours {
				j.Hours[h].At = since.Add(time.Duration(h) * time.Hour)
			}
			r.Jobs[s.Flow] = j
		}
		h := &j.Hours[int(s.At.Sub(since)/time.Hour)]
		h.Done += s.Done
		j.Done += s.Done
		h.MoneyNano = addSat(h.MoneyNano, s.Money)
		if s.Priced || s.Money > 0 || len(s.Budgets) > 0 {
			sp := spends[s.Flow]
			if sp == nil {
				sp = &Spend{Budgets: []BudgetUse{}}
				spends[s.Flow] = sp
			}
			sp.SpentNano = addSat(sp.SpentNano, s.Money)
			sp.Budgets = budgetUses(s)
		}
		h.Rejections = addCounts(h.Rejections, s.Rejections)
		h.Refusals = addCounts(h.Refusals, s.Refusals)
		j.Rejections = addCounts(j.Rejections, s.Rejections)
		j.Refusals = addCounts(j.Refusals, s.Refusals)
		// A stall starts at the first stalled sample and ends at the next
		// sample in another state (or the window's end).
		j.State = s.State
		switch stalled := s.State == "stalled"; {
		case stalled && !inStall[s.Flow]:
			j.Stalls = append(j.Stalls, Interval{From: s.At, To: until, Reason: s.Reason})
		case !stalled && inStall[s.Flow]:
			j.Stalls[len(j.Stalls)-1].To = s.At
		}
		inStall[s.Flow] = s.State == "stalled"
	}
	for name, j := range r.Jobs {
		j.RatePerHour = rate(j.Done, until.Sub(since))
		if sp := spends[name]; sp != nil {
			sp.PerDayNano = int64(math.Round(float64(sp.SpentNano) * float64(24*time.Hour) / float64(until.Sub(since))))
			j.Spend = sp
		}
	}
	r.versions(versions)
	r.changes(samples)
	return r, nil
}

// budgetUses lists the budgets of sample s: the flow's own first, then
// its key's, per day before per month.
func budgetUses(s store.Sample) []BudgetUse {
	out := []BudgetUse{}
	for _, key := range []bool{false, true} {
		for _, limit := range []string{"mpd", "mpm"} {
			for _, b := range s.Budgets {
				if b.Key != key || b.Limit != limit || b.Max <= 0 {
					continue
				}
				u := BudgetUse{Of: "flow", Limit: b.Limit, Period: "day", BudgetNano: b.Max, SpentNano: b.Spent,
					Ratio: math.Round(float64(b.Spent)/float64(b.Max)*1e4) / 1e4, At: s.At.UTC()}
				if key {
					u.Of = "key"
				}
				if limit == "mpm" {
					u.Period = "month"
				}
				out = append(out, u)
			}
		}
	}
	return out
}

// addSat is x+y, at most the largest int64; both are at least 0.
func addSat(x, y int64) int64 {
	if y > 0 && x > math.MaxInt64-y {
		return math.MaxInt64
	}
	return x + y
}

func addCounts(into, from map[string]int64) map[string]int64 {
	if len(from) == 0 {
		return into
	}
	if into == nil {
		into = map[string]int64{}
	}
	for k, n := range from {
		into[k] += n
	}
	return into
}

func rate(done int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return math.Round(float64(done)/d.Hours()*100) / 100
}

// versions lists the versions in effect in the window, each with what
// changed from its source's previous one.
func (r *Report) versions(vs []store.ConfigVersion) {
	vs = slices.Clone(vs)
	sort.SliceStable(vs, func(i, j int) bool { return vs[i].At.Before(vs[j].At) })
	last := map[string]store.ConfigVersion{}
	for _, v := range vs {
		if !v.At.Before(r.Until) {
			continue
		}
		ver := Version{At: v.At.UTC(), Source: v.Source, Hash: v.Hash, Code: v.Code, Diff: []string{}}
		if prev, ok := last[v.Source]; ok {
			ver.Diff = diff(prev, v)
		}
		last[v.Source] = v
		r.Versions = append(r.Versions, ver)
		if !v.At.Before(r.Since) {
			r.Changes = append(r.Changes, Change{Version: ver, Jobs: map[string]Delta{}, Helped: []string{}})
		}
	}
}

// changes measures each job's rate around each change, and attributes each
// job's largest rise to its change.
func (r *Report) changes(samples []store.Sample) {
	bounds := []time.Time{r.Since}
	for _, c := range r.Changes {
		bounds = append(bounds, c.At)
	}
	bounds = append(bounds, r.Until)
	type span struct {
		done    map[string]int64
		stalled map[string]bool
	}
	spans := make([]span, len(bounds)-1)
	for i := range spans {
		spans[i] = span{map[string]int64{}, map[string]bool{}}
	}
	for _, s := range samples {
		if s.At.Before(r.Since) || !s.At.Before(r.Until) {
			continue
		}
		// The span whose [start, end) holds the sample; a sample at a
		// change's instant is the interval that ended then: before it.
		i := sort.Search(len(bounds), func(k int) bool { return !bounds[k].Before(s.At) }) - 1
		i = min(max(i, 0), len(spans)-1)
		spans[i].done[s.Flow] += s.Done
		if s.State == "stalled" {
			spans[i].stalled[s.Flow] = true
		}
	}
	best := map[string]int{} // job → change with its largest rise
	for ci := range r.Changes {
		c := &r.Changes[ci]
		before, after := spans[ci], spans[ci+1]
		dBefore, dAfter := bounds[ci+1].Sub(bounds[ci]), bounds[ci+2].Sub(bounds[ci+1])
		for name := range r.Jobs {
			d := Delta{Before: rate(before.done[name], dBefore), After: rate(after.done[name], dAfter),
				StalledBefore: before.stalled[name], StalledAfter: after.stalled[name]}
			d.Difference = math.Round((d.After-d.Before)*100) / 100
			c.Jobs[name] = d
			if !rose(d) {
				continue
			}
			if b, ok := best[name]; !ok || d.Difference > r.Changes[b].Jobs[name].Difference {
				best[name] = ci
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(best)) {
		c := &r.Changes[best[name]]
		c.Helped = append(c.Helped, name)
	}
}

// rose says whether a job's rate rose across a change by enough to be a
// recovery or a speed-up, not noise: from nothing to something, or by half
// or more.
func rose(d Delta) bool {
	return d.After > 0 && d.After >= 1.5*d.Before
}

// diff lists what differs between two versions: the code, and each leaf of
// the configuration JSON that was added, removed or changed, by its path.
func diff(a, b store.ConfigVersion) []string {
	out := []string{}
	if a.Code != b.Code {
		out = append(out, fmt.Sprintf("code: %s → %s", orNone(a.Code), orNone(b.Code)))
	}
	var x, y any
	if json.Unmarshal(a.Config, &x) != nil || json.Unmarshal(b.Config, &y) != nil {
		return out
	}
	fa, fb := map[string]string{}, map[string]string{}
	flatten("", x, fa)
	flatten("", y, fb)
	for _, k := range slices.Sorted(maps.Keys(union(fa, fb))) {
		va, okA := fa[k]
		vb, okB := fb[k]
		switch {
		case !okA:
			out = append(out, fmt.Sprintf("%s: added %s", k, vb))
		case !okB:
			out = append(out, fmt.Sprintf("%s: removed (was %s)", k, va))
		case va != vb:
			out = append(out, fmt.Sprintf("%s: %s → %s", k, va, vb))
		}
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func union(a, b map[string]string) map[string]bool {
	u := map[string]bool{}
	for k := range a {
		u[k] = true
	}
	for k := range b {
		u[k] = true
	}
	return u
}

// flatten records each leaf of v under its path. A list of objects with a
// "name" is keyed by the names (flows.title.weight), other lists by index.
func flatten(path string, v any, out map[string]string) {
	join := func(k string) string {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			flatten(join(k), e, out)
		}
	case []any:
		for i, e := range t {
			key := fmt.Sprint(i)
			if m, ok := e.(map[string]any); ok {
				if n, ok := m["name"].(string); ok && n != "" {
					key = n
				}
			}
			flatten(join(key), e, out)
		}
	default:
		b, _ := json.Marshal(t)
		out[path] = strings.TrimSpace(string(b))
	}
}
