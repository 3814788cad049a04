package governor

import (
	"bytes"
	"errors"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

// quiet is a logger for tests whose governors bound values on purpose and
// do not look at the log.
var quiet = slog.New(slog.DiscardHandler)

// logBuffer collects a governor's log lines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.FieldsFunc(l.b.String(), func(r rune) bool { return r == '\n' })
}

func newLogBuffer() (*logBuffer, *slog.Logger) {
	lb := &logBuffer{}
	return lb, slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// announced is a snapshot in which the provider says limit l's allowance
// is v, with all of it left, from source.
func announced(l Limit, v int64, source string) Snapshot {
	var s Snapshot
	s[l] = Observed{Known: true, Limit: v, Remaining: v, Source: source}
	return s
}

// An allowance the provider announces is taken only within bounds: never
// above the configured one, never below its floor, never over MaxCost for a
// limit none configures; and each value not taken is logged, naming it.
func TestAnnouncedAllowanceIsBounded(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		limit     Limit
		announced int64
		want      int64  // the allowance in force after it
		logged    string // in the log line ("" for none)
	}{
		{"lower, above the floor", TPM, 600, 600, ""},
		{"the configured one", TPM, 1000, 1000, ""},
		{"TPM 1 is raised to a tenth of the configured", TPM, 1, 100, "said=1 used=100"},
		{"TPM 1e15 is ignored", TPM, 1e15, 1000, "said=1000000000000000 used=1000"},
		{"TPM 9.2e18 is ignored", TPM, 9.2e18, 1000, "said=9200000000000000000 used=1000"},
		{"TPM MaxInt64 is ignored", TPM, math.MaxInt64, 1000, "said=9223372036854775807 used=1000"},
		{"RPM, not configured, is taken", RPM, 30, 30, ""},
		{"RPM 1e15, not configured, is capped at MaxCost", RPM, 1e15, MaxCost, "said=1000000000000000 used=1099511627776"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			lb, logger := newLogBuffer()
			g := mustNew(t, Config{Key: "groq", Limits: Limits{TPM: 1000}, Logger: logger})
			g.Observe(t0, announced(tt.limit, tt.announced, "X-Ratelimit-Limit-Tokens"))
			if got := g.Limits()[tt.limit]; got != tt.want {
				t.Errorf("%s in force %d after the provider said %d, want %d", tt.limit, got, tt.announced, tt.want)
			}
			st := g.Stats(t0).Limits[tt.limit]
			if st.Max != tt.want || st.Configured != map[Limit]int64{TPM: 1000}[tt.limit] {
				t.Errorf("stats %+v, want Max %d", st, tt.want)
			}
			if learned := tt.want != st.Configured; learned != !st.LearnedUntil.IsZero() ||
				(learned && !st.LearnedUntil.Equal(t0.Add(LearnFor))) {
				t.Errorf("LearnedUntil %v with Max %d and Configured %d", st.LearnedUntil, st.Max, st.Configured)
			}
			lines := lb.lines()
			if tt.logged == "" {
				if len(lines) != 0 {
					t.Errorf("logged %q for a value taken as said", lines)
				}
				return
			}
			if len(lines) != 1 || !strings.Contains(lines[0], tt.logged) || !strings.Contains(lines[0], "source=X-Ratelimit-Limit-Tokens") ||
				!strings.Contains(lines[0], "limit="+tt.limit.String()) || !strings.Contains(lines[0], "key=groq") {
				t.Errorf("log %q, want one line with %q, the limit, the key and the header", lines, tt.logged)
			}
		})
	}
}

// A huge allowance announced in the answers to a burst's calls does not
// lift the configured cap: what gets through in the minute is at most it.
func TestAnnouncedHugeAllowanceKeepsTheCap(t *testing.T) {
	t.Parallel()
	for _, huge := range []int64{1e15, 9.2e18, math.MaxInt64} {
		g := mustNew(t, Config{Limits: Limits{TPM: 1000}, Logger: quiet})
		call := Cost{Requests: 1, Input: 60, Output: 43}
		var rs []*Reservation
		for range 40 {
			rs = append(rs, mustReserve(t, g, t0, "burst", call))
		}
		var through int64
		answered := map[*Reservation]bool{}
		for now := t0; now.Before(at(time.Minute)); now = now.Add(time.Second) {
			g.Advance(now)
			for _, r := range rs {
				if r.Admitted() && !answered[r] {
					answered[r] = true
					through += r.Cost().Tokens()
					r.Settle(now, Cost{Input: call.Input})
					r.Observe(now, announced(TPM, huge, "X-Ratelimit-Limit-Tokens"))
				}
			}
		}
		if through > 1000 {
			t.Errorf("TPM %d announced: %d tokens got through a tpm=1000 key within the minute", huge, through)
		}
		if through < 900 {
			t.Errorf("TPM %d announced: only %d tokens got through in the minute", huge, through)
		}
	}
}

