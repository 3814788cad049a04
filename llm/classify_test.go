package llm

import (
	"errors"
	"math"
	"net/http"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
)

// Golden error bodies: every provider sample of DESIGN.md "Provider facts",
// the OTPM rejection of seed 000, and the provider wordings they stand for.
const (
	groqTPMBody = `{"error":{"message":"Rate limit reached for model ` + "`llama-3.1-8b-instant`" + ` in organization ` + "`org_x`" + ` service tier ` + "`on_demand`" + ` on tokens per minute (TPM): Limit 8000, Used 7972, Requested 1351. Please try again in 5.289s. Need more tokens? Upgrade to Dev Tier today.","type":"tokens","code":"rate_limit_exceeded"}}`

	groqRPDBody = `{"error":{"message":"Rate limit reached for model ` + "`llama-3.1-8b-instant`" + ` in organization ` + "`org_x`" + ` service tier ` + "`on_demand`" + ` on requests per day (RPD): Limit 14400, Used 14400, Requested 1. Please try again in 7m12s. Need more requests? Upgrade to Dev Tier today.","type":"requests","code":"rate_limit_exceeded"}}`

	groqRPMBody = `{"error":{"message":"Rate limit reached for model ` + "`llama-3.1-8b-instant`" + ` in organization ` + "`org_x`" + ` service tier ` + "`on_demand`" + ` on requests per minute (RPM): Limit 30, Used 30, Requested 1. Please try again in 120ms.","type":"requests","code":"rate_limit_exceeded"}}`

	groqTPDBody = `{"error":{"message":"Rate limit reached for model ` + "`llama-3.1-8b-instant`" + ` in organization ` + "`org_x`" + ` service tier ` + "`on_demand`" + ` on tokens per day (TPD): Limit 200000, Used 199512, Requested 1030. Please try again in 1m30.5s.","type":"tokens","code":"rate_limit_exceeded"}}`

	groqTooLarge413Body = `{"error":{"message":"Request too large for model ` + "`llama-3.1-8b-instant`" + ` in organization ` + "`org_x`" + ` service tier ` + "`on_demand`" + ` on tokens per minute (TPM): Limit 8000, Requested 11387, please reduce your message size and try again. Need more tokens? Upgrade to Dev Tier today.","type":"tokens","code":"rate_limit_exceeded"}}`

	// Seed 000: a 429 with retry-after 900 that no wait will fix.
	groqOTPMSeedBody = `{"error":{"message":"Request too large for model ` + "`qwen/qwen3.8-27b`" + ` in organization ` + "`org_x`" + ` service tier ` + "`on_demand`" + ` on output tokens per minute (OTPM): Limit 1000, Requested 1252. The request's expected output tokens exceed the enforced limit; reduce max_tokens (or the request's expected output) and try again.","type":"tokens","code":"rate_limit_exceeded"}}`

	openaiTPMBody = `{"error":{"message":"Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Used 29500, Requested 1200. Please try again in 1.4s. Visit the rate limits page of your account to learn more.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`

	openaiRPMBody = `{"error":{"message":"Rate limit reached for gpt-4o in organization org-x on requests per min (RPM): Limit 500, Used 500, Requested 1. Please try again in 120ms.","type":"requests","param":null,"code":"rate_limit_exceeded"}}`

	openaiRPDBody = `{"error":{"message":"Rate limit reached for gpt-4o-mini in organization org-x on requests per day (RPD): Limit 10000, Used 10000, Requested 1. Please try again in 8.64s.","type":"requests","param":null,"code":"rate_limit_exceeded"}}`

	openaiTPDBody = `{"error":{"message":"Rate limit reached for gpt-4o-mini in organization org-x on tokens per day (TPD): Limit 2000000, Used 1999000, Requested 1500. Please try again in 6m0s.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`

	openaiTooLargeBody = `{"error":{"message":"Request too large for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Requested 36000. The input or output tokens must be reduced in order to run successfully. Visit the rate limits page of your account to learn more.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`

	openaiQuotaBody = `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`

	// Older OpenAI wording, still returned by some compatible servers.
	openaiLegacyRPMBody = `{"error":{"message":"Rate limit reached for default-gpt-3.5-turbo in organization org-x on requests per min. Limit: 3 / min. Current: 4 / min. Please retry after 20 seconds.","type":"requests","param":null,"code":null}}`

	anthropicITPMBody = `{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed your organization's rate limit of 30,000 input tokens per minute (org: 0000, model: claude-sonnet-4-5). For details, refer to the rate limits documentation. You can see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later."}}`

	anthropicOTPMBody = `{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization (0000) of 8,000 output tokens per minute. For details, refer to the rate limits documentation. You can see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later."}}`

	anthropicRPMBody = `{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed your organization's rate limit of 50 requests per minute (org: 0000, model: claude-haiku-4-5)."}}`

	anthropicLegacyBody = `{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit. Please reduce the prompt length or the maximum tokens requested, or try again later."}}`

	anthropicOverloadedBody = `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`

	anthropicCreditBody = `{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."}}`

	anthropicTooLargeBody = `{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}}`
)

