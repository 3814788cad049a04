package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/forecast"
)

// manualClock is a clock that moves only when the test moves it: every
// estimate is exact, no place lapses and no window turns while a test's
// steps run, however slowly a busy machine runs them.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func newManualClock() *manualClock {
	return &manualClock{now: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// advance moves the clock of b on by d and has its governor admit what
// then fits: a request waiting in line hears of it at once.
func (c *manualClock) advance(b *bundle, d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	now := c.now
	c.mu.Unlock()
	b.gw.Governor().Advance(now)
}

// manualKey is a simulator and a gateway on a manual clock, with one
// request a minute. A max wait is wall time on it (the clock does not
// move while a request waits), the retry-after of a 429 the clock's.
func manualKey(t *testing.T) (*bundle, *manualClock) {
	c := newManualClock()
	return setup(t, forecast.ModelConfig{Profile: "openai", Limits: limits("rpm=1")},
		Config{Limits: limits("rpm=1"), Now: c.Now}), c
}

func retryAfter(t *testing.T, resp *http.Response) time.Duration {
	t.Helper()
	ms, err := strconv.ParseInt(resp.Header.Get("Retry-After-Ms"), 10, 64)
	if err != nil {
		t.Fatalf("retry-after-ms %q: %v", resp.Header.Get("Retry-After-Ms"), err)
	}
	return time.Duration(ms) * time.Millisecond
}

// A request answered 429 because its max wait ended keeps its place in
// line: sent again, it is admitted before a request of its flow that came
// after its first attempt — plain, streamed, or named by an
// Idempotency-Key when its body changed in a field that does not price it.
func TestRetryTakesItsPlaceBack(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		first, second string
		header        map[string]string
	}{
		{"plain", chatBody("a request sent twice", 5, ""), chatBody("a request sent twice", 5, ""), nil},
		{"stream", chatBody("a stream sent twice", 5, `,"stream":true`), chatBody("a stream sent twice", 5, `,"stream":true`), nil},
		{"idempotency key", chatBody("a request sent twice", 5, `,"user":"try-1"`), chatBody("a request sent twice", 5, `,"user":"try-2"`),
			map[string]string{IdempotencyKeyHeader: "item-42"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, clk := manualKey(t)
			if resp, body := b.do(t, "POST", "/v1/chat/completions", chatBody("first", 5, ""), nil); status(resp) != 200 {
				t.Fatalf("first request: %d %s", status(resp), body)
			}
			hdr := func(wait string) map[string]string {
				h := map[string]string{MaxWaitHeader: wait}
				for k, v := range tc.header {
					h[k] = v
				}
				return h
			}
			resp, body := b.do(t, "POST", "/v1/chat/completions", tc.first, hdr("1s"))
			if status(resp) != 429 {
				t.Fatalf("a request that cannot be admitted within 1s: %d %s", status(resp), body)
			}
			if got := resp.Header.Get(WaitingOnHeader); got != "rpm" {
				t.Errorf("waiting on %q, want rpm", got)
			}
			if ra := retryAfter(t, resp); ra < 45*time.Second || ra > 75*time.Second {
				t.Errorf("retry-after %v, want about the minute until the rpm window has room", ra)
			}
			done := make(chan string, 2)
			go func() {
				resp, body := b.do(t, "POST", "/v1/chat/completions", chatBody("a later request", 5, ""), map[string]string{MaxWaitHeader: "10m"})
				done <- fmt.Sprintf("later %d %s", status(resp), body)
			}()
			waitFor(t, "the later request waiting", func() bool { return flowView(t, b, DefaultFlow).Waiting == 1 })
			go func() {
				resp, body := b.do(t, "POST", "/v1/chat/completions", tc.second, hdr("10m"))
				done <- fmt.Sprintf("again %d %s", status(resp), body)
			}()
			waitFor(t, "the request sent again in line", func() bool {
				return flowView(t, b, DefaultFlow).Waiting == 2 && parked(b) == 0
			})
			// Each minute of the key admits one of the two: the first is
			// answered before the clock moves on to the next.
			ctx := testBudget(t)
			answer := func() string {
				select {
				case a := <-done:
					return a
				case <-ctx.Done():
					t.Fatal("no answer once the rpm window had room")
					return ""
				}
			}
			clk.advance(b, 90*time.Second)
			first := answer()
			clk.advance(b, 90*time.Second)
			second := answer()
			if !strings.HasPrefix(first, "again 200") || !strings.HasPrefix(second, "later 200") {
				t.Fatalf("answered in the order\n%.200s\n%.200s\nwant the request sent again first, in the place it kept", first, second)
			}
			if _, m := b.do(t, "GET", "/metrics", "", nil); !strings.Contains(string(m), `sluice_gateway_places_taken_back_total{key="openai"} 1`) {
				t.Errorf("/metrics does not count the place taken back:\n%s", m)
			}
		})
	}
}

