package health

import (
	"context"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/store"
)

// History is where a Monitor records what each job did in each interval,
// and deletes what is older than Config.HistoryKeep: store.Store's
// RecordSamples and PruneHistory, so a store is passed as it is. `sluice
// report` reads the samples back.
type History interface {
	RecordSamples(ctx context.Context, samples []store.Sample) error
	PruneHistory(ctx context.Context, before time.Time) (int64, error)
}

// Counters are a job's governor flow's totals since the process started:
// calls admitted, tokens charged, money spent, and the provider's
// rejections and the governor's up-front refusals by limit; and, as things
// stand at the time they are read, whether the key has a price and the
// budgets in money that apply to the flow.
type Counters struct {
	Admitted int64
	Tokens   int64
	// Money is what the flow's calls cost, in billionths of the unit of
	// the key's prices (governor.Nano): the flow's Tokens.Money. 0 on a
	// key without a price.
	Money      int64
	Rejections map[string]int64
	Refusals   map[string]int64
	// Priced says the key has a price (governor.Stats.Priced).
	Priced bool
	// Budgets are the flow's own budgets (governor.FlowStats.Budget and
	// Spent) and its key's (the limits mpd and mpm in force, with their
	// use), each with what it has counted: what a sample says of them.
	Budgets []store.SampleBudget
}

// CountersOf reads flow's totals on g at now.
func CountersOf(g *governor.Governor, flow string, now time.Time) Counters {
	st := g.Stats(now)
	for _, f := range st.Flows {
		if f.Name != flow {
			continue
		}
		c := Counters{Admitted: f.Admitted, Tokens: f.Tokens.Tokens(), Money: f.Tokens.Money, Priced: st.Priced}
		for l := range governor.NumLimits {
			if n := f.Rejections[l]; n > 0 {
				c.Rejections = addCount(c.Rejections, l.String(), n)
			}
			if n := f.Refusals[l]; n > 0 {
				c.Refusals = addCount(c.Refusals, l.String(), n)
			}
		}
		for _, l := range [...]governor.Limit{governor.MPD, governor.MPM} {
			if max := f.Budget[l]; max > 0 {
				c.Budgets = append(c.Budgets, store.SampleBudget{Limit: l.String(), Max: max, Spent: f.Spent[l]})
			}
		}
		for _, l := range [...]governor.Limit{governor.MPD, governor.MPM} {
			if ls := st.Limits[l]; ls.Max > 0 {
				c.Budgets = append(c.Budgets, store.SampleBudget{Limit: l.String(), Key: true, Max: ls.Max, Spent: ls.Used})
			}
		}
		return c
	}
	return Counters{}
}

func addCount(m map[string]int64, k string, n int64) map[string]int64 {
	if m == nil {
		m = map[string]int64{}
	}
	m[k] += n
	return m
}

// base is what a job's last recorded sample counted up to.
type base struct {
	done int64
	c    Counters
}

// record writes, once every HistoryEvery, a sample per job of what it did
// since the last: the first poll only takes the counts to start from. A
// job found stalled at any poll of the interval has its sample say so, with
// that poll's reason, whatever its state at the end: a history must not
// lose a stall because it was short. A sample that cannot be written is
// logged, and its interval is counted in the next.
func (m *Monitor) record(ctx context.Context, now time.Time, jobs []store.Job, views []View) {
	if m.cfg.History == nil {
		return
	}
	for _, v := range views {
		if _, seen := m.stalled[v.Name]; !seen && v.State == Stalled {
			if m.stalled == nil {
				m.stalled = map[string]View{}
			}
			m.stalled[v.Name] = v
		}
	}
	if !m.lastSample.IsZero() && now.Sub(m.lastSample) < m.cfg.HistoryEvery {
		return
	}
	byName := make(map[string]View, len(views))
	for _, v := range views {
		byName[v.Name] = v
	}
	next := make(map[string]base, len(jobs))
	var samples []store.Sample
	for _, j := range jobs {
		cur := base{done: addSat(max(j.Saved, 0), max(j.Parked, 0))}
		if m.cfg.Counters != nil {
			cur.c = m.cfg.Counters(j.Name, now)
		}
		next[j.Name] = cur
		prev, ok := m.bases[j.Name]
		if !ok || m.lastSample.IsZero() {
			continue
		}
		v := byName[j.Name]
		if st, ok := m.stalled[j.Name]; ok && v.State != Stalled {
			v.State, v.Reason = Stalled, st.Reason+"; then "+string(v.State)
		}
		samples = append(samples, store.Sample{
			At: now, Flow: j.Name, Source: m.cfg.HistorySource, State: string(v.State), Reason: v.Reason,
			Done: max(cur.done-prev.done, 0), DoneFrom: prev.done, DoneTo: cur.done, Remaining: max(v.Remaining, 0),
			Admitted: grew(cur.c.Admitted, prev.c.Admitted), Tokens: grew(cur.c.Tokens, prev.c.Tokens),
			Rejections: since(cur.c.Rejections, prev.c.Rejections), Refusals: since(cur.c.Refusals, prev.c.Refusals),
			Money: grew(cur.c.Money, prev.c.Money), Priced: cur.c.Priced, Budgets: cur.c.Budgets,
		})
	}
	if len(samples) > 0 {
		if err := m.cfg.History.RecordSamples(ctx, samples); err != nil {
			m.cfg.Logger.Warn("sluice: cannot record the jobs' history; the next sample counts this interval too", "err", err)
			return
		}
	}
	m.bases, m.lastSample = next, now
	clear(m.stalled)
}

// prune deletes History's samples older than HistoryKeep, at the first
// poll and then at most once every PruneEvery of the monitor's clock. Poll
// calls it once the poll's views are published: a first prune of a long
// history takes a while, and the views need not wait for it. Every process
// prunes every source's samples: the delete is the same whoever runs it. One
// that fails is logged and tried again at the next poll.
func (m *Monitor) prune(ctx context.Context, now time.Time) {
	if m.cfg.History == nil || m.cfg.HistoryKeep < 0 || !m.lastPrune.IsZero() && now.Sub(m.lastPrune) < PruneEvery {
		return
	}
	n, err := m.cfg.History.PruneHistory(ctx, now.Add(-m.cfg.HistoryKeep))
	if err != nil {
		m.cfg.Logger.Warn("sluice: cannot delete the jobs' history older than its keep; trying again at the next poll",
			"keep", m.cfg.HistoryKeep, "err", err)
		return
	}
	if n > 0 {
		m.cfg.Logger.Info("sluice: deleted old history samples", "samples", n, "keep", m.cfg.HistoryKeep)
	}
	m.lastPrune = now
}

// grew is what a counter grew by from prev to cur; a counter that went down
// (a new process) counts from zero.
func grew(cur, prev int64) int64 {
	if cur < prev {
		return max(cur, 0)
	}
	return cur - prev
}

// since is cur − prev per key, the keys that grew only. Counters that went
// down (a new process) count from zero.
func since(cur, prev map[string]int64) map[string]int64 {
	var out map[string]int64
	for k, n := range cur {
		if d := grew(n, prev[k]); d > 0 {
			out = addCount(out, k, d)
		}
	}
	return out
}