func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

func msgOf(t *testing.T, body string) string {
	t.Helper()
	return parseErrorBody([]byte(body)).Message
}

func TestClassifyGolden(t *testing.T) {
	t.Parallel()
	seedLog, err := os.ReadFile("testdata/seed000_otpm_log.txt")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		profile Profile
		status  int
		header  http.Header
		body    string
		want    error
	}{
		{"groq TPM 429 takes the longer of header and message", Groq, 429, header("retry-after", "6"), groqTPMBody,
			&RateLimitError{Limit: governor.TPM, LimitKnown: true, Max: 8000, Used: 7972, Requested: 1351,
				RetryAfter: 6 * time.Second, Status: 429, Message: msgOf(t, groqTPMBody)}},
		{"groq TPM 429 message wait longer than header", Groq, 429, header("retry-after", "5"), groqTPMBody,
			&RateLimitError{Limit: governor.TPM, LimitKnown: true, Max: 8000, Used: 7972, Requested: 1351,
				RetryAfter: 5289 * time.Millisecond, Status: 429, Message: msgOf(t, groqTPMBody)}},
		{"groq RPD", Groq, 429, header("retry-after", "432"), groqRPDBody,
			&RateLimitError{Limit: governor.RPD, LimitKnown: true, Max: 14400, Used: 14400, Requested: 1,
				RetryAfter: 432 * time.Second, Status: 429, Message: msgOf(t, groqRPDBody)}},
		{"groq RPM", Groq, 429, nil, groqRPMBody,
			&RateLimitError{Limit: governor.RPM, LimitKnown: true, Max: 30, Used: 30, Requested: 1,
				RetryAfter: 120 * time.Millisecond, Status: 429, Message: msgOf(t, groqRPMBody)}},
		{"groq TPD", Groq, 429, nil, groqTPDBody,
			&RateLimitError{Limit: governor.TPD, LimitKnown: true, Max: 200000, Used: 199512, Requested: 1030,
				RetryAfter: 90500 * time.Millisecond, Status: 429, Message: msgOf(t, groqTPDBody)}},
		{"groq 413 request too large on TPM", Groq, 413, nil, groqTooLarge413Body,
			&TooLargeError{Limit: governor.TPM, LimitKnown: true, Max: 8000, Requested: 11387,
				Status: 413, Message: msgOf(t, groqTooLarge413Body)}},
		{"seed 000: groq OTPM too large as 429 with retry-after 900", Groq, 429, header("retry-after", "900"), groqOTPMSeedBody,
			&TooLargeError{Limit: governor.OTPM, LimitKnown: true, Max: 1000, Requested: 1252,
				Status: 429, Message: msgOf(t, groqOTPMSeedBody)}},
		{"seed 000: the OTPM message as the log printed it, not JSON", Groq, 429, header("retry-after", "900"), string(seedLog),
			&TooLargeError{Limit: governor.OTPM, LimitKnown: true, Max: 1000, Requested: 1252,
				Status: 429, Message: strings.TrimSpace(string(seedLog))}},
		{"openai TPM", OpenAI, 429, nil, openaiTPMBody,
			&RateLimitError{Limit: governor.TPM, LimitKnown: true, Max: 30000, Used: 29500, Requested: 1200,
				RetryAfter: 1400 * time.Millisecond, Status: 429, Message: msgOf(t, openaiTPMBody)}},
		{"openai RPM with retry-after-ms", OpenAI, 429, header("retry-after-ms", "150.5"), openaiRPMBody,
			&RateLimitError{Limit: governor.RPM, LimitKnown: true, Max: 500, Used: 500, Requested: 1,
				RetryAfter: 150500 * time.Microsecond, Status: 429, Message: msgOf(t, openaiRPMBody)}},
		{"openai RPD", OpenAI, 429, nil, openaiRPDBody,
			&RateLimitError{Limit: governor.RPD, LimitKnown: true, Max: 10000, Used: 10000, Requested: 1,
				RetryAfter: 8640 * time.Millisecond, Status: 429, Message: msgOf(t, openaiRPDBody)}},
		{"openai TPD", OpenAI, 429, nil, openaiTPDBody,
			&RateLimitError{Limit: governor.TPD, LimitKnown: true, Max: 2000000, Used: 1999000, Requested: 1500,
				RetryAfter: 6 * time.Minute, Status: 429, Message: msgOf(t, openaiTPDBody)}},
		{"openai request too large is a 429", OpenAI, 429, nil, openaiTooLargeBody,
			&TooLargeError{Limit: governor.TPM, LimitKnown: true, Max: 30000, Requested: 36000,
				Status: 429, Message: msgOf(t, openaiTooLargeBody)}},
		{"openai insufficient_quota is a 429 never retried", OpenAI, 429, header("retry-after", "20"), openaiQuotaBody,
			&QuotaError{Status: 429, Type: "insufficient_quota", Code: "insufficient_quota", Message: msgOf(t, openaiQuotaBody)}},
		{"openai legacy wording", OpenAI, 429, nil, openaiLegacyRPMBody,
			&RateLimitError{Limit: governor.RPM, LimitKnown: true, Max: 3, Used: 4,
				RetryAfter: 20 * time.Second, Status: 429, Message: msgOf(t, openaiLegacyRPMBody)}},
		{"anthropic ITPM with retry-after", Anthropic, 429, header("retry-after", "20"), anthropicITPMBody,
			&RateLimitError{Limit: governor.ITPM, LimitKnown: true, Max: 30000,
				RetryAfter: 20 * time.Second, Status: 429, Message: msgOf(t, anthropicITPMBody)}},
		{"anthropic OTPM", Anthropic, 429, header("retry-after", "3"), anthropicOTPMBody,
			&RateLimitError{Limit: governor.OTPM, LimitKnown: true, Max: 8000,
				RetryAfter: 3 * time.Second, Status: 429, Message: msgOf(t, anthropicOTPMBody)}},
		{"anthropic RPM", Anthropic, 429, header("retry-after", "1"), anthropicRPMBody,
			&RateLimitError{Limit: governor.RPM, LimitKnown: true, Max: 50,
				RetryAfter: time.Second, Status: 429, Message: msgOf(t, anthropicRPMBody)}},
		{"anthropic older wording", Anthropic, 429, nil, anthropicLegacyBody,
			&RateLimitError{Limit: governor.ITPM, LimitKnown: true, Status: 429, Message: msgOf(t, anthropicLegacyBody)}},
		{"anthropic 529 overloaded is not quota", Anthropic, 529, header("retry-after", "4"), anthropicOverloadedBody,
			&OverloadedError{Status: 529, RetryAfter: 4 * time.Second, Message: "Overloaded"}},
		{"anthropic credit balance is quota", Anthropic, 400, nil, anthropicCreditBody,
			&QuotaError{Status: 400, Type: "invalid_request_error", Message: msgOf(t, anthropicCreditBody)}},
		{"anthropic 413 request_too_large names no limit", Anthropic, 413, nil, anthropicTooLargeBody,
			&TooLargeError{Status: 413, Message: msgOf(t, anthropicTooLargeBody)}},
		{"empty 429 is an unclassified rate limit", OpenAI, 429, nil, "",
			&RateLimitError{Status: 429}},
		{"429 naming no limit takes it from the one exhausted header", Groq, 429,
			header("x-ratelimit-remaining-tokens", "0", "x-ratelimit-remaining-requests", "100", "retry-after", "2"), "Too Many Requests",
			&RateLimitError{Limit: governor.TPM, LimitKnown: true, RetryAfter: 2 * time.Second, Status: 429, Message: "Too Many Requests"}},
		{"empty 413 is too large with no limit", Groq, 413, nil, "",
			&TooLargeError{Status: 413}},
		{"empty 503 is overload", OpenAI, 503, header("retry-after", "1.5"), "",
			&OverloadedError{Status: 503, RetryAfter: 1500 * time.Millisecond}},
		{"empty 529 is overload", Anthropic, 529, nil, "",
			&OverloadedError{Status: 529}},
		{"groq 498 flex capacity is overload", Groq, 498, nil, `{"error":{"message":"Capacity exceeded","type":"capacity_exceeded"}}`,
			&OverloadedError{Status: 498, Message: "Capacity exceeded"}},
		{"html 502 from a proxy", OpenAI, 502, nil, "<html>Bad Gateway</html>",
			&StatusError{Status: 502, Message: "<html>Bad Gateway</html>"}},
		{"401 invalid key", OpenAI, 401, nil, `{"error":{"message":"Invalid API Key","type":"invalid_request_error","code":"invalid_api_key"}}`,
			&StatusError{Status: 401, Type: "invalid_request_error", Code: "invalid_api_key", Message: "Invalid API Key"}},
		{"400 with a numeric code", OpenAI, 400, nil, `{"error":{"message":"bad","type":"invalid_request_error","code":400}}`,
			&StatusError{Status: 400, Type: "invalid_request_error", Code: "400", Message: "bad"}},
		{"proxy shape error string", OpenAI, 500, nil, `{"error":"upstream exploded"}`,
			&StatusError{Status: 500, Message: "upstream exploded"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := tt.profile.classify(tt.status, tt.header, []byte(tt.body), time.Unix(0, 0))
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("classify:\n got %#v\nwant %#v", got, tt.want)
			}
		})
	}
}

