package metrics

import (
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// The series of what callers did after the gateway's own 429s.
var (
	clientRefusedDesc = prometheus.NewDesc("sluice_gateway_client_refused_total",
		"Chat requests the gateway itself answered 429 (their max wait ended, or its wait line was full), by flow and client key (its number in the configuration, 0 without client keys).",
		[]string{"key", "flow", "client"}, nil)
	clientRetriesDesc = prometheus.NewDesc("sluice_gateway_client_retries_total",
		"What became of the gateway's own 429s, by flow, client key and outcome: came_back (the same client key sent the same request again within the window), gave_up (it did not), untracked (refused while the tracked set was full: neither).",
		[]string{"key", "flow", "client", "outcome"}, nil)
	clientPendingDesc = prometheus.NewDesc("sluice_gateway_client_refused_pending",
		"Requests answered 429 by the gateway whose window to come back in is still open, by flow and client key.",
		[]string{"key", "flow", "client"}, nil)
)

// ClientRetries is what the requests of one client key in one flow did
// after the gateway answered them 429 itself — its max wait ended or its
// line was full; a provider's 429 passed on is not counted. A request
// came back when the same client key sent the same request (the same body,
// or the same Idempotency-Key) again within the gateway's retry window of
// the 429, and gave up when the window closed first. Refused = CameBack +
// GaveUp + Untracked + Pending, but for a request refused again after it
// came back, which counts once more.
type ClientRetries struct {
	Flow string `json:"flow"`
	// Client is the client key's number in the gateway's configuration (1
	// for the first); 0 when no client keys are configured, so that every
	// caller is one. The key itself is never shown.
	Client  int   `json:"client"`
	Refused int64 `json:"refused"`
	// CameBack and GaveUp count the refused requests sent again within the
	// window and those not.
	CameBack int64 `json:"came_back"`
	GaveUp   int64 `json:"gave_up"`
	// Untracked counts the refusals not followed, because the gateway
	// followed as many as it may already: neither came back nor gave up.
	Untracked int64 `json:"untracked"`
	// Pending counts the refused requests whose window is still open.
	Pending int64 `json:"pending"`
}

// retriesCollector reads the client retries of every key added to it.
type retriesCollector struct {
	mu   sync.Mutex
	keys []retriesSource
}

type retriesSource struct {
	key  string
	read func() []ClientRetries
}

// AddClientRetries makes the registry read, at every scrape, what the
// gateway's callers on key did after its 429s (in memory). A key is read
// from one source; a second fails.
func (s *Set) AddClientRetries(key string, read func() []ClientRetries) error {
	if read == nil {
		return errors.New("metrics: no client retries source")
	}
	c := s.retries
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range c.keys {
		if k.key == key {
			return fmt.Errorf("metrics: the client retries of key %q are already read from another source", key)
		}
	}
	c.keys = append(c.keys, retriesSource{key: key, read: read})
	return nil
}

func (c *retriesCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{clientRefusedDesc, clientRetriesDesc, clientPendingDesc} {
		ch <- d
	}
}

func (c *retriesCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	keys := append([]retriesSource(nil), c.keys...)
	c.mu.Unlock()
	for _, k := range keys {
		for _, r := range k.read() {
			client := strconv.Itoa(r.Client)
			counter := func(v int64, outcome string) {
				ch <- prometheus.MustNewConstMetric(clientRetriesDesc, prometheus.CounterValue, float64(v), k.key, r.Flow, client, outcome)
			}
			ch <- prometheus.MustNewConstMetric(clientRefusedDesc, prometheus.CounterValue, float64(r.Refused), k.key, r.Flow, client)
			counter(r.CameBack, "came_back")
			counter(r.GaveUp, "gave_up")
			counter(r.Untracked, "untracked")
			ch <- prometheus.MustNewConstMetric(clientPendingDesc, prometheus.GaugeValue, float64(r.Pending), k.key, r.Flow, client)
		}
	}
}

// ClientRetries returns, by key, what the gateway's callers did after its
// 429s, as a scrape reads it now: the dashboard shows it beside the flows.
func (s *Set) ClientRetries() map[string][]ClientRetries {
	c := s.retries
	c.mu.Lock()
	keys := append([]retriesSource(nil), c.keys...)
	c.mu.Unlock()
	out := make(map[string][]ClientRetries, len(keys))
	for _, k := range keys {
		if rows := k.read(); len(rows) > 0 {
			out[k.key] = rows
		}
	}
	return out
}
