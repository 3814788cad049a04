package llm

import (
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sluice-dev/sluice/governor"
)

// The writers reproduce the providers' own samples (classify_test.go) byte
// for byte, from their parts: what the provider adds about what to do is
// the writer's.
func TestWireWritesProviderSamples(t *testing.T) {
	t.Parallel()
	const groqMore = " Need more tokens? Upgrade to Dev Tier today."
	const openaiMore = " Visit the rate limits page of your account to learn more."
	groqTyp, groqCode := Groq.RateLimitType(governor.TPM)
	groqTLTyp, groqTLCode := Groq.TooLargeType(governor.OTPM)
	openaiTyp, openaiCode := OpenAI.RateLimitType(governor.TPM)
	openaiTLTyp, openaiTLCode := OpenAI.TooLargeType(governor.TPM)
	antTyp, antCode := Anthropic.RateLimitType(governor.ITPM)
	tests := []struct {
		name string
		got  []byte
		want string
	}{
		{"groq TPM", Groq.ErrorBody(groqTyp, groqCode,
			Groq.RateLimitMessage("org_x", "llama-3.1-8b-instant", governor.TPM, 8000, 7972, 1351, 5289*time.Millisecond)+"."+groqMore, ""),
			groqTPMBody},
		{"groq 413", Groq.ErrorBody(groqTyp, groqCode,
			Groq.TooLargeMessage("org_x", "llama-3.1-8b-instant", governor.TPM, 11387, 8000)+", please reduce your message size and try again."+groqMore, ""),
			groqTooLarge413Body},
		{"groq OTPM seed 000", Groq.ErrorBody(groqTLTyp, groqTLCode,
			Groq.TooLargeMessage("org_x", "qwen/qwen3.8-27b", governor.OTPM, 1252, 1000)+
				". The request's expected output tokens exceed the enforced limit; reduce max_tokens (or the request's expected output) and try again.", ""),
			groqOTPMSeedBody},
		{"openai TPM", OpenAI.ErrorBody(openaiTyp, openaiCode,
			OpenAI.RateLimitMessage("org-x", "gpt-4o", governor.TPM, 30000, 29500, 1200, 1400*time.Millisecond)+"."+openaiMore, ""),
			openaiTPMBody},
		{"openai RPD", OpenAI.ErrorBody("requests", "rate_limit_exceeded",
			OpenAI.RateLimitMessage("org-x", "gpt-4o-mini", governor.RPD, 10000, 10000, 1, 8640*time.Millisecond)+".", ""),
			openaiRPDBody},
		{"openai too large", OpenAI.ErrorBody(openaiTLTyp, openaiTLCode,
			OpenAI.TooLargeMessage("org-x", "gpt-4o", governor.TPM, 36000, 30000)+
				". The input or output tokens must be reduced in order to run successfully."+openaiMore, ""),
			openaiTooLargeBody},
		{"anthropic ITPM", Anthropic.ErrorBody(antTyp, antCode,
			Anthropic.RateLimitMessage("0000", "claude-sonnet-4-5", governor.ITPM, 30000, 29000, 1200, time.Second)+
				". For details, refer to the rate limits documentation. You can see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later.", ""),
			anthropicITPMBody},
		{"anthropic RPM", Anthropic.ErrorBody(antTyp, antCode,
			Anthropic.RateLimitMessage("0000", "claude-haiku-4-5", governor.RPM, 50, 50, 1, time.Second)+".", ""),
			anthropicRPMBody},
		{"anthropic overloaded", Anthropic.ErrorBody("overloaded_error", "", "Overloaded", ""), anthropicOverloadedBody},
		{"openai quota", OpenAI.ErrorBody("insufficient_quota", "insufficient_quota",
			"You exceeded your current quota, please check your plan and billing details.", ""),
			openaiQuotaBody},
	}
	for _, tt := range tests {
		if string(tt.got) != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.name, tt.got, tt.want)
		}
	}
}