func status(resp *http.Response) int {
	if resp == nil {
		return 0
	}
	return resp.StatusCode
}

// The retry-after of a 429 is the request's own estimate: the k-th of
// several requests that all give up says about k minutes on a key of one
// request a minute, though those ahead of it gave up too — they keep
// their places, and will be admitted first.
func TestRetryAfterCountsThePlacesAhead(t *testing.T) {
	t.Parallel()
	b, _ := manualKey(t)
	if resp, _ := b.do(t, "POST", "/v1/chat/completions", chatBody("first", 5, ""), nil); status(resp) != 200 {
		t.Fatalf("first request: %d", status(resp))
	}
	const n = 5
	got := make(chan [2]int64, n)
	for k := 1; k <= n; k++ {
		go func() {
			resp, _ := b.do(t, "POST", "/v1/chat/completions", chatBody(fmt.Sprint("request ", k), 5, ""), map[string]string{MaxWaitHeader: "1s"})
			if status(resp) != 429 {
				got <- [2]int64{int64(k), -1}
				return
			}
			got <- [2]int64{int64(k), int64(retryAfter(t, resp))}
		}()
		// In line one after the other, so their order is known.
		waitFor(t, "the request in line", func() bool { f := flowView(t, b, DefaultFlow); return f.Waiting+parked(b) == k })
	}
	for range n {
		r := <-got
		k, ra := r[0], time.Duration(r[1])
		if ra < 0 {
			t.Fatalf("request %d was not answered 429", k)
		}
		want := time.Duration(k) * time.Minute
		if ra < want-15*time.Second || ra > want+15*time.Second {
			t.Errorf("request %d: retry-after %v, want about %v (the places ahead of it count)", k, ra, want)
		}
	}
}

func parked(b *bundle) int {
	for _, f := range b.gw.Governor().Stats(b.gw.cfg.Now()).Flows {
		if f.Name == DefaultFlow {
			return f.Parked
		}
	}
	return 0
}

// Every answer carries the gateway's view of the key and the flow as
// ASCII numbers, and a 200 the provider's own rate-limit headers.
func TestAnswerHeaders(t *testing.T) {
	t.Parallel()
	// The clock stands still: resets and estimates are exact, however
	// long the steps take.
	b := setup(t, forecast.ModelConfig{Profile: "groq", Limits: limits("rpm=30,tpm=6000,otpm=1000")},
		Config{Limits: limits("rpm=30,tpm=6000,otpm=1000"), Flows: []Flow{{Name: "a", Weight: 1}, {Name: "b", Weight: 3}},
			Now: newManualClock().Now})
	ok, _ := b.do(t, "POST", "/v1/chat/completions", chatBody("hello", 900, ""), map[string]string{FlowHeader: "b"})
	refused, _ := b.do(t, "POST", "/v1/chat/completions", chatBody("again", 900, ""), map[string]string{FlowHeader: "b", MaxWaitHeader: "10ms"})
	tooLarge, _ := b.do(t, "POST", "/v1/chat/completions", chatBody("huge", 2000, ""), map[string]string{FlowHeader: "a"})
	for _, c := range []struct {
		resp   *http.Response
		status int
	}{{ok, 200}, {refused, 429}, {tooLarge, 413}} {
		if status(c.resp) != c.status {
			t.Fatalf("status %d, want %d", status(c.resp), c.status)
		}
		h := c.resp.Header
		for k, vs := range h {
			for _, v := range vs {
				for i := 0; i < len(v); i++ {
					if v[i] < 0x20 || v[i] > 0x7e {
						t.Errorf("%d: header %s: %q is not printable ASCII", c.status, k, v)
						break
					}
				}
			}
		}
		for _, name := range []string{WaitHeader, "X-Sluice-Ratelimit-Limit-Otpm", "X-Sluice-Ratelimit-Remaining-Otpm", "X-Sluice-Ratelimit-Reset-Otpm",
			"X-Sluice-Ratelimit-Limit-Rpm", FlowWaitingHeader, FlowEstimateHeader} {
			if _, err := strconv.ParseInt(h.Get(name), 10, 64); err != nil {
				t.Errorf("%d: %s = %q, want a whole number", c.status, name, h.Get(name))
			}
		}
	}
	if got := ok.Header.Get("X-Sluice-Ratelimit-Limit-Otpm"); got != "1000" {
		t.Errorf("otpm limit header %q, want 1000", got)
	}
	if got := ok.Header.Get("X-Sluice-Ratelimit-Remaining-Otpm"); got != "100" {
		t.Errorf("otpm remaining after a 900-token reservation: %q, want 100", got)
	}
	if reset, _ := strconv.ParseInt(ok.Header.Get("X-Sluice-Ratelimit-Reset-Otpm"), 10, 64); reset < 55_000 || reset > 62_000 {
		t.Errorf("otpm resets in %d ms, want about a minute (and the lag)", reset)
	}
	if ok.Header.Get("X-Ratelimit-Limit-Tokens") != "6000" {
		t.Errorf("the provider's x-ratelimit-limit-tokens is not passed on: %q", ok.Header.Get("X-Ratelimit-Limit-Tokens"))
	}
	// Flow b alone has a request in line: its share is all of the key.
	if got := refused.Header.Get(FlowShareHeader); got != "1.000" {
		t.Errorf("share of the only busy flow: %q, want 1.000", got)
	}
	if est, _ := strconv.ParseInt(refused.Header.Get(FlowEstimateHeader), 10, 64); est < 50_000 {
		t.Errorf("estimate for another 900-token request on a full otpm: %d ms, want about a minute", est)
	}
}

