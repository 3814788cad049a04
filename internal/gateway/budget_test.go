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
	if v := b.gw.Flows(); v.Budget == nil || v.Budget.Day != 0.02 || v.Budget.SpentDay != float64(spent)/governor.Nano {
		t.Errorf("/v1/flows shows the key's budget as %+v, want 0.02 a day and %d billionths spent", v.Budget, spent)
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

// A client key's budget: the key is bound to a flow with a budget of its
// own. Its requests past the budget are answered 429 naming the budget and
// when it frees, while another client's go on; one over the whole budget
// is refused naming the flow.
func TestClientKeyBudget(t *testing.T) {
	t.Parallel()
	b := setup(t, forecast.ModelConfig{Profile: "openai"}, Config{
		Price:    governor.Price{Input: 1, Output: 10},
		Flows:    []Flow{{Name: "intern", Budget: governor.Budget{Day: 0.01}}, {Name: "team"}},
		DayBurst: -1, Now: newManualClock().Now,
		ClientKeys: []ClientKey{{Key: "gw-intern-key-0123456", Flow: "intern"}, {Key: "gw-team-key-01234567", Flow: "team"}},
	})
	intern := map[string]string{"Authorization": "Bearer gw-intern-key-0123456", MaxWaitHeader: "50ms"}
	team := map[string]string{"Authorization": "Bearer gw-team-key-01234567", MaxWaitHeader: "50ms"}
	// Up to $0.008: admitted; the next one cannot fit beside it.
	if resp, body := b.do(t, "POST", "/v1/chat/completions", chatBody("Summarize.", 800, ""), intern); resp.StatusCode != 200 {
		t.Fatalf("intern's first request: %d %s", resp.StatusCode, body)
	}
	resp, body := b.do(t, "POST", "/v1/chat/completions", chatBody("Summarize.", 990, ""), intern)
	if resp.StatusCode != 429 || resp.Header.Get(WaitingOnHeader) != "the flow's mpd" ||
		!strings.Contains(string(body), "It waits on the flow's mpd until ") || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("intern past its budget: %d waiting on %q: %s", resp.StatusCode, resp.Header.Get(WaitingOnHeader), body)
	}
	if resp, body := b.do(t, "POST", "/v1/chat/completions", chatBody("Summarize.", 990, ""), team); resp.StatusCode != 200 {
		t.Fatalf("another client's request while intern waits: %d %s", resp.StatusCode, body)
	}
	resp, body = b.do(t, "POST", "/v1/chat/completions", chatBody("Summarize.", 2000, ""), intern)
	if resp.StatusCode != 413 || !strings.Contains(string(body), `the budget of money per day of flow \"intern\": it costs up to 0.020`) {
		t.Fatalf("intern over its whole budget: %d %s", resp.StatusCode, body)
	}
	f := flowView(t, b, "intern")
	if f.Admitted != 1 || f.Spend == nil || *f.Spend <= 0 || *f.Spend > 0.008 || f.Budget == nil || f.Budget.Day != 0.01 || f.Budget.SpentDay != *f.Spend {
		t.Errorf("intern in /v1/flows: admitted %d, spend %v, budget %+v; want 1, its call's price and a day's budget of 0.01", f.Admitted, f.Spend, f.Budget)
	}
	if v := b.gw.Flows(); v.Budget != nil || v.Limits["mpd"] != (LimitView{}) {
		t.Errorf("a key without a budget of its own shows %+v, limits %v", v.Budget, v.Limits)
	}
}
