package llm

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
)

// What a provider announces about limits and waits is input: bounded where
// it enters (here, for every caller of Classify and Client), then by the
// governor against its configuration (Feedback).

var boundsNow = time.Date(2026, 10, 19, 4, 0, 0, 0, time.UTC)

// rateLimitBody is a Groq 429 body naming limit l with allowance allowance.
func rateLimitBody(l governor.Limit, allowance int64) string {
	typ, code := Groq.RateLimitType(l)
	return string(Groq.ErrorBody(typ, code, Groq.RateLimitMessage("org_x", "m", l, allowance, allowance, 1, time.Second)+".", ""))
}

const noLimitBody = `{"error":{"message":"Too many requests, slow down.","type":"requests","code":"rate_limit_exceeded"}}`

func TestRetryAfterIsBoundedWhereItEnters(t *testing.T) {
	t.Parallel()
	in2099 := "Thu, 01 Jan 2099 00:00:00 GMT"
	tests := []struct {
		name   string
		status int
		header http.Header
		body   string
		want   time.Duration // RetryAfter
		asked  time.Duration // what the provider asked, kept for the log (0: within bounds)
	}{
		{"TPM, retry-after 10^9 s", 429, header("retry-after", "999999999"), rateLimitBody(governor.TPM, 1000),
			governor.TPM.MaxWait(), 999999999 * time.Second},
		{"TPM, a date in 2099", 429, header("retry-after", in2099), rateLimitBody(governor.TPM, 1000),
			governor.TPM.MaxWait(), time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC).Sub(boundsNow)},
		{"TPM, retry-after-ms 1e300", 429, header("retry-after-ms", "1e300"), rateLimitBody(governor.TPM, 1000),
			governor.TPM.MaxWait(), math.MaxInt64},
		{"TPM, the message says 9999h", 429, nil,
			`{"error":{"message":"Rate limit reached on tokens per minute (TPM): Limit 1000, Used 1000, Requested 1. Please try again in 9999h.","type":"tokens"}}`,
			governor.TPM.MaxWait(), maxWait},
		{"TPM, 30 s: as asked", 429, header("retry-after", "30"), rateLimitBody(governor.TPM, 1000), 30 * time.Second, 0},
		{"TPM, 90 s: within the minute plus MaxLag", 429, header("retry-after", "90"), rateLimitBody(governor.TPM, 1000), 90 * time.Second, 0},
		{"TPD, 10^9 s: a day plus MaxLag", 429, header("retry-after", "999999999"), rateLimitBody(governor.TPD, 100000),
			governor.TPD.MaxWait(), 999999999 * time.Second},
		{"no limit named, 10^9 s", 429, header("retry-after", "999999999"), noLimitBody, governor.MaxWait, 999999999 * time.Second},
		{"overload, 10^9 s", 503, header("retry-after", "999999999"), "", governor.MaxWait, 999999999 * time.Second},
		{"negative and NaN are no wait: the message's", 429, header("retry-after", "-5", "retry-after-ms", "NaN"),
			rateLimitBody(governor.TPM, 1000), time.Second, 0},
		{"a date in the past is no wait: the message's", 429, header("retry-after", "Mon, 01 Jan 2001 00:00:00 GMT"),
			rateLimitBody(governor.TPM, 1000), time.Second, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := Groq.classify(tt.status, tt.header, []byte(tt.body), boundsNow)
			if got, _ := RetryAfter(err); got != tt.want {
				t.Errorf("RetryAfter = %v, want %v (%v)", got, tt.want, err)
			}
			var (
				rl    *RateLimitError
				ov    *OverloadedError
				asked time.Duration
			)
			switch {
			case errors.As(err, &rl):
				asked = rl.asked
			case errors.As(err, &ov):
				asked = ov.asked
			default:
				t.Fatalf("classified as %T", err)
			}
			if asked != tt.asked {
				t.Errorf("asked %v, want %v", asked, tt.asked)
			}
		})
	}
}

// governorLog is a governor whose log lines a test reads.
type governorLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *governorLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *governorLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newLoggedGovernor(t *testing.T, cfg governor.Config) (*governor.Governor, *governorLog) {
	t.Helper()
	lg := &governorLog{}
	cfg.Logger = slog.New(slog.NewTextHandler(lg, nil))
	g, err := governor.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g, lg
}

// admitNow reserves a call costing c at now and admits it, or fails.
func admitNow(t *testing.T, g *governor.Governor, now time.Time, c governor.Cost) *governor.Reservation {
	t.Helper()
	r, err := g.Reserve(now, "f", c)
	if err != nil {
		t.Fatal(err)
	}
	g.Advance(now)
	if !r.Admitted() {
		t.Fatal("the call was not admitted")
	}
	return r
}

