package governor

import (
	"context"
	"log/slog"
	"strconv"
	"time"
)

// MaxWait is the longest a provider can make a call wait on limit l,
// whatever it asks for: l's period plus MaxLag. Package llm bounds the
// waits it reads with it; a Governor holds l for at most l's period plus
// its own Config.Lag.
func (l Limit) MaxWait() time.Duration { return l.Period() + MaxLag }

// learned is what a provider said about one limit's allowance, and the
// largest call it accepted on it.
type learned struct {
	allowance int64 // announced, at most the ceiling (0: none in force)
	until     int64 // when it lapses unless the provider says it again
	// accepted is the charge on the limit of the largest call the provider
	// accepted (settled as a success) lately, at acceptedAt; it floors an
	// announced allowance until LearnFor after that.
	accepted, acceptedAt int64
}

// ceiling is the most l's allowance can be: the configured allowance, or
// MaxCost for a limit not configured.
func (g *Governor) ceiling(l Limit) int64 {
	if c := g.cfg.Limits[l]; c > 0 {
		return c
	}
	return MaxCost
}

// floor is the least an announced allowance can lower l's to at now:
// 1/LearnFloor of the configured allowance (rounded up), and the largest
// call the provider accepted on l within LearnFor, whichever is more.
func (g *Governor) floor(l Limit, now int64) int64 {
	conf := g.cfg.Limits[l]
	f := conf / LearnFloor
	if conf%LearnFloor != 0 {
		f++
	}
	if lr := &g.learned[l]; lr.accepted > 0 && now < addSat(lr.acceptedAt, int64(LearnFor)) {
		f = max(f, lr.accepted)
	}
	return min(f, g.ceiling(l))
}

// allowance is l's allowance in force at now: the one the provider last
// announced, raised to its floor, while it is in force (see LearnFor);
// else the configured one.
func (g *Governor) allowance(l Limit, now int64) int64 {
	lr := &g.learned[l]
	if lr.allowance == 0 || g.cfg.Limits[l] > 0 && now >= lr.until {
		return g.cfg.Limits[l]
	}
	return max(lr.allowance, g.floor(l, now))
}

// announce takes allowance v, which the provider announced for l at now in
// source. relimit must follow.
func (g *Governor) announce(now int64, l Limit, v int64, source string) {
	lr := &g.learned[l]
	conf := g.cfg.Limits[l]
	if conf > 0 && v >= conf {
		// The configured allowance is a ceiling: the provider may lower
		// it, never raise it. Saying it (or more) ends a lower one.
		if v > conf {
			g.notice(now, notice{Limit: l, LimitKnown: true, Kind: "limit", Source: source, Said: v, Used: conf})
		}
		lr.allowance = 0
		return
	}
	if v > MaxCost {
		g.notice(now, notice{Limit: l, LimitKnown: true, Kind: "limit", Source: source, Said: v, Used: MaxCost})
		v = MaxCost
	}
	if f := g.floor(l, now); v < f {
		g.notice(now, notice{Limit: l, LimitKnown: true, Kind: "limit", Source: source, Said: v, Used: f})
	}
	lr.allowance, lr.until = v, addSat(now, int64(LearnFor))
}

// accept records that the provider accepted a call charged c at now, which
// may raise the floor of an announced allowance and puts more of the
// pacers' start credit in hand.
func (g *Governor) accept(now int64, c Cost) {
	for l := range NumLimits {
		v, lr := c.On(l), &g.learned[l]
		if v > 0 && (v >= lr.accepted || now >= addSat(lr.acceptedAt, int64(LearnFor))) {
			lr.accepted, lr.acceptedAt = v, now
		}
	}
	if g.relearnAt != never {
		g.relimit(now)
	}
	g.release(c)
}

// relearn applies, at now, what changed by itself since: an announced
// allowance that lapsed, the call flooring one that aged out.
func (g *Governor) relearn(now int64) {
	if now >= g.relearnAt {
		g.relimit(now)
	}
}

// relimit puts the allowances in force at now into g.limits, and sets
// relearnAt to the next time one of them may change by itself: an
// announced allowance lapses, or the call that floors it ages out.
func (g *Governor) relimit(now int64) {
	next := int64(never)
	changed := false
	for l := range NumLimits {
		lr := &g.learned[l]
		conf := g.cfg.Limits[l]
		if lr.allowance > 0 && conf > 0 && now >= lr.until {
			lr.allowance = 0
		}
		if lr.allowance > 0 {
			if conf > 0 {
				next = min(next, lr.until)
			}
			if end := addSat(lr.acceptedAt, int64(LearnFor)); lr.accepted > 0 && end > now {
				next = min(next, end)
			}
		}
		if a := g.allowance(l, now); a != g.limits[l] {
			g.limits[l] = a
			changed = true
		}
	}
	g.relearnAt = next
	if changed {
		g.setPacers()
		g.setScales()
		g.broadcast()
	}
}

// recheck drops, at now, each allowance a provider announced that a call
// costing c can never fit, for a limit nobody configured, when the provider
// last said it LearnFor ago or more: the call goes instead of being
// refused, and the provider's answer to it is the check. It reports
// whether it dropped one; relimit has then put the allowances in force
// into g.limits, and where c fits must be looked at again.
func (g *Governor) recheck(now int64, c Cost) bool {
	dropped := false
	for l := range NumLimits {
		lr := &g.learned[l]
		if lr.allowance > 0 && g.cfg.Limits[l] == 0 && now >= lr.until && c.On(l) > g.limits[l] {
			lr.allowance = 0
			dropped = true
		}
	}
	if dropped {
		g.relimit(now)
	}
	return dropped
}