// The too-large hint counts every choice: n of 3 at max_tokens 2,000 is
// 6,000 output tokens, and under OTPM 5,000 max_tokens ≤ 1,666 fits.
func TestTooLargeHintCountsChoices(t *testing.T) {
	t.Parallel()
	b := setup(t, forecast.ModelConfig{Profile: "openai", Limits: limits("otpm=5000")}, Config{Limits: limits("otpm=5000")})
	resp, body := b.do(t, "POST", "/v1/chat/completions", chatBody("three answers", 2000, `,"n":3`), nil)
	if status(resp) != 413 || !strings.Contains(string(body), "with n = 3, max_tokens ≤ 1,666 fits") {
		t.Fatalf("%d %s\nwant 413 saying max_tokens ≤ 1,666 fits with n = 3", status(resp), body)
	}
}

// At most perCaller places are kept for one caller in one flow, and at most
// max in all; a place beyond either bound is refused, never given another
// caller's place. A place taken back makes room, and a lapsed one is never
// handed out.
func TestPlacesBound(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	gov, err := governor.New(governor.Config{Limits: limits("rpm=1"), Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gov.Reserve(now, "a", governor.Cost{Requests: 1}); err != nil {
		t.Fatal(err)
	}
	gov.Advance(now)
	wait := func() (*governor.Reservation, time.Time) {
		t.Helper()
		r, err := gov.Reserve(now, "a", governor.Cost{Requests: 1})
		if err != nil {
			t.Fatal(err)
		}
		we, ok := errors.AsType[*governor.WaitError](gov.Await(doneContext(), r, time.Minute))
		if !ok {
			t.Fatal("Await with a done context did not end the wait")
		}
		return r, we.KeptUntil
	}
	p := newPlaces(3, 2)
	a, b, c := caller{client: 1, flow: "a"}, caller{client: 2, flow: "a"}, caller{client: 3, flow: "a"}
	res := map[byte]*governor.Reservation{}
	for i, tc := range []struct {
		who    caller
		refuse string // what a refusal names; "" for a place kept
	}{
		{a, ""}, {a, ""},
		{a, `this caller keeps 2 places in line in flow "a" already`},
		{caller{client: 1, flow: "b"}, ""}, // the same key in another flow is another caller
		{b, "the gateway keeps 3 places in line already"},
		{c, "the gateway keeps 3 places in line already"},
	} {
		r, until := wait()
		got := p.keep(placeKey{byte(i)}, tc.who, r, until, now)
		if tc.refuse == "" && got != "" || tc.refuse != "" && !strings.Contains(got, tc.refuse) {
			t.Fatalf("place %d for %+v: refused with %q, want %q", i, tc.who, got, tc.refuse)
		}
		res[byte(i)] = r
	}
	if p.n != 3 || p.take(placeKey{0}, now) != res[0] || !res[0].Rejoin(now) {
		t.Fatalf("%d places kept, the oldest not taken back; want 3 and the oldest kept", p.n)
	}
	// Taken back, a place frees its caller's room.
	if r, until := wait(); p.keep(placeKey{9}, a, r, until, now) != "" {
		t.Fatal("no room for a caller that took a place back")
	}
	if p.take(placeKey{1}, now.Add(time.Hour)) != nil {
		t.Fatal("a lapsed place was handed out")
	}
	if r := p.take(placeKey{3}, now); r != res[3] || !r.Rejoin(now) || p.n != 1 || p.held[a] != 1 {
		t.Fatalf("the other flow's place: %v, %d left, %d of a's", r, p.n, p.held[a])
	}
}

func doneContext() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}
