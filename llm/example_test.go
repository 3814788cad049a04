package llm_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/llm"
)

// A Groq rejection as it arrives: HTTP 429, retry-after 900 — but the
// message says the request is too large for the output-tokens-per-minute
// limit, so waiting would never help.
func ExampleProfile_Classify() {
	h := http.Header{}
	h.Set("retry-after", "900")
	body := []byte(`{"error":{"message":"Request too large for model ` + "`qwen/qwen3.8-27b`" +
		` in organization ` + "`org_x`" + ` service tier ` + "`on_demand`" +
		` on output tokens per minute (OTPM): Limit 1000, Requested 1252. The request's expected output tokens exceed the enforced limit; reduce max_tokens (or the request's expected output) and try again.","type":"tokens","code":"rate_limit_exceeded"}}`)

	err := llm.Groq.Classify(429, h, body)
	limit, _ := llm.LimitOf(err)
	fmt.Println(err)
	fmt.Println("limit:", limit, "retryable:", llm.Retryable(err))
	// Output:
	// llm: request too large for output tokens per minute (OTPM): needs 1,252 output tokens, limit is 1,000; lower max_tokens (retrying never helps; HTTP 429)
	// limit: otpm retryable: false
}

// A rate limit names the limit it exhausted and how long to wait; only that
// limit needs to pause.
func ExampleRateLimitError() {
	body := []byte(`{"error":{"message":"Rate limit reached for model ` + "`llama-3.1-8b-instant`" +
		` in organization ` + "`org_x`" + ` service tier ` + "`on_demand`" +
		` on tokens per minute (TPM): Limit 8000, Used 7972, Requested 1351. Please try again in 5.289s.","type":"tokens","code":"rate_limit_exceeded"}}`)
	err := llm.Groq.Classify(429, nil, body)

	var rl *llm.RateLimitError
	if errors.As(err, &rl) {
		fmt.Println(rl.Limit, rl.Max, rl.Used, rl.Requested, rl.RetryAfter)
	}
	wait, _ := llm.RetryAfter(err)
	fmt.Println("retry after", wait)
	// Output:
	// tpm 8000 7972 1351 5.289s
	// retry after 5.289s
}

// The same header names mean different limits at different providers.
func ExampleProfile_Snapshot() {
	h := http.Header{}
	h.Set("x-ratelimit-limit-requests", "14400")
	h.Set("x-ratelimit-remaining-requests", "14370")
	h.Set("x-ratelimit-reset-requests", "2m59.56s")
	h.Set("x-ratelimit-limit-tokens", "8000")
	h.Set("x-ratelimit-remaining-tokens", "6649")
	h.Set("x-ratelimit-reset-tokens", "7.66s")

	now := time.Now()
	for _, p := range []llm.Profile{llm.Groq, llm.OpenAI} {
		s := p.Snapshot(h, now)
		for l := range governor.NumLimits {
			if s[l].Known {
				fmt.Printf("%s %s: %d of %d left, reset in %v\n", p, l, s[l].Remaining, s[l].Limit, s[l].Reset)
			}
		}
	}
	// Output:
	// groq rpd: 14370 of 14400 left, reset in 2m59.56s
	// groq tpm: 6649 of 8000 left, reset in 7.66s
	// openai rpm: 14370 of 14400 left, reset in 2m59.56s
	// openai tpm: 6649 of 8000 left, reset in 7.66s
}

// Pricing a request before sending it: input from the tokenizer plus the
// margin, output = max_tokens.
func ExampleEstimator_Cost() {
	var est llm.Estimator
	req := &llm.ChatRequest{
		Model:     "gpt-4o",
		Messages:  []llm.Message{{Role: "user", Content: "hello world"}},
		MaxTokens: 100,
	}
	fmt.Printf("%+v\n", est.Cost(req))

	// The provider counted 12 prompt tokens where 9 were estimated (10
	// with the margin): the next estimate for this model covers that.
	est.Observe("gpt-4o", 10, 12)
	fmt.Printf("%+v\n", est.Cost(req))
	// Output:
	// {Requests:1 Input:10 Output:100 Cached:0 Money:0}
	// {Requests:1 Input:12 Output:100 Cached:0 Money:0}
}

func ExampleClient_Chat() {
	// A stand-in for the provider.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("x-ratelimit-remaining-tokens", "7985")
		w.Header().Set("x-ratelimit-limit-tokens", "8000")
		io.WriteString(w, `{"id":"1","model":"llama-3.1-8b-instant","choices":[{"index":0,
			"message":{"role":"assistant","content":"Hello."},"finish_reason":"stop"}],
			"usage":{"prompt_tokens":12,"completion_tokens":2,"total_tokens":14}}`)
	}))
	defer srv.Close()

	client, err := llm.NewClient(llm.Config{
		BaseURL:          srv.URL, // e.g. "https://api.groq.com/openai/v1"
		APIKey:           "gsk_example",
		Profile:          llm.Groq,
		DefaultMaxTokens: 256, // every request carries max_tokens
	})
	if err != nil {
		panic(err)
	}
	resp, err := client.Chat(context.Background(), &llm.ChatRequest{
		Model:    "llama-3.1-8b-instant",
		Messages: []llm.Message{{Role: "user", Content: "Say hello."}},
	})
	if err != nil {
		// The client never retries: decide here.
		if llm.Retryable(err) {
			wait, _ := llm.RetryAfter(err)
			fmt.Println("retry in", wait)
		}
		return
	}
	fmt.Printf("%s %+v\n", resp.Text(), resp.Usage.Governor())
	fmt.Println("tpm left:", resp.Snapshot[governor.TPM].Remaining)
	// Output:
	// Hello. {Requests:0 Input:12 Output:2 Cached:0 Money:0}
	// tpm left: 7985
}

func ExampleClient_ChatStream() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"content":"Hel"}}]}`+"\n\n")
		io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"content":"lo."},"finish_reason":"stop"}]}`+"\n\n")
		io.WriteString(w, `data: {"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":2,"total_tokens":14}}`+"\n\n")
		io.WriteString(w, "data: [DONE]\n\n")
	}))
	defer srv.Close()

	client, _ := llm.NewClient(llm.Config{BaseURL: srv.URL, DefaultMaxTokens: 256})
	s, err := client.ChatStream(context.Background(), &llm.ChatRequest{
		Model:    "gpt-4o-mini",
		Messages: []llm.Message{{Role: "user", Content: "Say hello."}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	for s.Next() {
		fmt.Print(s.Chunk().Text())
	}
	if err := s.Err(); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println()
	fmt.Println("usage:", *s.Usage())
	// Output:
	// Hello.
	// usage: {12 2 14 <nil>}
}

// A proxy reads the client's body, keeps what it does not model, and
// forwards it with its own max_tokens.
func ExampleDecodeChatRequest() {
	req, err := llm.DecodeChatRequest([]byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],
		"max_completion_tokens":4000,"response_format":{"type":"json_object"},"seed":7}`))
	if err != nil {
		panic(err)
	}
	req.MaxTokens = min(req.MaxTokens, 1000)
	out, _ := req.MarshalJSON()
	fmt.Println(string(out))
	// Output:
	// {"max_completion_tokens":1000,"messages":[{"content":"hi","role":"user"}],"model":"gpt-4o","response_format":{"type":"json_object"},"seed":7}
}