// An announced TPM of 1 lowers the configured 1,000 to its floor — the
// largest call the provider just accepted, at least a tenth — for LearnFor:
// calls that fit the floor go on within the minute, larger ones are
// refused until it lapses, and then the configured allowance is back.
func TestAnnouncedTinyAllowanceHoldsWithinTheFloor(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{Limits: Limits{TPM: 1000}, Logger: quiet})
	call := Cost{Requests: 1, Input: 150, Output: 100}
	first := mustReserve(t, g, t0, "f", call)
	g.Advance(t0)
	first.Settle(t0, Cost{})
	first.Observe(t0, announced(TPM, 1, "X-Ratelimit-Limit-Tokens"))
	if got := g.Limits()[TPM]; got != 250 {
		t.Fatalf("TPM in force %d after the provider accepted a 250-token call and said 1, want 250", got)
	}
	// A call like the one accepted goes on, within the limit's period.
	next := mustReserve(t, g, at(time.Second), "f", call)
	when := g.Advance(at(time.Second))
	if !next.Admitted() {
		if when.IsZero() || when.After(at(time.Minute)) {
			t.Fatalf("a 250-token call waits until %v under the floor", when.Sub(t0))
		}
		g.Advance(when)
	}
	if !next.Admitted() {
		t.Fatal("a call that fits the floor is not admitted within the minute")
	}
	next.Settle(at(2*time.Second), Cost{})
	// A larger one cannot fit the announced allowance while it is in force.
	var tl *TooLargeError
	if _, err := g.Reserve(at(2*time.Second), "f", Cost{Requests: 1, Input: 500}); !errors.As(err, &tl) || tl.Max != 250 {
		t.Fatalf("a 500-token call under TPM 250: %v, want a TooLargeError naming 250", err)
	}
	// LearnFor after the provider said it, the configured allowance is back.
	back := t0.Add(LearnFor)
	if r, err := g.Reserve(back, "f", Cost{Requests: 1, Input: 900}); err != nil {
		t.Fatalf("a 900-token call %v after the announcement: %v", LearnFor, err)
	} else if g.Advance(back); !r.Admitted() {
		t.Fatal("a 900-token call not admitted once the configured allowance is back")
	}
	if st := g.Stats(back).Limits[TPM]; st.Max != 1000 || !st.LearnedUntil.IsZero() {
		t.Errorf("stats after the lapse: %+v", st)
	}
}

// With no call accepted, an announced TPM of 1 still leaves a tenth of
// the configured allowance; a call that failed without a verdict (Fault)
// is not proof the provider accepted it.
func TestFloorWithoutAcceptedCalls(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{Limits: Limits{TPM: 1000}, Logger: quiet})
	r := mustReserve(t, g, t0, "f", Cost{Requests: 1, Input: 400})
	g.Advance(t0)
	r.Fault(t0, Cost{})
	g.Observe(t0, announced(TPM, 1, "429 body"))
	if got := g.Limits()[TPM]; got != 100 {
		t.Fatalf("TPM in force %d, want a tenth of 1000", got)
	}
}