func TestClassifySuccessIsNil(t *testing.T) {
	t.Parallel()
	for _, status := range []int{200, 201, 204, 299} {
		if err := Groq.Classify(status, nil, []byte(groqTPMBody)); err != nil {
			t.Errorf("status %d: %v", status, err)
		}
	}
}

func TestRetryHelpers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		err       error
		retryable bool
		wait      time.Duration
		waitOK    bool
		limit     governor.Limit
		limitOK   bool
	}{
		{"rate limit", Groq.Classify(429, header("retry-after", "6"), []byte(groqTPMBody)), true, 6 * time.Second, true, governor.TPM, true},
		{"seed OTPM never waits", Groq.Classify(429, header("retry-after", "900"), []byte(groqOTPMSeedBody)), false, 0, false, governor.OTPM, true},
		{"413", Groq.Classify(413, nil, []byte(groqTooLarge413Body)), false, 0, false, governor.TPM, true},
		{"quota", OpenAI.Classify(429, nil, []byte(openaiQuotaBody)), false, 0, false, 0, false},
		{"overloaded", Anthropic.Classify(529, header("retry-after", "4"), []byte(anthropicOverloadedBody)), true, 4 * time.Second, true, 0, false},
		{"500", OpenAI.Classify(500, nil, nil), true, 0, false, 0, false},
		{"408", OpenAI.Classify(408, nil, nil), true, 0, false, 0, false},
		{"400", OpenAI.Classify(400, nil, nil), false, 0, false, 0, false},
		{"in-stream error", &StatusError{Status: 0}, true, 0, false, 0, false},
		{"transport", &TransportError{Kind: Reset}, true, 0, false, 0, false},
		{"wrapped rate limit", errorsJoin(Groq.Classify(429, nil, []byte(groqRPDBody))), true, 7*time.Minute + 12*time.Second, true, governor.RPD, true},
		{"no max tokens", ErrNoMaxTokens, false, 0, false, 0, false},
		{"nil", nil, false, 0, false, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Retryable(tt.err); got != tt.retryable {
				t.Errorf("Retryable = %v, want %v", got, tt.retryable)
			}
			if d, ok := RetryAfter(tt.err); d != tt.wait || ok != tt.waitOK {
				t.Errorf("RetryAfter = %v, %v; want %v, %v", d, ok, tt.wait, tt.waitOK)
			}
			if l, ok := LimitOf(tt.err); l != tt.limit || ok != tt.limitOK {
				t.Errorf("LimitOf = %v, %v; want %v, %v", l, ok, tt.limit, tt.limitOK)
			}
		})
	}
}

