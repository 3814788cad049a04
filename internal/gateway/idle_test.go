package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/sim"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/llm"
)

// TestIdleKeyAnswersAtOnce: the README's gateway, started fresh on Groq's
// free tier (flows summary=1:0:300 and title=1:0:60): ten small requests in
// a row, each sent when the last has answered, each answer at once — no
// wait for admission in X-Sluice-Wait-Ms. A day pacer that started with
// nothing in hand made the second one wait half a minute, the third a
// minute. The test runs in a bubble, on a clock that moves only when every
// party waits, so a wait it sees is the governor's, never the machine's.
func TestIdleKeyAnswersAtOnce(t *testing.T) {
	testenv.InBubble(t, func(t *testing.T) {
		ls := limits("rpm=30,tpm=8000,tpd=200000,otpm=1000")
		m, err := forecast.NewModel(forecast.ModelConfig{Profile: llm.Groq, Limits: ls, Wire: true})
		if err != nil {
			t.Fatal(err)
		}
		client := testenv.ServePipe(t, sim.NewServer(m, sim.ServerConfig{APIKey: upstreamKey}))
		gw, err := New(context.Background(), Config{Upstream: "http://sim/v1", APIKey: upstreamKey, Profile: llm.Groq, Limits: ls,
			Flows:      []Flow{{Name: "summary", DefaultMaxTokens: 300}, {Name: "title", DefaultMaxTokens: 60}},
			HTTPClient: client})
		if err != nil {
			t.Fatal(err)
		}
		start(t, gw)
		for i := range 10 {
			req := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(chatBody("A title for: sluice, durable LLM jobs", 0, "")))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Sluice-Flow", "title")
			rec := httptest.NewRecorder()
			gw.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				t.Fatalf("request %d: %d %s", i+1, rec.Code, rec.Body)
			}
			if w := rec.Header().Get(WaitHeader); w != "0" {
				t.Errorf("request %d waited %s ms for admission on an idle key, want 0", i+1, w)
			}
		}
	})
}
