package progress

import (
	"math"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/store"
)

func TestOf(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 5, 4, 40, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		f     health.Flow
		total int64
		ratio float64
		left  time.Duration
	}{
		{"no items", health.Flow{}, 0, 0, 0},
		{"measured", health.Flow{Done: 20, Remaining: 568, RatePerHour: 4}, 588, 20.0 / 588, 142 * time.Hour},
		{"no rate: no time left", health.Flow{Done: 20, Remaining: 568}, 588, 20.0 / 588, 0},
		{"nothing left", health.Flow{Done: 5, RatePerHour: 3}, 5, 1, 0},
		{"further than ten years", health.Flow{Remaining: 1_000_000, RatePerHour: 0.1}, 1_000_000, 0, 0},
		{"negative counts are none", health.Flow{Done: -3, Remaining: -1, RatePerHour: -2}, 0, 0, 0},
		{"the total saturates", health.Flow{Done: math.MaxInt64, Remaining: 5}, math.MaxInt64, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := Of(tc.f, now)
			if g.Total != tc.total || math.Abs(g.Ratio-tc.ratio) > 1e-12 || g.Left != tc.left {
				t.Errorf("Of(%+v) = total %d, ratio %v, left %s; want %d, %v, %s", tc.f, g.Total, g.Ratio, g.Left, tc.total, tc.ratio, tc.left)
			}
			if want := now.Add(tc.left); tc.left > 0 && !g.ETA.Equal(want) || tc.left == 0 && !g.ETA.IsZero() {
				t.Errorf("ETA %s with %s left at %s", g.ETA, g.Left, now)
			}
		})
	}
}

// The time left is the monitor's ETA, read at the moment it judged the
// job: the API's ETA and the pages' agree.
func TestOfAgreesWithTheMonitor(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 5, 4, 40, 0, 0, time.UTC)
	rate := health.NewSampler(time.Hour, time.Minute)
	rate.Add(now.Add(-37*time.Minute), 100)
	rate.Add(now, 163) // 102.16… an hour, reported as 102.2
	v := health.Evaluate(store.Job{Name: "summary", Saved: 163, Pending: 907, MonitoringSince: now.Add(-time.Hour)}, 0, health.Quota{}, rate, now)
	if g := Of(v.Flow, now); !g.ETA.Equal(v.ETA) || g.RatePerHour != v.RatePerHour {
		t.Errorf("Of: ETA %s at %v/h, the monitor's %s at %v/h", g.ETA, g.RatePerHour, v.ETA, v.RatePerHour)
	}
}

func TestText(t *testing.T) {
	t.Parallel()
	g := Of(health.Flow{Done: 1431, Remaining: 587, RatePerHour: 12.25}, time.Time{})
	for _, tc := range []struct{ got, want string }{
		{g.Counts(), "1,431 / 2,018 (71%)"},
		{g.Bar(), "[##############......] 1,431 / 2,018 (71%)"},
		{g.LeftText(), "47h 55m at 12.3/h"}, // 587 at 12.25 an hour: 47.9 h
		{Percent(20.0 / 588), "3.4%"},
		{Percent(math.NaN()), "—"},
		{Rate(0), "—"},
		{Rate(4), "4.0"},
		{Span(95*time.Hour + 6*time.Minute), "3d 23h"},
		{Span(90 * time.Second), "1m 30s"},
		{Span(-90 * time.Second), "-1m 30s"},
		{Span(math.MinInt64), "-106751d 23h"}, // the time from year 1 to now, saturated
		{Of(health.Flow{}, time.Time{}).Bar(), "-"},
		{Of(health.Flow{}, time.Time{}).LeftText(), "—"},
	} {
		if tc.got != tc.want {
			t.Errorf("%q, want %q", tc.got, tc.want)
		}
	}
}
