package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/store/sqlite"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/llm"
)

// TestInflatedUsageHoldsTheKeyAMinuteAtMost: an upstream answers one
// request with a usage of a billion prompt tokens for a prompt of a few —
// the hostile-upstream report's key (rpm=600, tpm=100000, tpd=10000000, a
// budget of 5 a day at 1 per million tokens). That answer is charged at
// most what the call could have used: here the key's TPM, a whole minute
// of it, so the next request waits on tpm for at most a minute and the
// lag, and is admitted once the clock has moved that far. Before, the
// next request was told to wait 209 days on the budget's day pacing, the
// key showed 1,000,000,030 of 10,000,000 TPD and 1,000 of 5 spent, and the
// charge, journalled in the store, came back after a restart; a gateway
// restarted on the store now starts from the bounded charge.
func TestInflatedUsageHoldsTheKeyAMinuteAtMost(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		usage := `{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}`
		if strings.Contains(string(body), "inflate") {
			usage = `{"prompt_tokens":1000000000,"completion_tokens":5,"total_tokens":1000000005}`
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":%s}`, usage)
	}))
	t.Cleanup(up.Close)

	path := filepath.Join(t.TempDir(), "gw.db")
	clock := newManualClock()
	lim := limits("rpm=600,tpm=100000,tpd=10000000")
	newGateway := func() *bundle {
		st, err := sqlite.Open(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		b := &bundle{log: &testenv.Buffer{}}
		b.gw, err = New(context.Background(), Config{
			Key: "hostile", Upstream: up.URL + "/v1", APIKey: upstreamKey, Profile: llm.OpenAI, Limits: lim,
			Price: governor.Price{Input: 1, Output: 1}, Budget: governor.Budget{Day: 5}, Store: st, Now: clock.Now,
			Logger: slog.New(slog.NewTextHandler(b.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
		})
		if err != nil {
			t.Fatal(err)
		}
		start(t, b.gw)
		b.srv = httptest.NewServer(b.gw)
		t.Cleanup(b.srv.Close)
		return b
	}
	b := newGateway()
	for _, prompt := range []string{"hi", "inflate"} {
		if resp, body := b.do(t, "POST", "/v1/chat/completions", chatBody(prompt, 10, ""), nil); resp == nil || resp.StatusCode != 200 {
			t.Fatalf("request %q: %v %s", prompt, resp, body)
		}
	}
	if n := strings.Count(b.log.String(), "cut the input tokens the provider reported for a call to what the call could have used"); n != 1 {
		t.Errorf("the cut usage was logged %d times, want once:\n%s", n, b.log)
	}
	// Nor does the estimator learn from a count cut as impossible: it
	// would reserve every later prompt of the model at eight times.
	if f := b.gw.main.est.Factor("sim-model"); f > 2 {
		t.Errorf("after the inflated answer the estimator's factor for the model is %.2f: it learned from the cut count", f)
	}
	// The inflated answer is charged the key's TPM at most: the minute is
	// full, and the next request waits on it for a minute and the lag at
	// most (the clock does not move while it waits).
	resp, body := b.do(t, "POST", "/v1/chat/completions", chatBody("hi", 10, ""), map[string]string{MaxWaitHeader: "50ms"})
	if resp == nil {
		t.Fatal("no answer to the request after the inflated one")
	}
	bound := governor.TPM.Period() + time.Second // the gateway's lag
	wait := time.Duration(0)
	if resp.StatusCode != 200 {
		wait = retryAfter(t, resp)
		if resp.StatusCode != 429 || wait > bound || resp.Header.Get(WaitingOnHeader) != "tpm" {
			t.Fatalf("the request after the inflated one: %d, waiting on %q for %v (want at most %v on tpm): %s",
				resp.StatusCode, resp.Header.Get(WaitingOnHeader), wait, bound, body)
		}
	}
	clock.advance(b, wait)
	if resp, body := b.do(t, "POST", "/v1/chat/completions", chatBody("hi", 10, ""), map[string]string{MaxWaitHeader: "50ms"}); resp == nil || resp.StatusCode != 200 {
		t.Fatalf("the request %v after the inflated one, once its Retry-After passed: %v %s", wait, resp, body)
	}

	now := clock.Now()
	st := b.gw.Governor().Stats(now)
	tpd, spent := st.Limits[governor.TPD].Used, st.Limits[governor.MPD].Used
	if most := int64(100_000 + 200); tpd > most {
		t.Errorf("TPD used %d, want at most the key's TPM for the inflated call and a few tokens for the others (%d)", tpd, most)
	}
	if most := (governor.Price{Input: 1, Output: 1}).Of(governor.Cost{Input: 100_200}); spent > most {
		t.Errorf("spent %s of the day's budget, want at most %s", governor.FormatMoney(spent), governor.FormatMoney(most))
	}
	// What was journalled to the store is the bounded charge: a gateway
	// restarted on it starts from the same day.
	if err := b.gw.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	b2 := newGateway()
	st2 := b2.gw.Governor().Stats(now)
	if got := st2.Limits[governor.TPD].Used; got != tpd {
		t.Errorf("restarted on the store, TPD used %d, want the day's bounded %d", got, tpd)
	}
	if got := st2.Limits[governor.MPD].Used; got != spent {
		t.Errorf("restarted on the store, spent %s, want the day's bounded %s", governor.FormatMoney(got), governor.FormatMoney(spent))
	}
	if resp, body := b2.do(t, "POST", "/v1/chat/completions", chatBody("hi", 10, ""), map[string]string{MaxWaitHeader: "50ms"}); resp == nil || resp.StatusCode != 200 {
		t.Fatalf("the first request after the restart: %v %s", resp, body)
	}
}