// The provider saying it again keeps the announced allowance in force; once
// it stops, the allowance lapses LearnFor after it last said it, and a call
// the lowered allowance held back is admitted then, not later.
func TestAnnouncedAllowanceLapsesUnlessRenewed(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{Limits: Limits{TPD: 10000}, DayBurst: -1, Logger: quiet})
	g.Observe(t0, announced(TPD, 2000, "429 body"))
	g.Observe(at(5*time.Minute), announced(TPD, 2000, "429 body"))
	big := mustReserve(t, g, at(5*time.Minute), "f", Cost{Requests: 1, Input: 2000})
	g.Advance(at(5 * time.Minute))
	if !big.Admitted() {
		t.Fatal("the first call not admitted")
	}
	small := mustReserve(t, g, at(6*time.Minute), "f", Cost{Requests: 1, Input: 100})
	next := g.Advance(at(6 * time.Minute))
	lapse := at(5*time.Minute + LearnFor)
	if small.Admitted() || !next.Equal(lapse) {
		t.Fatalf("admitted %v, next %v; want held by TPD 2,000 until it lapses at %v", small.Admitted(), next.Sub(t0), lapse.Sub(t0))
	}
	if g.Advance(lapse); !small.Admitted() {
		t.Fatal("not admitted when the announced allowance lapsed")
	}
	if got := g.Limits()[TPD]; got != 10000 {
		t.Errorf("TPD in force %d after the lapse, want the configured 10000", got)
	}

	// A limit none configures, learned the same way, stays: the key is
	// known to have it, and dropping it would cost a refusal from the
	// provider every LearnFor. It is re-checked only when it is what
	// stands in the way: LearnFor after the provider last said it, a
	// call that can never fit it is sent instead of refused.
	g2 := mustNew(t, Config{Logger: quiet})
	g2.Observe(t0, announced(TPM, 1, "429 body"))
	if got := g2.Limits()[TPM]; got != 1 {
		t.Fatalf("TPM %d, want 1", got)
	}
	if got := g2.Stats(t0.Add(2 * LearnFor)).Limits[TPM]; got.Max != 1 {
		t.Fatalf("TPM %d after 2×LearnFor with nothing refused, want the announced 1 still", got.Max)
	}
	var tl *TooLargeError
	if _, err := g2.Reserve(t0.Add(LearnFor-time.Second), "f", Cost{Requests: 1, Input: 100}); !errors.As(err, &tl) {
		t.Fatalf("a 100-token call before LearnFor: %v, want it refused as never fitting TPM 1", err)
	}
	r, err := g2.Reserve(t0.Add(LearnFor), "f", Cost{Requests: 1, Input: 100})
	if err != nil {
		t.Fatalf("a 100-token call LearnFor after TPM 1 was said: %v, want it sent to re-check the allowance", err)
	}
	if g2.Advance(t0.Add(LearnFor)); !r.Admitted() {
		t.Fatal("the re-checking call not admitted")
	}
	if got := g2.Limits()[TPM]; got != 0 {
		t.Fatalf("TPM %d once re-checked, want none until the provider says one again", got)
	}
}

// A call already in line when the provider announced an allowance it can
// never fit, for a limit nobody configured, and still in line LearnFor
// later, is sent as the re-check rather than left waiting for ever.
func TestQueuedCallRechecksAnAnnouncedAllowance(t *testing.T) {
	t.Parallel()
	g := mustNew(t, Config{Logger: quiet})
	g.Observe(t0, announced(TPM, 1000, "x-ratelimit-limit-tokens"))
	first := mustReserve(t, g, t0, "f", Cost{Requests: 1, Input: 1000})
	g.Advance(t0)
	if !first.Admitted() {
		t.Fatal("the first call, which fits TPM 1,000, not admitted")
	}
	queued := mustReserve(t, g, t0, "f", Cost{Requests: 1, Input: 500})
	g.Advance(t0)
	if queued.Admitted() {
		t.Fatal("the second call admitted while TPM 1,000 is full")
	}
	g.Observe(t0, announced(TPM, 100, "x-ratelimit-limit-tokens"))
	g.Advance(at(LearnFor))
	if !queued.Admitted() {
		t.Fatalf("the queued 500-token call not admitted LearnFor after TPM 100 was said (limits %v)", g.Limits())
	}
}

// A wait the provider asks for holds the limit it names for at most its
// period plus Lag, and a limit none configures (the key) as long; the
// value it asked for is logged.
func TestRetryAfterIsBoundedByThePeriod(t *testing.T) {
	t.Parallel()
	const lag = 2 * time.Second
	in2099 := time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC).Sub(t0)
	tests := []struct {
		name   string
		limits Limits
		limit  Limit
		asked  time.Duration
		want   time.Duration // held until t0 + want
		logged string
	}{
		{"TPM, 10^9 s", Limits{TPM: 1000}, TPM, 1e9 * time.Second, time.Minute + lag, "said=1000000000s used=62s"},
		{"TPM, a date in 2099", Limits{TPM: 1000}, TPM, in2099, time.Minute + lag, "used=62s"},
		{"TPM, the longest Duration", Limits{TPM: 1000}, TPM, math.MaxInt64, time.Minute + lag, "used=62s"},
		{"TPM, 30 s", Limits{TPM: 1000}, TPM, 30 * time.Second, 30 * time.Second, ""},
		{"TPM, negative: a period", Limits{TPM: 1000}, TPM, -time.Hour, time.Minute, ""},
		{"TPD, 10^9 s", Limits{TPD: 100000}, TPD, 1e9 * time.Second, 24*time.Hour + lag, "said=1000000000s used=86402s"},
		{"RPM, not configured: the key", Limits{TPM: 1000}, RPM, 1e9 * time.Second, time.Minute + lag, "said=1000000000s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			lb, logger := newLogBuffer()
			g := mustNew(t, Config{Limits: tt.limits, Lag: lag, DayBurst: -1, Logger: logger})
			in(g).Rejected(t0, tt.limit, tt.asked)
			probe := mustReserve(t, g, t0, "f", Cost{Requests: 1, Input: 10})
			if next := g.Advance(t0); probe.Admitted() || !next.Equal(t0.Add(tt.want)) {
				t.Fatalf("admitted %v, next %v; want held until %v", probe.Admitted(), next.Sub(t0), tt.want)
			}
			if g.Advance(t0.Add(tt.want)); !probe.Admitted() {
				t.Fatalf("still held after %v", tt.want)
			}
			lines := lb.lines()
			if tt.logged == "" && len(lines) != 0 {
				t.Errorf("logged %q for a wait within bounds", lines)
			}
			if tt.logged != "" && (len(lines) != 1 || !strings.Contains(lines[0], tt.logged) || !strings.Contains(lines[0], "limit="+tt.limit.String())) {
				t.Errorf("log %q, want one line with %q", lines, tt.logged)
			}
		})
	}
}

