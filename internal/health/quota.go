package health

import (
	"time"

	"github.com/sluice-dev/sluice/governor"
)

// QuotaOf reads what flow waits for on g at now: whether calls of it wait,
// what holds the first back, and when that ends. When the governor gives no
// end — the first call waits for its turn behind other flows, or on a
// window that never frees enough — it is the estimate for a one-request
// call of the flow, else the limit's ResetAt.
func QuotaOf(g *governor.Governor, flow string, now time.Time) Quota {
	st := g.Stats(now)
	for _, f := range st.Flows {
		if f.Name != flow || f.Waiting == 0 {
			continue
		}
		b := f.WaitingOn
		q := Quota{Waiting: true, Limit: b.String(), Until: b.Until}
		if q.Until.IsZero() {
			if d := g.EstimateFor(now, flow, governor.Cost{Requests: 1}); d > 0 {
				q.Until = now.Add(d)
			} else if b.Kind == "limit" || b.Kind == "pacing" {
				q.Until = st.Limits[b.Limit].ResetAt
			}
		}
		return q
	}
	return Quota{}
}