func TestErrorBodyShapes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		p                         Profile
		typ, code, msg, requestID string
		want                      string
	}{
		{OpenAI, "server_error", "", "m", "", `{"error":{"message":"m","type":"server_error","param":null,"code":null}}`},
		{OpenAI, "t", "c", "m", "req_1", `{"error":{"message":"m","type":"t","param":null,"code":"c"}}`},
		{"", "t", "c", "m", "", `{"error":{"message":"m","type":"t","param":null,"code":"c"}}`},
		{Groq, "internal_server_error", "", "m", "req_1", `{"error":{"message":"m","type":"internal_server_error"}}`},
		{Groq, "t", "c", "m", "", `{"error":{"message":"m","type":"t","code":"c"}}`},
		{Anthropic, "api_error", "ignored", "m", "", `{"type":"error","error":{"type":"api_error","message":"m"}}`},
		{Anthropic, "api_error", "", "m", "req_sim_000007", `{"type":"error","error":{"type":"api_error","message":"m"},"request_id":"req_sim_000007"}`},
	}
	for _, tt := range tests {
		if got := string(tt.p.ErrorBody(tt.typ, tt.code, tt.msg, tt.requestID)); got != tt.want {
			t.Errorf("%q.ErrorBody(%q, %q, %q, %q):\n got %s\nwant %s", tt.p, tt.typ, tt.code, tt.msg, tt.requestID, got, tt.want)
		}
	}
}

// TestWireRoundTrip: for every profile and limit, a refusal written with the
// profile's type, code and wording, as the simulator and the gateway write
// them, reads back as the same type, code and message, and classifies as
// the refusal it is, naming the same limit and numbers (as far as the
// profile's wording states them).
func TestWireRoundTrip(t *testing.T) {
	t.Parallel()
	now := time.Unix(0, 0)
	for _, p := range Profiles() {
		for l := range governor.NumLimits {
			if l.Budget() {
				continue // no provider names a budget
			}
			for _, org := range []string{"org-x", ""} {
				name := fmt.Sprintf("%s %s org %q", p, l, org)
				wordy := p != Anthropic // Anthropic's wording states only the allowance

				const allowance, used, need = 12000, 11500, 1100
				const wait = 5289 * time.Millisecond
				typ, code := p.RateLimitType(l)
				msg := p.RateLimitMessage(org, "model-1", l, allowance, used, need, wait) + "."
				body := p.ErrorBody(typ, code, msg, "req_1")
				if got, want := parseErrorBody(body), (errorBody{msg, typ, code}); got != want {
					t.Errorf("%s: rate limit reads back as %+v, want %+v", name, got, want)
				}
				want := &RateLimitError{Limit: l, LimitKnown: true, Max: allowance, Status: 429, Message: msg}
				if wordy {
					want.Used, want.Requested, want.RetryAfter = used, need, wait
				}
				if got := p.classify(429, nil, body, now); !reflect.DeepEqual(got, want) {
					t.Errorf("%s: rate limit classifies as\n %#v\nwant %#v", name, got, want)
				}

				const big, small = 1_234_567, 30_000
				typ, code = p.TooLargeType(l)
				msg = p.TooLargeMessage(org, "model-1", l, big, small) + ". Lower max_tokens."
				body = p.ErrorBody(typ, code, msg, "")
				if got, want := parseErrorBody(body), (errorBody{msg, typ, code}); got != want {
					t.Errorf("%s: too large reads back as %+v, want %+v", name, got, want)
				}
				for _, status := range []int{413, 429} {
					want := &TooLargeError{Limit: l, LimitKnown: true, Max: small, Status: status, Message: msg}
					if wordy {
						want.Requested = big
					}
					if got := p.classify(status, http.Header{"Retry-After": {"900"}}, body, now); !reflect.DeepEqual(got, want) {
						t.Errorf("%s: too large (HTTP %d) classifies as\n %#v\nwant %#v", name, status, got, want)
					}
				}
			}
		}
	}
}

func TestRefusalTypes(t *testing.T) {
	t.Parallel()
	type tc struct{ typ, code string }
	tests := []struct {
		p              Profile
		l              governor.Limit
		rate, tooLarge tc
	}{
		{Groq, governor.RPD, tc{"requests", "rate_limit_exceeded"}, tc{"requests", "rate_limit_exceeded"}},
		{Groq, governor.OTPM, tc{"tokens", "rate_limit_exceeded"}, tc{"tokens", "rate_limit_exceeded"}},
		{OpenAI, governor.RPM, tc{"requests", "rate_limit_exceeded"}, tc{"requests", "rate_limit_exceeded"}},
		{OpenAI, governor.TPD, tc{"tokens", "rate_limit_exceeded"}, tc{"tokens", "rate_limit_exceeded"}},
		{"", governor.TPM, tc{"tokens", "rate_limit_exceeded"}, tc{"tokens", "rate_limit_exceeded"}},
		{Anthropic, governor.RPM, tc{"rate_limit_error", ""}, tc{"invalid_request_error", ""}},
		{Anthropic, governor.ITPM, tc{"rate_limit_error", ""}, tc{"invalid_request_error", ""}},
	}
	for _, tt := range tests {
		if typ, code := tt.p.RateLimitType(tt.l); (tc{typ, code}) != tt.rate {
			t.Errorf("%q.RateLimitType(%s) = %q, %q; want %+v", tt.p, tt.l, typ, code, tt.rate)
		}
		if typ, code := tt.p.TooLargeType(tt.l); (tc{typ, code}) != tt.tooLarge {
			t.Errorf("%q.TooLargeType(%s) = %q, %q; want %+v", tt.p, tt.l, typ, code, tt.tooLarge)
		}
	}
}