func errorsJoin(err error) error { return errors.Join(errors.New("step summarize"), err) }

func TestErrorMessages(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want string
	}{
		{Groq.Classify(429, header("retry-after", "900"), []byte(groqOTPMSeedBody)),
			"llm: request too large for output tokens per minute (OTPM): needs 1,252 output tokens, limit is 1,000; lower max_tokens (retrying never helps; HTTP 429)"},
		{Groq.Classify(413, nil, []byte(groqTooLarge413Body)),
			"llm: request too large for tokens per minute (TPM): needs 11,387 tokens, limit is 8,000; shorten the prompt or lower max_tokens (retrying never helps; HTTP 413)"},
		{Groq.Classify(429, header("retry-after", "6"), []byte(groqTPMBody)),
			"llm: rate limited on tokens per minute (TPM): limit 8,000, used 7,972, requested 1,351; retry after 6s (HTTP 429)"},
		{OpenAI.Classify(429, nil, nil), "llm: rate limited (the provider named no limit) (HTTP 429)"},
		{OpenAI.Classify(429, nil, []byte(openaiQuotaBody)),
			"llm: quota exhausted (billing, not a rate limit; retrying never helps): You exceeded your current quota, please check your plan and billing details. (HTTP 429)"},
		{Anthropic.Classify(529, header("retry-after", "4"), []byte(anthropicOverloadedBody)),
			"llm: provider overloaded; retry after 4s: Overloaded (HTTP 529)"},
		{OpenAI.Classify(401, nil, []byte(`{"error":{"message":"Invalid API Key","type":"invalid_request_error","code":"invalid_api_key"}}`)),
			"llm: HTTP 401 (invalid_request_error invalid_api_key): Invalid API Key"},
		{&TransportError{Kind: Malformed, Err: errors.New("unexpected end of JSON input")},
			"llm: transport: malformed: unexpected end of JSON input"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error():\n got %q\nwant %q", got, tt.want)
		}
	}
}

