package llm_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/llm"
)

// Groq's OTPM rejection fed back: the charge is given back, the limit is
// learnt from the message, and nothing is paused for the 900 s the
// provider asked — the next call that fits goes at once, and one that can
// never fit is refused before it is sent.
func ExampleFeedback() {
	now := time.Date(2026, 10, 19, 4, 0, 0, 0, time.UTC)
	g, _ := governor.New(governor.Config{Key: "groq/qwen3", Limits: governor.Limits{governor.TPM: 8000},
		Now: func() time.Time { return now }})
	r, _ := g.Reserve(now, "summary", governor.Cost{Requests: 1, Input: 300, Output: 1252})
	g.Advance(now)

	h := http.Header{}
	h.Set("retry-after", "900")
	err := llm.Groq.Classify(429, h, []byte(`{"error":{"message":"Request too large for model `+"`qwen/qwen3.8-27b`"+
		` on output tokens per minute (OTPM): Limit 1000, Requested 1252.","type":"tokens","code":"rate_limit_exceeded"}}`))
	llm.Feedback(now, g, r, governor.Cost{}, governor.Snapshot{}, err)

	st := g.Stats(now)
	fmt.Println("tokens charged:", st.Limits[governor.TPM].Used)
	fmt.Println("limits:", g.Limits())
	fmt.Println(g.Check(governor.Cost{Requests: 1, Input: 300, Output: 1252}))
	next, _ := g.Reserve(now, "summary", governor.Cost{Requests: 1, Input: 300, Output: 500})
	g.Advance(now)
	fmt.Println("next call admitted at once:", next.Admitted())
	// Output:
	// tokens charged: 0
	// limits: tpm=8000,otpm=1000
	// request can never fit: needs 1,252 output tokens, OTPM limit is 1,000; lower max_tokens: max_tokens ≤ 1,000 fits
	// next call admitted at once: true
}
