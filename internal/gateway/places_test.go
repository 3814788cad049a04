package gateway

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/forecast"
)

// One caller that sends 1,100 distinct requests with X-Sluice-Max-Wait: 1ms
// keeps at most Config.MaxFlowParked places: the place another caller of
// the same flow kept is still there for its retry, with the same
// retry-after, and a new request of that caller waits behind no more than
// the bound of the flood's places. Without client keys every caller is one:
// the flood is refused places once the bound is reached, and still takes
// none that was kept.
func TestOneCallerCannotSpendThePlaces(t *testing.T) {
	t.Parallel()
	const flood, bound = 1100, DefaultMaxFlowParked
	for _, tc := range []struct {
		name      string
		keys      []ClientKey
		floodAuth string
	}{
		{"client keys", []ClientKey{{Key: "gw-client-flooder-1"}, {Key: "gw-client-patient-2"}}, "Bearer gw-client-flooder-1"},
		{"no client keys", nil, "Bearer anything-at-all"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The clock stands still: every estimate is exact, and no place lapses.
			now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
			b := setup(t, forecast.ModelConfig{Profile: "openai", Limits: limits("rpm=1")},
				Config{Limits: limits("rpm=1"), ClientKeys: tc.keys, Now: func() time.Time { return now }})
			patient := map[string]string{"Authorization": "Bearer gw-client-patient-2", MaxWaitHeader: "1ms"}
			post := func(content string, h map[string]string) (int, time.Duration, string) {
				resp, body := b.do(t, "POST", "/v1/chat/completions", chatBody(content, 5, ""), h)
				if status(resp) != 429 {
					return status(resp), 0, string(body)
				}
				return 429, retryAfter(t, resp), string(body)
			}
			if st, _, body := post("the minute's one request", patient); st != 200 {
				t.Fatalf("first request: %d %s", st, body)
			}
			st, kept, body := post("the patient caller's request", patient)
			if st != 429 {
				t.Fatalf("a request that cannot be admitted within 1ms: %d %s", st, body)
			}

			var (
				wg     sync.WaitGroup
				mu     sync.Mutex
				unkept int
				next   = make(chan int)
			)
			for range 4 {
				wg.Go(func() {
					for i := range next {
						st, _, body := post(fmt.Sprint("flood ", i), map[string]string{"Authorization": tc.floodAuth, MaxWaitHeader: "1ms"})
						if st != 429 {
							t.Errorf("flood %d: %d %s", i, st, body)
						}
						if strings.Contains(body, "Its place in line was not kept: this caller keeps 64 places in line in flow") {
							mu.Lock()
							unkept++
							mu.Unlock()
						}
					}
				})
			}
			for i := range flood {
				next <- i
			}
			close(next)
			wg.Wait()
			floodKept := bound
			if tc.keys == nil {
				floodKept-- // the patient caller's place is one of the one caller's
			}
			if unkept != flood-floodKept {
				t.Errorf("%d of the flood's 429s say their place was not kept, want %d: all past the bound of %d", unkept, flood-floodKept, bound)
			}
			if p := parked(b); p != floodKept+1 {
				t.Errorf("%d places kept, want the flood's %d and the patient caller's one", p, floodKept)
			}

			// The patient caller's place is where it was: its retry takes it
			// back, and is told the same wait.
			st, again, body := post("the patient caller's request", patient)
			if st != 429 || again != kept {
				t.Errorf("the retry of a kept place: %d, retry-after %v, want 429 and %v as before the flood\n%s", st, again, kept, body)
			}
			if p := parked(b); p != floodKept+1 {
				t.Errorf("after the retry %d places are kept, want %d", p, floodKept+1)
			}
			_, m := b.do(t, "GET", "/metrics", "", nil)
			if !strings.Contains(string(m), `sluice_gateway_places_taken_back_total{key="openai"} 1`) {
				t.Errorf("the retry did not take its place back")
			}
			if tc.keys == nil {
				return // one caller: the patient one is the flooder, at its bound
			}
			// A new request waits behind the flood's bounded places only: a
			// minute and the gateway's lag (a charge counts that much longer
			// than its window) for each request ahead of it, on one request
			// a minute.
			st, fresh, body := post("the patient caller's next request", patient)
			if want := kept + (bound+1)*(time.Minute+time.Second); st != 429 || fresh > want+time.Second {
				t.Errorf("a new request after the flood: %d, retry-after %v, want at most %v (%d places ahead of it)\n%s", st, fresh, want, bound+1, body)
			}
		})
	}
}

// A client that obeys Retry-After is not refused again for a call waiting
// behind a larger one: with one call of nearly the whole TPM admitted and
// another waiting, a small call is told to come back once both have gone
// through the window — two minutes and two lags — not after the minute a
// drain of the tokens at the limit's rate would take, when the second
// large call still fills the window.
func TestRetryAfterCountsLargeCallsAheadWhole(t *testing.T) {
	t.Parallel()
	c := newManualClock()
	b := setup(t, forecast.ModelConfig{Profile: "openai", Limits: limits("tpm=1000")},
		Config{Limits: limits("tpm=1000"), Now: c.Now})
	wait := map[string]string{MaxWaitHeader: "1ms"}
	post := func(content string, maxTokens int) (int, time.Duration, string) {
		resp, body := b.do(t, "POST", "/v1/chat/completions", chatBody(content, maxTokens, ""), wait)
		if status(resp) != 429 {
			return status(resp), 0, string(body)
		}
		return 429, retryAfter(t, resp), string(body)
	}
	if st, _, body := post("the first large call", 960); st != 200 {
		t.Fatalf("the first call on an idle key: %d %s", st, body)
	}
	st, large, body := post("the second large call", 960)
	if st != 429 {
		t.Fatalf("a second large call within the minute: %d %s", st, body)
	}
	st, small, body := post("a small call", 20)
	if st != 429 {
		t.Fatalf("a small call behind a large one, in a window with no room for it: %d %s", st, body)
	}
	// The second large call goes once the first ages out; the small one
	// only once the second has: the window never has room for both.
	if want := large + time.Minute + time.Second; small < want {
		t.Errorf("the small call was told to come back in %v, before the large call ahead of it ages out at %v\n%s", small, want, body)
	}
	c.advance(b, large)
	if st, _, body := post("the second large call", 960); st != 200 {
		t.Fatalf("the second large call back after its retry-after: %d %s", st, body)
	}
	c.advance(b, small-large)
	if st, _, body := post("a small call", 20); st != 200 {
		t.Fatalf("the small call back after its retry-after, %v: %d %s", small, st, body)
	}
}