func TestErrorMessageIsBounded(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 1000)
	err := OpenAI.Classify(400, nil, []byte(`{"error":{"message":"`+long+`"}}`))
	if n := len(err.Error()); n > maxMessageInError+100 {
		t.Fatalf("error string is %d bytes", n)
	}
	if !strings.HasSuffix(err.Error(), "…") {
		t.Fatalf("truncated message should end with an ellipsis: %q", err.Error()[len(err.Error())-20:])
	}
}

func TestLimitFromMessage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		text string
		want governor.Limit
		ok   bool
	}{
		{"on tokens per minute (TPM): Limit 8000", governor.TPM, true},
		{"on requests per day (RPD): Limit 14400", governor.RPD, true},
		{"on requests per minute (RPM)", governor.RPM, true},
		{"on tokens per day (TPD)", governor.TPD, true},
		{"on input tokens per minute (ITPM)", governor.ITPM, true},
		{"on output tokens per minute (OTPM)", governor.OTPM, true},
		{"on tokens per min (TPM): Limit 30000", governor.TPM, true},
		{"on requests per min (RPM)", governor.RPM, true},
		{"on requests per min. Limit: 3 / min.", governor.RPM, true},
		{"on tokens per min. Limit: 150000 / min.", governor.TPM, true},
		{"rate limit of 30,000 input tokens per minute", governor.ITPM, true},
		{"of 8,000 output tokens per minute", governor.OTPM, true},
		{"rate limit of 50 requests per minute", governor.RPM, true},
		{"rate limit of 80,000 tokens per minute", governor.TPM, true},
		{"Number of requests has exceeded your per-minute rate limit", governor.RPM, true},
		{"Number of request tokens has exceeded your per-minute rate limit", governor.ITPM, true},
		{"Too Many Requests", 0, false},
		{"", 0, false},
	}
	for _, tt := range tests {
		got, ok := limitFromMessage(tt.text)
		if got != tt.want || ok != tt.ok {
			t.Errorf("limitFromMessage(%q) = %v, %v; want %v, %v", tt.text, got, ok, tt.want, tt.ok)
		}
	}
}