// notice is a value a provider announced that sluice did not take as said:
// an allowance above the configured one, over MaxCost or below its floor
// (see LearnFloor), a reset or a wait longer than its limit's period plus
// lag, or a call's usage beyond what the call could have used (Usage). A
// Governor logs each it makes through Config.Logger, and those given to
// NoteWait, at most once per limit, kind and source every NoticeEvery (a
// value above its bound and one below it count as two kinds).
type notice struct {
	Limit      Limit
	LimitKnown bool // false: a wait that named no limit
	// Kind is what the value was: "limit" (an allowance), "reset" (when
	// a window frees), "retry-after" (a wait before calling again), or
	// "input" or "output" (a call's usage of tokens; LimitKnown is false).
	Kind string
	// Source says where the provider said it: a header's name,
	// "429 body", "retry-after".
	Source string
	// Said is what the provider said, Used what was used instead: for
	// "limit" an allowance, for a reset or a wait nanoseconds, for a usage
	// tokens.
	Said, Used int64
	// Reserved is, for a usage, what the call was admitted with: its
	// input estimate, or the output reserved for it.
	Reserved int64
}

// noticeKey is what makes two notices the same for logging: a value above
// its bound and one below it are two kinds.
type noticeKey struct {
	limit  Limit
	known  bool
	kind   string
	source string
	above  bool
}

// maxNoticed bounds how many kinds of notice the governor remembers having
// logged: there are a few dozen (limits × kinds × a profile's headers),
// unless a caller makes up sources.
const maxNoticed = 256

// NoteWait logs a wait the provider asked for, naming no limit, that was
// cut to wait before it reached the governor (package llm bounds the waits
// it reads from a provider, and llm.Feedback notes those the governor does
// not hold), as the governor logs the values it bounds itself: at most once
// every NoticeEvery.
func (in inside) NoteWait(now time.Time, asked, wait time.Duration) {
	g := in.g
	g.mu.Lock()
	defer g.unlockAndLog()
	g.notice(now.UnixNano(), notice{Kind: "retry-after", Source: "retry-after", Said: int64(asked), Used: int64(wait)})
}

// notice queues n for logging when g.mu is released, unless one like it
// was logged within NoticeEvery. g.mu is held.
func (g *Governor) notice(now int64, n notice) {
	if n.Source == "" {
		n.Source = "headers"
	}
	k := noticeKey{n.Limit, n.LimitKnown, n.Kind, n.Source, n.Said > n.Used}
	if last, ok := g.noticed[k]; ok && now < addSat(last, int64(NoticeEvery)) {
		return
	}
	if len(g.noticed) >= maxNoticed {
		for k, last := range g.noticed {
			if now >= addSat(last, int64(NoticeEvery)) {
				delete(g.noticed, k)
			}
		}
		if len(g.noticed) >= maxNoticed {
			return
		}
	}
	g.noticed[k] = now
	g.notices = append(g.notices, n)
}

// unlockAndLog releases g.mu, then logs the notices made while it was
// held: a slow log never holds the governor.
func (g *Governor) unlockAndLog() {
	ns := g.notices
	g.notices = nil
	g.mu.Unlock()
	for _, n := range ns {
		g.log(n)
	}
}

// log writes notice n to Config.Logger. An allowance above the configured
// one is an Info (configuring less than the key allows is common, to keep
// room for other users); every other bound is a Warn.
func (g *Governor) log(n notice) {
	level, msg := slog.LevelWarn, ""
	limit := "none"
	if n.LimitKnown {
		limit = n.Limit.String()
	}
	attrs := []slog.Attr{slog.String("key", g.cfg.Key), slog.String("limit", limit), slog.String("source", n.Source)}
	switch n.Kind {
	case "limit":
		conf := g.cfg.Limits[n.Limit]
		switch {
		case n.Said > n.Used && conf > 0:
			level, msg = slog.LevelInfo, "governor: ignored an allowance the provider announced above the configured one"
		case n.Said > n.Used:
			msg = "governor: capped an allowance the provider announced at governor.MaxCost"
		default:
			msg = "governor: raised an allowance the provider announced to its floor"
		}
		attrs = append(attrs, slog.Int64("said", n.Said), slog.Int64("used", n.Used), slog.Int64("configured", conf),
			slog.String("for", LearnFor.String()))
	case "input", "output":
		// A usage is a call's, not a limit's.
		msg = "governor: cut the " + n.Kind + " tokens the provider reported for a call to what the call could have used"
		attrs = append(attrs[:1], slog.String("source", n.Source), slog.Int64("said", n.Said), slog.Int64("used", n.Used),
			slog.Int64("reserved", n.Reserved))
	default:
		msg = "governor: cut a " + n.Kind + " the provider announced to its limit's period plus lag"
		if !n.LimitKnown {
			msg = "governor: cut a " + n.Kind + " the provider announced, naming no limit, to a day plus lag"
		}
		attrs = append(attrs, slog.String("said", seconds(n.Said)), slog.String("used", seconds(n.Used)))
	}
	g.cfg.Logger.LogAttrs(context.Background(), level, msg, attrs...)
}

// seconds writes a duration in nanoseconds as seconds, in full: a
// provider's "999999999" reads back as 999999999s, not as hours.
func seconds(ns int64) string {
	return strconv.FormatFloat(time.Duration(ns).Seconds(), 'f', -1, 64) + "s"
}
