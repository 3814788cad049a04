package metrics

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/health"
)

// The series read from the governors at scrape time.
var (
	limitUsedDesc = prometheus.NewDesc("sluice_limit_used",
		"Charged against the limit in its current window, including use by others seen in provider headers.",
		[]string{"key", "limit"}, nil)
	limitCapacityDesc = prometheus.NewDesc("sluice_limit_capacity",
		"The limit's allowance in force (as configured or as the provider reported it).",
		[]string{"key", "limit"}, nil)
	limitRemainingDesc = prometheus.NewDesc("sluice_limit_remaining",
		"What is left of the limit's allowance in its current window.",
		[]string{"key", "limit"}, nil)
	limitResetDesc = prometheus.NewDesc("sluice_limit_reset_seconds",
		"Seconds until everything the limit's window counts now has aged out of it (0 when it counts nothing).",
		[]string{"key", "limit"}, nil)
	limitPaceWaitDesc = prometheus.NewDesc("sluice_limit_pace_wait_seconds",
		"For a day limit paced over the day: seconds until its even pace lets the next call start (0: one may start now), however much of the day's allowance is left.",
		[]string{"key", "limit"}, nil)
	flowWaitingDesc = prometheus.NewDesc("sluice_flow_waiting",
		"Calls waiting for admission, by flow.",
		[]string{"key", "flow"}, nil)
	flowParkedDesc = prometheus.NewDesc("sluice_flow_parked",
		"Calls out of line whose places are kept for them (the gateway's requests answered 429), by flow.",
		[]string{"key", "flow"}, nil)
	flowShareDesc = prometheus.NewDesc("sluice_flow_share",
		"The flow's share of the key: its weight times 4 to the power of its priority.",
		[]string{"key", "flow"}, nil)
	flowWaitingOnDesc = prometheus.NewDesc("sluice_flow_waiting_on",
		"1 for what holds the flow's first waiting call back (a limit such as tpm, tpd pacing, a provider pause, its turn); absent when nothing waits.",
		[]string{"key", "flow", "on"}, nil)
	budgetDesc = prometheus.NewDesc("sluice_budget",
		"The key's budget in money (in the unit of its prices) per period: day (any 24 hours) or month (any 30 days).",
		[]string{"key", "period"}, nil)
	budgetSpentDesc = prometheus.NewDesc("sluice_budget_spent",
		"Money the key's calls cost in the budget's period, as settled (worst case while a call is under way).",
		[]string{"key", "period"}, nil)
	budgetRemainingDesc = prometheus.NewDesc("sluice_budget_remaining",
		"What is left of the key's budget in its period.",
		[]string{"key", "period"}, nil)
	flowSpendDesc = prometheus.NewDesc("sluice_flow_spend_total",
		"Money the flow's calls cost since the process started (in the unit of the key's prices), as settled; absent for a key without a price.",
		[]string{"key", "flow"}, nil)
	refusalsDesc = prometheus.NewDesc("sluice_governor_refusals_total",
		"Calls refused up front because they can never fit the limit, by flow and limit.",
		[]string{"key", "flow", "limit"}, nil)
)

// governorCollector reads every governor added to it at scrape time.
type governorCollector struct {
	mu   sync.Mutex
	govs []watched // in the order added
}

type watched struct {
	key string
	g   *governor.Governor
	now func() time.Time
}

func (c *governorCollector) add(g *governor.Governor, now func() time.Time) error {
	if g == nil {
		return errors.New("metrics: no governor")
	}
	key := g.Stats(now()).Key
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.govs {
		if w.g == g {
			return nil
		}
		if w.key == key {
			return fmt.Errorf("metrics: the series of key %q are already read from another governor: give each key its own name", key)
		}
	}
	c.govs = append(c.govs, watched{key: key, g: g, now: now})
	return nil
}

func (c *governorCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{limitUsedDesc, limitCapacityDesc, limitRemainingDesc, limitResetDesc, limitPaceWaitDesc,
		budgetDesc, budgetSpentDesc, budgetRemainingDesc, flowSpendDesc, flowWaitingDesc, flowParkedDesc, flowShareDesc, flowWaitingOnDesc, refusalsDesc} {
		ch <- d
	}
}

func (c *governorCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	govs := append([]watched(nil), c.govs...)
	c.mu.Unlock()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, w := range govs {
		now := w.now()
		st := w.g.Stats(now)
		for _, ls := range st.Limits {
			if ls.Max == 0 {
				continue
			}
			if ls.Limit.Budget() {
				period := "day"
				if ls.Limit == governor.MPM {
					period = "month"
				}
				gauge(budgetDesc, float64(ls.Max)/governor.Nano, w.key, period)
				gauge(budgetSpentDesc, float64(ls.Used)/governor.Nano, w.key, period)
				gauge(budgetRemainingDesc, float64(ls.Capacity)/governor.Nano, w.key, period)
				continue
			}
			l := ls.Limit.String()
			gauge(limitUsedDesc, float64(ls.Used), w.key, l)
			gauge(limitCapacityDesc, float64(ls.Max), w.key, l)
			gauge(limitRemainingDesc, float64(ls.Capacity), w.key, l)
			gauge(limitResetDesc, max(ls.ResetAt.Sub(now), 0).Seconds(), w.key, l)
			if !ls.PacedUntil.IsZero() {
				gauge(limitPaceWaitDesc, max(ls.PacedUntil.Sub(now), 0).Seconds(), w.key, l)
			}
		}
		for _, f := range st.Flows {
			gauge(flowWaitingDesc, float64(f.Waiting), w.key, f.Name)
			gauge(flowParkedDesc, float64(f.Parked), w.key, f.Name)
			gauge(flowShareDesc, f.Share, w.key, f.Name)
			if st.Priced {
				ch <- prometheus.MustNewConstMetric(flowSpendDesc, prometheus.CounterValue, float64(f.Tokens.Money)/governor.Nano, w.key, f.Name)
			}
			if f.WaitingOn.Kind != "" {
				gauge(flowWaitingOnDesc, 1, w.key, f.Name, f.WaitingOn.String())
			}
			for l := range governor.NumLimits {
				// Every limit in force has its count, 0 included, so that
				// the first refusal is an increase.
				if n := f.Refusals[l]; n > 0 || st.Limits[l].Max > 0 {
					ch <- prometheus.MustNewConstMetric(refusalsDesc, prometheus.CounterValue, float64(n), w.key, f.Name, l.String())
				}
			}
		}
	}
}