func TestMessageRetryAfter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		text string
		want time.Duration
	}{
		{"Please try again in 7m12s.", 7*time.Minute + 12*time.Second},
		{"Please try again in 5.289s. Need more", 5289 * time.Millisecond},
		{"Please try again in 120ms.", 120 * time.Millisecond},
		{"Please try again in 1m30.5s.", 90500 * time.Millisecond},
		{"Please try again in 2m59.56s.", 2*time.Minute + 59560*time.Millisecond},
		{"Please try again in 1h2m3s.", time.Hour + 2*time.Minute + 3*time.Second},
		{"please TRY AGAIN IN 6m0s", 6 * time.Minute},
		{"Please retry after 20 seconds.", 20 * time.Second},
		{"Please retry after 1.5s", 1500 * time.Millisecond},
		{"try again later", 0},
		{"try again in 9999h", maxWait},
		{"try again in 99999999999h", 0}, // overflows a Duration: ignored
		{"", 0},
	}
	for _, tt := range tests {
		if got := messageRetryAfter(tt.text); got != tt.want {
			t.Errorf("messageRetryAfter(%q) = %v, want %v", tt.text, got, tt.want)
		}
	}
}

func TestHeaderRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 10, 19, 3, 59, 0, 0, time.UTC)
	tests := []struct {
		name string
		h    http.Header
		want time.Duration
	}{
		{"seconds", header("retry-after", "900"), 900 * time.Second},
		{"fractional seconds", header("retry-after", "0.25"), 250 * time.Millisecond},
		{"milliseconds", header("retry-after-ms", "1234"), 1234 * time.Millisecond},
		{"both: the longer", header("retry-after", "2", "retry-after-ms", "2500"), 2500 * time.Millisecond},
		{"http date", header("retry-after", now.Add(90*time.Second).Format(http.TimeFormat)), 90 * time.Second},
		{"http date in the past", header("retry-after", now.Add(-time.Hour).Format(http.TimeFormat)), 0},
		{"negative", header("retry-after", "-5"), 0},
		{"garbage", header("retry-after", "soon", "retry-after-ms", "NaN"), 0},
		// What was asked, in full, for the log; boundWait bounds it after.
		{"huge", header("retry-after", "1e300"), math.MaxInt64},
		{"10^9 seconds", header("retry-after", "999999999"), 999999999 * time.Second},
		{"infinite", header("retry-after", "Inf"), math.MaxInt64},
		{"more than a float holds", header("retry-after", "1e400"), math.MaxInt64},
		{"milliseconds, huge", header("retry-after-ms", "1e300"), math.MaxInt64},
		{"http date in 2099", header("retry-after", "Thu, 01 Jan 2099 00:00:00 GMT"), time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC).Sub(now)},
		{"http date past the year 2262", header("retry-after", "Fri, 01 Jan 9999 00:00:00 GMT"), math.MaxInt64},
		{"none", nil, 0},
	}
	for _, tt := range tests {
		if got := headerRetryAfter(tt.h, now); got != tt.want {
			t.Errorf("%s: headerRetryAfter = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestParseErrorBodyShapes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		body string
		want errorBody
	}{
		{groqTPMBody, errorBody{Message: msgOf(t, groqTPMBody), Type: "tokens", Code: "rate_limit_exceeded"}},
		{anthropicOverloadedBody, errorBody{Message: "Overloaded", Type: "overloaded_error"}},
		{`{"message":"plain","code":"x"}`, errorBody{Message: "plain", Code: "x"}},
		{`{"error":null}`, errorBody{}},
		{`{"error":{"message":null,"type":null,"code":null}}`, errorBody{}},
		{`[1,2]`, errorBody{Message: "[1,2]"}},
		{"  ", errorBody{}},
		{"\xff\xfe oops", errorBody{Message: "\uFFFD oops"}},
	}
	for _, tt := range tests {
		if got := parseErrorBody([]byte(tt.body)); got != tt.want {
			t.Errorf("parseErrorBody(%q) = %+v, want %+v", tt.body, got, tt.want)
		}
	}
}