// A wait a provider asks for through Feedback holds the limit it names for
// at most its period plus the governor's lag, and the log names what it
// asked for.
func TestFeedbackBoundsTheWait(t *testing.T) {
	t.Parallel()
	const lag = time.Second
	tests := []struct {
		name   string
		header http.Header
		limit  governor.Limit
		limits governor.Limits
		want   time.Duration
		logged string
	}{
		{"TPM, retry-after 10^9 s", header("retry-after", "999999999"), governor.TPM, governor.Limits{governor.TPM: 1000},
			time.Minute + lag, "said=999999999s used=61s"},
		{"TPM, a date in 2099", header("retry-after", "Thu, 01 Jan 2099 00:00:00 GMT"), governor.TPM, governor.Limits{governor.TPM: 1000},
			time.Minute + lag, "said=" + strconv.FormatInt(int64(time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC).Sub(boundsNow)/time.Second), 10) + "s used=61s"},
		{"TPD, retry-after 10^9 s", header("retry-after", "999999999"), governor.TPD, governor.Limits{governor.TPD: 100000},
			24*time.Hour + lag, "said=999999999s used=86401s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g, lg := newLoggedGovernor(t, governor.Config{Key: "groq", Limits: tt.limits, Lag: lag, DayBurst: -1})
			call := governor.Cost{Requests: 1, Input: 10, Output: 10}
			r := admitNow(t, g, boundsNow, call)
			err := Groq.classify(429, tt.header, []byte(rateLimitBody(tt.limit, tt.limits[tt.limit])), boundsNow)
			Feedback(boundsNow, g, r, governor.Cost{}, governor.Snapshot{}, err)
			next, err := g.Reserve(boundsNow, "f", call)
			if err != nil {
				t.Fatal(err)
			}
			if at := g.Advance(boundsNow); next.Admitted() || !at.Equal(boundsNow.Add(tt.want)) {
				t.Fatalf("admitted %v, next try at %v; want held %v", next.Admitted(), at.Sub(boundsNow), tt.want)
			}
			if g.Advance(boundsNow.Add(tt.want)); !next.Admitted() {
				t.Fatalf("not admitted after %v", tt.want)
			}
			if log := lg.String(); !strings.Contains(log, tt.logged) || !strings.Contains(log, "limit="+tt.limit.String()) {
				t.Errorf("log %q, want a line naming %q", log, tt.logged)
			}
		})
	}

	// A wait that names no limit pauses the key as before (briefly); the
	// bound the caller sees is logged.
	g, lg := newLoggedGovernor(t, governor.Config{Limits: governor.Limits{governor.TPM: 1000}})
	r := admitNow(t, g, boundsNow, governor.Cost{Requests: 1, Input: 10})
	err := Groq.classify(429, header("retry-after", "999999999"), []byte(noLimitBody), boundsNow)
	Feedback(boundsNow, g, r, governor.Cost{}, governor.Snapshot{}, err)
	if log := lg.String(); !strings.Contains(log, "limit=none") || !strings.Contains(log, "said=999999999s used=86460s") {
		t.Errorf("log %q, want the wait that named no limit", log)
	}
}