// The series read from the backfills' health at scrape time.
var (
	itemsDoneDesc = prometheus.NewDesc("sluice_flow_items_done",
		"Items the backfill has processed (saved or parked), as of the health monitor's last poll.",
		[]string{"flow"}, nil)
	itemsRemainingDesc = prometheus.NewDesc("sluice_flow_items_remaining",
		"Items still eligible (pending, or rejected and waiting to be retried), as of the health monitor's last poll.",
		[]string{"flow"}, nil)
	stateDesc = prometheus.NewDesc("sluice_flow_state",
		"1 for the backfill's health state, 0 for each of the others (progressing, waiting-for-quota, failing, stalled, idle, done).",
		[]string{"flow", "state"}, nil)
	lastProgressDesc = prometheus.NewDesc("sluice_flow_last_progress_timestamp_seconds",
		"When the backfill last processed an item, in seconds since the Unix epoch; absent when it never did.",
		[]string{"flow"}, nil)
	failuresDesc = prometheus.NewDesc("sluice_flow_consecutive_failures",
		"Runs of the backfill that failed in a row, up to its last.",
		[]string{"flow"}, nil)
)

// States are the health states sluice_flow_state has a series for.
var States = []health.State{health.Progressing, health.WaitingForQuota, health.Failing, health.Stalled, health.Idle, health.Done}

// healthCollector reads the backfills' health at scrape time.
type healthCollector struct {
	mu    sync.Mutex
	flows func() []health.Flow
}

func (c *healthCollector) set(flows func() []health.Flow) error {
	if flows == nil {
		return errors.New("metrics: no health source")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.flows != nil {
		return errors.New("metrics: the registry already reads the health of another monitor")
	}
	c.flows = flows
	return nil
}

func (c *healthCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{itemsDoneDesc, itemsRemainingDesc, stateDesc, lastProgressDesc, failuresDesc} {
		ch <- d
	}
}

func (c *healthCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	flows := c.flows
	c.mu.Unlock()
	if flows == nil {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, f := range flows() {
		gauge(itemsDoneDesc, float64(f.Done), f.Name)
		gauge(itemsRemainingDesc, float64(f.Remaining), f.Name)
		for _, s := range States {
			v := 0.0
			if f.State == s {
				v = 1
			}
			gauge(stateDesc, v, f.Name, string(s))
		}
		if !f.LastProgressAt.IsZero() {
			gauge(lastProgressDesc, float64(f.LastProgressAt.UnixNano())/1e9, f.Name)
		}
		gauge(failuresDesc, float64(f.ConsecutiveFailures), f.Name)
	}
}

// The series of the flows of every process of a cluster, as the process
// last read them from the store (every few seconds, in memory at scrape
// time).
var (
	clusterWaitingDesc = prometheus.NewDesc("sluice_cluster_flow_waiting",
		"Calls waiting for admission on each process of the cluster, by flow and process (node), as that process last said.",
		[]string{"key", "flow", "node"}, nil)
	clusterAdmittedDesc = prometheus.NewDesc("sluice_cluster_flow_admitted",
		"Calls admitted by each process of the cluster since it started, by flow and process (node), as that process last said.",
		[]string{"key", "flow", "node"}, nil)
	clusterTokensDesc = prometheus.NewDesc("sluice_cluster_flow_tokens",
		"Tokens charged to the calls each process of the cluster admitted since it started, as settled, by flow, process (node) and kind (input, output).",
		[]string{"key", "flow", "node", "kind"}, nil)
)

// ClusterFlow is one flow on one process of a cluster (see AddCluster).
type ClusterFlow struct {
	Node, Flow        string
	Waiting, Admitted int64
	Input, Output     int64
}

// clusterCollector reads the cluster flows of every key added to it.
type clusterCollector struct {
	mu   sync.Mutex
	keys []clusterSource
}

type clusterSource struct {
	key   string
	flows func() []ClusterFlow
}

func (c *clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{clusterWaitingDesc, clusterAdmittedDesc, clusterTokensDesc} {
		ch <- d
	}
}

func (c *clusterCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	keys := append([]clusterSource(nil), c.keys...)
	c.mu.Unlock()
	gauge := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	for _, k := range keys {
		for _, f := range k.flows() {
			gauge(clusterWaitingDesc, f.Waiting, k.key, f.Flow, f.Node)
			gauge(clusterAdmittedDesc, f.Admitted, k.key, f.Flow, f.Node)
			gauge(clusterTokensDesc, f.Input, k.key, f.Flow, f.Node, "input")
			gauge(clusterTokensDesc, f.Output, k.key, f.Flow, f.Node, "output")
		}
	}
}
