package governor

// pacer spreads a day limit over the day (GCRA): each unit charged moves the
// theoretical arrival time tat on by period/limit, and a call may start when
// tat is at most burst ahead of now. So a backlog spends the day's budget at
// an even pace instead of in the morning, and an urgent call arriving later
// still finds room within one call's worth of time.
type pacer struct {
	on      bool
	perUnit float64 // nanoseconds per unit
	burst   int64   // nanoseconds
	tat     int64
}

func (g *Governor) setPacers() {
	for _, l := range []Limit{RPD, TPD} {
		p := &g.pace[l]
		lim := g.limits[l]
		p.on = lim > 0 && g.cfg.DayBurst > 0
		if !p.on {
			continue
		}
		p.perUnit = float64(l.Period()) / (float64(lim) * g.cfg.DayPace)
		p.burst = int64(g.cfg.DayBurst)
	}
}

func (p *pacer) readyAt() int64 { return subSat(p.tat, p.burst) }

// take and giveBack saturate: a charge made under a larger allowance and
// given back after the provider reported a smaller one is worth more time
// than an int64 holds.
func (p *pacer) take(now int64, n int64) {
	p.tat = addSat(max(p.tat, now), nanos(float64(n)*p.perUnit))
}

func (p *pacer) giveBack(n int64) {
	p.tat = subSat(p.tat, nanos(float64(n)*p.perUnit))
}