// An allowance a provider announces, in its headers or in a 429 body,
// lowers a configured one only to its floor and for a while, and never
// raises it.
func TestFeedbackBoundsAnnouncedAllowances(t *testing.T) {
	t.Parallel()
	tokens := func(v string) http.Header {
		return header("x-ratelimit-limit-tokens", v, "x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "1s")
	}
	tests := []struct {
		name   string
		header http.Header // of a success
		status int         // else an error answer
		body   string
		want   governor.Limits
		logged string
	}{
		{"TPM 1 in the headers: floored at the call just accepted", tokens("1"), 0, "",
			governor.Limits{governor.TPM: 300}, "said=1 used=300"},
		{"TPM 1 in a 429 body: floored at a tenth", nil, 429, rateLimitBody(governor.TPM, 1),
			governor.Limits{governor.TPM: 100}, "source=\"429 body\" said=1 used=100"},
		{"TPM 1 in a 413 body", nil, 413, `{"error":{"message":"Request too large on tokens per minute (TPM): Limit 1, Requested 300","type":"tokens"}}`,
			governor.Limits{governor.TPM: 100}, "source=\"413 body\" said=1 used=100"},
		{"TPM 1e15 in the headers: ignored", tokens("1e15"), 0, "",
			governor.Limits{governor.TPM: 1000}, "said=1000000000000000 used=1000"},
		{"TPM 9.2e18 in the headers: ignored", tokens("9.2e18"), 0, "",
			governor.Limits{governor.TPM: 1000}, "said=9200000000000000000 used=1000"},
		{"TPM MaxInt64 in the headers: ignored", tokens("9223372036854775807"), 0, "",
			governor.Limits{governor.TPM: 1000}, "said=9223372036854775807 used=1000"},
		{"TPM 1e15 in a 429 body: ignored", nil, 429, rateLimitBody(governor.TPM, 1e15),
			governor.Limits{governor.TPM: 1000}, "said=1000000000000000 used=1000"},
		{"RPD, not configured, in the headers: taken", header("x-ratelimit-limit-requests", "14400", "x-ratelimit-remaining-requests", "14399"), 0, "",
			governor.Limits{governor.RPD: 14400, governor.TPM: 1000}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g, lg := newLoggedGovernor(t, governor.Config{Key: "groq", Limits: governor.Limits{governor.TPM: 1000}, DayBurst: -1})
			r := admitNow(t, g, boundsNow, governor.Cost{Requests: 1, Input: 200, Output: 100})
			if tt.header != nil {
				Feedback(boundsNow, g, r, governor.Cost{Input: 200, Output: 20}, Groq.Snapshot(tt.header, boundsNow), nil)
			} else {
				Feedback(boundsNow, g, r, governor.Cost{}, governor.Snapshot{}, Groq.classify(tt.status, nil, []byte(tt.body), boundsNow))
			}
			if got := g.Limits(); got != tt.want {
				t.Errorf("limits %v, want %v", got, tt.want)
			}
			log := lg.String()
			if tt.logged == "" && log != "" {
				t.Errorf("logged %q", log)
			}
			if !strings.Contains(log, tt.logged) {
				t.Errorf("log %q, want a line naming %q", log, tt.logged)
			}
			if tt.header != nil && tt.logged != "" && !strings.Contains(log, "source=X-Ratelimit-Limit-Tokens") {
				t.Errorf("log %q does not name the header", log)
			}
			// The configured allowance is back LearnFor later.
			if got := g.Stats(boundsNow.Add(governor.LearnFor)).Limits[governor.TPM].Max; got != 1000 {
				t.Errorf("TPM %d after %v, want the configured 1000", got, governor.LearnFor)
			}
		})
	}
}

// hostile is a fake provider whose answers announce what a test sets.
type hostile struct {
	mu     sync.Mutex
	answer func(w http.ResponseWriter)
	calls  int
}

func (h *hostile) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	h.mu.Lock()
	answer := h.answer
	h.calls++
	h.mu.Unlock()
	answer(w)
}

func (h *hostile) set(answer func(w http.ResponseWriter)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.answer = answer
}

// ok answers a completion with the given rate-limit headers.
func ok(kv ...string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		for i := 0; i+1 < len(kv); i += 2 {
			w.Header().Set(kv[i], kv[i+1])
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, hostileCompletion)
	}
}

// hostileCompletion reports the usage a call of keyOnClock.call reserves,
// so that a settled charge is the admitted one.
const hostileCompletion = `{"id":"c","object":"chat.completion","created":1760846400,"model":"gpt-4o",
"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],
"usage":{"prompt_tokens":60,"completion_tokens":40,"total_tokens":100}}`

// refuse answers a 429 with the given retry-after and body.
func refuse(retryAfter, body string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set("Retry-After", retryAfter)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, body)
	}
}

// keyOnClock is a governor on a tpm=1000 key, a Client to a hostile
// provider, and a virtual clock both read, moved by the test.
type keyOnClock struct {
	t    *testing.T
	g    *governor.Governor
	c    *Client
	log  *governorLog
	now  time.Time
	call governor.Cost
}

func newKeyOnClock(t *testing.T, p *hostile) *keyOnClock {
	t.Helper()
	srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request, _ map[string]any) { p.ServeHTTP(w, r) })
	k := &keyOnClock{t: t, now: boundsNow, call: governor.Cost{Requests: 1, Input: 60, Output: 40}}
	k.g, k.log = newLoggedGovernor(t, governor.Config{Key: "openai", Limits: governor.Limits{governor.TPM: 1000}, Lag: time.Second,
		Now: func() time.Time { return k.now }})
	k.c = newTestClient(t, Config{BaseURL: srv.URL, APIKey: testKey, Profile: OpenAI, Now: func() time.Time { return k.now }})
	return k
}

// ran is what keyOnClock.run let through: the calls admitted, the tokens
// charged for them once answered (a refused call's charge is given back),
// and when the first and last were admitted.
type ran struct {
	calls       int
	tokens      int64
	first, last time.Time
}