// A reset the provider announces holds someone else's use of the key for at
// most the limit's period plus Lag.
func TestResetIsBoundedByThePeriod(t *testing.T) {
	t.Parallel()
	lb, logger := newLogBuffer()
	g := mustNew(t, Config{Limits: Limits{TPM: 10000}, Lag: time.Second, Logger: logger})
	var s Snapshot
	s[TPM] = Observed{Known: true, Limit: 10000, Remaining: 0, Reset: 1e9 * time.Second, Source: "X-Ratelimit-Limit-Tokens"}
	g.Observe(t0, s)
	probe := mustReserve(t, g, t0, "f", Cost{Requests: 1, Input: 10})
	if next := g.Advance(t0); probe.Admitted() || !next.Equal(at(61*time.Second)) {
		t.Fatalf("admitted %v, next %v; want held 61s", probe.Admitted(), next.Sub(t0))
	}
	if lines := lb.lines(); len(lines) != 1 || !strings.Contains(lines[0], "said=1000000000s used=61s") {
		t.Errorf("log %q", lines)
	}
}

// The same bounded value is logged once per limit, kind and source every
// NoticeEvery, not once per answer.
func TestNoticesAreLoggedOncePerInterval(t *testing.T) {
	t.Parallel()
	lb, logger := newLogBuffer()
	g := mustNew(t, Config{Limits: Limits{TPM: 1000, RPM: 10}, Logger: logger})
	for i := range 100 {
		g.Observe(at(time.Duration(i)*time.Second), announced(TPM, 1e15, "X-Ratelimit-Limit-Tokens"))
	}
	if n := len(lb.lines()); n != 1 {
		t.Fatalf("%d lines for 100 answers within NoticeEvery, want 1", n)
	}
	g.Observe(at(time.Minute), announced(TPM, 1e15, "429 body"))                 // another source
	g.Observe(at(time.Minute), announced(RPM, 1e15, "X-Ratelimit-Limit-Tokens")) // another limit
	g.Observe(at(time.Minute), announced(TPM, 1, "X-Ratelimit-Limit-Tokens"))    // below the floor
	g.Observe(at(2*time.Minute), announced(TPM, 2, "X-Ratelimit-Limit-Tokens"))  // below it again
	g.Observe(at(NoticeEvery), announced(TPM, 1e15, "X-Ratelimit-Limit-Tokens")) // NoticeEvery later
	lines := lb.lines()
	if len(lines) != 5 {
		t.Fatalf("log %q, want 5 lines", lines)
	}
	if !strings.Contains(lines[1], "source=\"429 body\"") || !strings.Contains(lines[2], "limit=rpm") ||
		!strings.Contains(lines[3], "floor") || !strings.Contains(lines[4], "said=1000000000000000") {
		t.Errorf("log %q", lines)
	}
	// NoteWait, for what package llm bounded before the governor saw it.
	in(g).NoteWait(at(NoticeEvery), 1e9*time.Second, MaxWait)
	in(g).NoteWait(at(NoticeEvery+time.Second), 1e9*time.Second, MaxWait)
	lines = lb.lines()
	if len(lines) != 6 || !strings.Contains(lines[5], "limit=none") || !strings.Contains(lines[5], "said=1000000000s used=86460s") {
		t.Errorf("log %q, want one more line for the noted wait", lines)
	}
}