func TestRefusalWaitIsShownToTheMillisecond(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		wait time.Duration
		want string
	}{{0, "in 0s"}, {-time.Second, "in 0s"}, {1, "in 1ms"}, {1500 * time.Microsecond, "in 2ms"}, {90 * time.Second, "in 1m30s"}} {
		if got := OpenAI.RateLimitMessage("", "m", governor.TPM, 1, 1, 1, tt.wait); !strings.HasSuffix(got, tt.want) {
			t.Errorf("wait %v: %q, want it to end %q", tt.wait, got, tt.want)
		}
	}
}

// TestRateLimitHeaders: the names are canonical, a copy is the caller's,
// and Snapshot reads what is written under them.
func TestRateLimitHeaders(t *testing.T) {
	t.Parallel()
	now := time.Unix(0, 0)
	for _, p := range Profiles() {
		hs := p.RateLimitHeaders()
		if len(hs) == 0 {
			t.Fatalf("%s: no headers", p)
		}
		h := http.Header{}
		var want governor.Snapshot
		for i, rh := range hs {
			for _, k := range []string{rh.LimitKey, rh.RemainingKey, rh.ResetKey} {
				if k != http.CanonicalHeaderKey(k) {
					t.Errorf("%s: %q is not canonical", p, k)
				}
			}
			h[rh.LimitKey] = []string{fmt.Sprint(1000 * (i + 1))}
			h[rh.RemainingKey] = []string{fmt.Sprint(i)}
			h[rh.ResetKey] = []string{fmt.Sprintf("%ds", i+1)}
			want[rh.Limit] = governor.Observed{Known: true, Limit: int64(1000 * (i + 1)), Remaining: int64(i), Reset: time.Duration(i+1) * time.Second, Source: rh.LimitKey}
		}
		if got := p.Snapshot(h, now); got != want {
			t.Errorf("%s: Snapshot = %+v, want %+v", p, got, want)
		}
		hs[0].LimitKey = "changed"
		if p.RateLimitHeaders()[0].LimitKey == "changed" {
			t.Errorf("%s: RateLimitHeaders shares its slice", p)
		}
	}
	if got, want := Profile("").RateLimitHeaders(), OpenAI.RateLimitHeaders(); !reflect.DeepEqual(got, want) {
		t.Errorf("the zero Profile's headers are %v, want OpenAI's %v", got, want)
	}
}

// FuzzErrorBody: whatever type, code and message are written, the body
// reads back as them (Anthropic's bodies have no code).
func FuzzErrorBody(f *testing.F) {
	f.Add(uint8(0), "tokens", "rate_limit_exceeded", "Rate limit reached for model `m` on tokens per minute (TPM): Limit 1, Used 1, Requested 1.", "")
	f.Add(uint8(2), "error", "", "", "req_1")
	f.Add(uint8(1), "", "", " <b>&\u2028\"", "")
	f.Fuzz(func(t *testing.T, pi uint8, typ, code, msg, requestID string) {
		for _, s := range []string{typ, code, msg, requestID} {
			if !utf8.ValidString(s) {
				t.Skip("JSON strings hold only valid UTF-8")
			}
		}
		p := fuzzProfiles[int(pi)%len(fuzzProfiles)]
		want := errorBody{msg, typ, code}
		if p == Anthropic {
			want.Code = ""
		}
		if got := parseErrorBody(p.ErrorBody(typ, code, msg, requestID)); got != want {
			t.Fatalf("%s: reads back as %+v, want %+v", p, got, want)
		}
	})
}