// run offers n calls at once at the clock's time and, second by second
// until the clock reaches until, makes each call admitted and feeds its
// answer back.
func (k *keyOnClock) run(n int, until time.Time) (out ran) {
	k.t.Helper()
	var waiting []*governor.Reservation
	for range n {
		r, err := k.g.Reserve(k.now, "f", k.call)
		if err != nil {
			k.t.Fatalf("at %v: %v", k.now.Sub(boundsNow), err)
		}
		waiting = append(waiting, r)
	}
	for ; !k.now.After(until) && len(waiting) > 0; k.now = k.now.Add(time.Second) {
		k.g.Advance(k.now)
		rest := waiting[:0]
		for _, r := range waiting {
			if !r.Admitted() {
				rest = append(rest, r)
				continue
			}
			if out.first.IsZero() {
				out.first = k.now
			}
			out.last = k.now
			out.calls++
			req := userRequest("gpt-4o", "hi")
			req.MaxTokens = int(k.call.Output)
			resp, err := k.c.Chat(context.Background(), req)
			if err != nil {
				Feedback(k.now, k.g, r, governor.Cost{}, governor.Snapshot{}, err)
				if d, _ := RetryAfter(err); d > governor.TPM.MaxWait() {
					k.t.Errorf("the client's error asks to wait %v", d)
				}
			} else {
				Feedback(k.now, k.g, r, resp.Usage.Governor(), resp.Snapshot, nil)
			}
			out.tokens += r.Cost().Tokens()
		}
		waiting = rest
	}
	for _, r := range waiting {
		r.Cancel(k.now)
	}
	return out
}

// End to end, through a Client and a hostile provider's headers: the
// configured TPM holds whatever the provider says, and traffic goes on
// within the limit's period, or within LearnFor.
func TestClientAgainstAHostileProvider(t *testing.T) {
	t.Parallel()
	for _, huge := range []string{"1e15", "9.2e18", "9223372036854775807"} {
		t.Run("TPM "+huge, func(t *testing.T) {
			t.Parallel()
			p := &hostile{answer: ok("x-ratelimit-limit-tokens", huge, "x-ratelimit-remaining-tokens", huge, "x-ratelimit-reset-tokens", "1s")}
			k := newKeyOnClock(t, p)
			// A burst of 40 calls of 100 tokens: what one minute lets through.
			if got := k.run(40, boundsNow.Add(59*time.Second)); got.tokens > 1000 || got.tokens < 900 {
				t.Errorf("%d tokens through a tpm=1000 key in the first minute", got.tokens)
			}
			if !strings.Contains(k.log.String(), "said="+map[string]string{"1e15": "1000000000000000", "9.2e18": "9200000000000000000"}[huge]) {
				t.Errorf("log %q does not name the value", k.log.String())
			}
		})
	}

	t.Run("retry-after 10^9 s and a date in 2099", func(t *testing.T) {
		t.Parallel()
		for _, ra := range []string{"999999999", "Thu, 01 Jan 2099 00:00:00 GMT"} {
			p := &hostile{answer: refuse(ra, rateLimitBody(governor.TPM, 1000))}
			k := newKeyOnClock(t, p)
			if got := k.run(1, k.now); got.calls != 1 || got.tokens != 0 {
				t.Fatalf("the first call: %+v, want made and refused", got)
			}
			p.set(ok())
			next := k.run(1, k.now.Add(10*time.Minute))
			if next.calls != 1 || next.first.Sub(boundsNow) > time.Minute+time.Second {
				t.Errorf("retry-after %s: the next call went at %v, want within a minute plus lag", ra, next.first.Sub(boundsNow))
			}
			if !strings.Contains(k.log.String(), "retry-after") {
				t.Errorf("log %q does not name the wait", k.log.String())
			}
		}
	})

	t.Run("TPM 1 in the headers, then in a 429 body", func(t *testing.T) {
		t.Parallel()
		p := &hostile{answer: ok("x-ratelimit-limit-tokens", "1", "x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "1s")}
		k := newKeyOnClock(t, p)
		got := k.run(30, boundsNow.Add(3*time.Minute))
		// The floor is the call the provider keeps accepting, 100 tokens:
		// the calls go on, one a minute, never refused up front.
		if got.calls < 3 || got.last.Before(boundsNow.Add(2*time.Minute)) {
			t.Errorf("%+v in 3 minutes: traffic stopped", got)
		}
		if !strings.Contains(k.log.String(), "said=1 used=100") {
			t.Errorf("log %q", k.log.String())
		}
		// The provider stops saying it: LearnFor later, TPM is 1000 again.
		p.set(refuse("1", rateLimitBody(governor.TPM, 1)))
		k.run(1, k.now)
		p.set(ok())
		k.now = k.now.Add(governor.LearnFor)
		if got := k.run(10, k.now); got.tokens != 1000 {
			t.Errorf("%d tokens in a burst %v after the provider last said TPM 1, want the configured 1000", got.tokens, governor.LearnFor)
		}
	})
}
