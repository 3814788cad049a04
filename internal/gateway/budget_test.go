package gateway

import (
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/llm"
)

// The key's budget in money, through the gateway: a request whose worst
// case can never fit is refused at once (413) naming the budget in money;
// one that must wait for the budget is answered 429 naming it, with a
// Retry-After; neither reaches the provider.
func TestGatewayBudget(t *testing.T) {
	t.Parallel()
	// $1 per million input tokens, $10 per million output; $0.02 a day.
	price := governor.Price{Input: 1, Output: 10}
	b := setup(t, forecast.ModelConfig{Profile: "groq"}, Config{Price: price, Budget: governor.Budget{Day: 0.02}, DayBurst: -1, Now: newManualClock().Now})
	resp, body := b.do(t, "POST", "/v1/chat/completions", chatBody("Summarize.", 5000, ""), nil) // up to $0.05
	if resp.StatusCode != 413 {
		t.Fatalf("a request over the whole budget: %d %s", resp.StatusCode, body)
	}
	for _, want := range []string{"the budget of money per day of key groq", "the budget is 0.02", "Lower max_tokens: max_tokens ≤ 1,99"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("413 body %s lacks %q", body, want)
		}
	}
	if _, ok := llm.Groq.Classify(resp.StatusCode, resp.Header, body).(*llm.TooLargeError); !ok {
		t.Errorf("a client does not read the 413 as a request too large")
	}
	// $0.015 worst case: admitted; a second cannot fit beside it.
	if resp, body := b.do(t, "POST", "/v1/chat/completions", chatBody("Summarize.", 1500, ""), nil); resp.StatusCode != 200 {
		t.Fatalf("a request within the budget: %d %s", resp.StatusCode, body)
	}
	spent := b.gw.gov.Stats(b.gw.cfg.Now()).Limits[governor.MPD].Used
	if spent <= 0 || spent >= 15_000_000 {
		t.Fatalf("spent %d billionths, want the call's real price, below its worst case of 15,000,000", spent)
	}
	left := 20_000_000 - spent
	over := int(left/10_000) + 50 // its worst case is over what is left
	resp, body = b.do(t, "POST", "/v1/chat/completions", chatBody("Summarize.", over, ""), map[string]string{MaxWaitHeader: "50ms"})
	if resp.StatusCode != 429 || resp.Header.Get(WaitingOnHeader) != "mpd" {
		t.Fatalf("a request past what is left: %d waiting on %q: %s", resp.StatusCode, resp.Header.Get(WaitingOnHeader), body)
	}
	if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 {
		t.Errorf("retry-after %q", resp.Header.Get("Retry-After"))
	}
	if st := b.model.Stats(); st.Requests != 1 {
		t.Errorf("the provider saw %d requests, want the one within the budget", st.Requests)
	}
}
