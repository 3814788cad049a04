package llm

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
)

// feedbackCase is one outcome of a call, as the profile's wire shows it (or
// as the client reports a failure below HTTP), and the governor's state it
// must leave behind.
type feedbackCase struct {
	name string
	// The answer: a 2xx with headers and usage when ok; otherwise status,
	// header and body classified by the profile, or err when set.
	ok     bool
	status int
	header http.Header
	body   string
	err    error

	kind    string                   // the error's type, so the case tests what it says
	kept    bool                     // the call's charge stands
	paused  time.Duration            // a call right after waits this long (0: admitted at once)
	learned map[governor.Limit]int64 // limits whose allowance changes
	flowRej governor.Limit           // the limit counted in the flow's rejections
	counted bool                     // whether flowRej is counted
}

// feedbackProfile is a profile, a governor configured as one of its keys
// might be, and the answers that differ by profile.
type feedbackProfile struct {
	profile Profile
	cfg     governor.Config
	cases   []feedbackCase
}

var (
	reserved = governor.Cost{Requests: 1, Input: 100, Output: 100}
	usage    = Usage{PromptTokens: 150, CompletionTokens: 40, TotalTokens: 190}
)

func feedbackProfiles(now time.Time) []feedbackProfile {
	// Pacing is off: it would hold a second call of a fresh governor, which
	// is not what these cases are about.
	cfg := func(settle bool, limits governor.Limits) governor.Config {
		return governor.Config{Key: "k", Limits: limits, SettleOutput: settle, DayBurst: -1, Logger: slog.New(slog.DiscardHandler)}
	}
	const (
		openaiShape4xx  = `{"error":{"message":"'messages' must contain at least one message","type":"invalid_request_error","param":null,"code":null}}`
		openaiShape5xx  = `{"error":{"message":"The server had an error while processing your request.","type":"server_error","param":null,"code":null}}`
		openaiShapeBusy = `{"error":{"message":"The engine is currently overloaded, please try again later","type":"server_error","param":null,"code":null}}`
		openaiShape429  = `{"error":{"message":"Too many requests, slow down.","type":"requests","param":null,"code":"rate_limit_exceeded"}}`
	)
	anthropicReset := now.Add(20 * time.Second).UTC().Format(time.RFC3339)
	return []feedbackProfile{
		{
			profile: Groq,
			cfg:     cfg(false, governor.Limits{governor.TPM: 9000}),
			cases: []feedbackCase{
				{name: "success", ok: true, header: header(
					"x-ratelimit-limit-requests", "14400", "x-ratelimit-remaining-requests", "14399", "x-ratelimit-reset-requests", "6s",
					"x-ratelimit-limit-tokens", "8500", "x-ratelimit-remaining-tokens", "8300", "x-ratelimit-reset-tokens", "1.4s"),
					kept: true, learned: map[governor.Limit]int64{governor.RPD: 14400, governor.TPM: 8500}},
				{name: "429 naming TPM", status: 429, header: header("retry-after", "6"), body: groqTPMBody,
					kind: "*llm.RateLimitError", paused: 6 * time.Second,
					learned: map[governor.Limit]int64{governor.TPM: 8000}, flowRej: governor.TPM, counted: true},
				{name: "429 naming RPM, a limit no header reports", status: 429, body: groqRPMBody,
					kind: "*llm.RateLimitError", paused: 120 * time.Millisecond,
					learned: map[governor.Limit]int64{governor.RPM: 30}, flowRej: governor.RPM, counted: true},
				{name: "429 naming none", status: 429, body: openaiShape429,
					kind: "*llm.RateLimitError", paused: time.Second},
				{name: "413 too large on TPM", status: 413, body: groqTooLarge413Body,
					kind: "*llm.TooLargeError", learned: map[governor.Limit]int64{governor.TPM: 8000}, flowRej: governor.TPM, counted: true},
				{name: "OTPM too large as a 429 with retry-after 900 is never waited on", status: 429, header: header("retry-after", "900"), body: groqOTPMSeedBody,
					kind: "*llm.TooLargeError", learned: map[governor.Limit]int64{governor.OTPM: 1000}, flowRej: governor.OTPM, counted: true},
				{name: "quota", status: 429, body: openaiQuotaBody, kind: "*llm.QuotaError"},
				{name: "other 4xx", status: 400, body: openaiShape4xx, kind: "*llm.StatusError"},
				{name: "5xx", status: 500, body: `{"error":{"message":"Internal Server Error","type":"internal_server_error"}}`, kind: "*llm.StatusError", kept: true},
				{name: "overload 503", status: 503, body: `{"error":{"message":"Service Unavailable","type":"internal_server_error","code":"service_unavailable"}}`, kind: "*llm.OverloadedError", kept: true},
				{name: "overload 498", status: 498, body: `{"error":{"message":"Flex tier capacity exceeded","type":"internal_server_error"}}`, kind: "*llm.OverloadedError", kept: true},
			},
		},
		{
			profile: OpenAI,
			cfg:     cfg(false, governor.Limits{governor.RPM: 500, governor.TPM: 40000}),
			cases: []feedbackCase{
				{name: "success", ok: true, header: header(
					"x-ratelimit-limit-requests", "600", "x-ratelimit-remaining-requests", "599", "x-ratelimit-reset-requests", "100ms",
					"x-ratelimit-limit-tokens", "40000", "x-ratelimit-remaining-tokens", "39800", "x-ratelimit-reset-tokens", "300ms"),
					kept: true}, // RPM 600 is above the configured 500: ignored
				{name: "429 naming TPM", status: 429, body: openaiTPMBody,
					kind: "*llm.RateLimitError", paused: 1400 * time.Millisecond,
					learned: map[governor.Limit]int64{governor.TPM: 30000}, flowRej: governor.TPM, counted: true},
				{name: "429 naming TPD", status: 429, body: openaiTPDBody,
					kind: "*llm.RateLimitError", paused: 6 * time.Minute,
					learned: map[governor.Limit]int64{governor.TPD: 2000000}, flowRej: governor.TPD, counted: true},
				{name: "429 naming none", status: 429, body: openaiShape429, kind: "*llm.RateLimitError", paused: time.Second},
				{name: "too large is a 429", status: 429, body: openaiTooLargeBody,
					kind: "*llm.TooLargeError", learned: map[governor.Limit]int64{governor.TPM: 30000}, flowRej: governor.TPM, counted: true},
				{name: "insufficient_quota", status: 429, header: header("retry-after", "20"), body: openaiQuotaBody, kind: "*llm.QuotaError"},
				{name: "other 4xx", status: 404, body: openaiShape4xx, kind: "*llm.StatusError"},
				{name: "5xx", status: 502, body: openaiShape5xx, kind: "*llm.StatusError", kept: true},
				{name: "408", status: 408, body: openaiShape5xx, kind: "*llm.StatusError", kept: true},
				{name: "overload 503", status: 503, body: openaiShapeBusy, kind: "*llm.OverloadedError", kept: true},
			},
		},
		{
			profile: Anthropic,
			cfg:     cfg(true, governor.Limits{governor.RPM: 50, governor.ITPM: 40000, governor.OTPM: 8000}),
			cases: []feedbackCase{
				{name: "success", ok: true, header: header(
					"anthropic-ratelimit-requests-limit", "60", "anthropic-ratelimit-requests-remaining", "59", "anthropic-ratelimit-requests-reset", anthropicReset,
					"anthropic-ratelimit-input-tokens-limit", "40000", "anthropic-ratelimit-input-tokens-remaining", "39000", "anthropic-ratelimit-input-tokens-reset", anthropicReset,
					"anthropic-ratelimit-output-tokens-limit", "8000", "anthropic-ratelimit-output-tokens-remaining", "7000", "anthropic-ratelimit-output-tokens-reset", anthropicReset),
					kept: true}, // RPM 60 is above the configured 50: ignored
				{name: "429 naming ITPM", status: 429, header: header("retry-after", "3"), body: anthropicITPMBody,
					kind: "*llm.RateLimitError", paused: 3 * time.Second,
					learned: map[governor.Limit]int64{governor.ITPM: 30000}, flowRej: governor.ITPM, counted: true},
				{name: "429 naming none", status: 429, body: `{"type":"error","error":{"type":"rate_limit_error","message":"Rate limited. Please try again later."}}`,
					kind: "*llm.RateLimitError", paused: time.Second},
				{name: "413 too large on ITPM", status: 413,
					body: `{"type":"error","error":{"type":"invalid_request_error","message":"Request too large: this request needs 50,000 input tokens, more than your organization's rate limit of 30,000 input tokens per minute (org: 0000, model: claude-sonnet-4-5) allows at once."}}`,
					kind: "*llm.TooLargeError", learned: map[governor.Limit]int64{governor.ITPM: 30000}, flowRej: governor.ITPM, counted: true},
				{name: "413 too large naming no limit", status: 413, body: anthropicTooLargeBody, kind: "*llm.TooLargeError"},
				{name: "credit balance too low", status: 400, body: anthropicCreditBody, kind: "*llm.QuotaError"},
				{name: "other 4xx", status: 400, body: `{"type":"error","error":{"type":"invalid_request_error","message":"messages: at least one message is required"}}`, kind: "*llm.StatusError"},
				{name: "5xx", status: 500, body: `{"type":"error","error":{"type":"api_error","message":"Internal server error"}}`, kind: "*llm.StatusError", kept: true},
				{name: "overload 529", status: 529, body: anthropicOverloadedBody, kind: "*llm.OverloadedError", kept: true},
			},
		},
	}
}

// commonFeedbackCases are the outcomes whose error does not depend on the
// profile; the governor's accounting still does.
var commonFeedbackCases = []feedbackCase{
	{name: "timeout", err: &TransportError{Kind: Timeout, Err: context.DeadlineExceeded}, kind: "*llm.TransportError", kept: true},
	{name: "connection reset", err: &TransportError{Kind: Reset, Err: io.ErrUnexpectedEOF}, kind: "*llm.TransportError", kept: true},
	{name: "bad JSON", err: &TransportError{Kind: Malformed, Err: fmt.Errorf("chat completion body: unexpected end of JSON input")}, kind: "*llm.TransportError", kept: true},
	{name: "caller cancelled during the call", err: fmt.Errorf("llm: %w", context.Canceled), kind: "*fmt.wrapError", kept: true},
	{name: "no max_tokens, never sent", err: ErrNoMaxTokens, kind: "*errors.errorString"},
}

func TestFeedback(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 10, 19, 4, 0, 0, 0, time.UTC)
	for _, fp := range feedbackProfiles(now) {
		for _, tc := range append(fp.cases, commonFeedbackCases...) {
			t.Run(string(fp.profile)+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				g, err := governor.New(fp.cfg)
				if err != nil {
					t.Fatal(err)
				}
				r, err := g.Reserve(now, "f", reserved)
				if err != nil {
					t.Fatal(err)
				}
				g.Advance(now)
				if !r.Admitted() {
					t.Fatal("the call was not admitted")
				}

				var (
					used governor.Cost
					snap governor.Snapshot
				)
				callErr := tc.err
				switch {
				case tc.ok:
					used, snap = usage.Governor(), fp.profile.Snapshot(tc.header, now)
				case callErr == nil:
					callErr = fp.profile.Classify(tc.status, tc.header, []byte(tc.body))
				}
				if got := fmt.Sprintf("%T", callErr); !tc.ok && got != tc.kind {
					t.Fatalf("the answer is a %s (%v), want %s", got, callErr, tc.kind)
				}
				Feedback(now, g, r, used, snap, callErr)

				st := g.Stats(now)
				f := st.Flows[0]
				wantTokens, wantAdmitted, wantRequests := governor.Cost{}, int64(0), int64(0)
				if tc.kept {
					wantTokens, wantAdmitted, wantRequests = reserved, 1, 1
				}
				if tc.ok {
					// The provider's input count; the output as the
					// accounting keeps it: max_tokens, or the real output.
					wantTokens.Input = usage.PromptTokens
					if fp.cfg.SettleOutput {
						wantTokens.Output = usage.CompletionTokens
					}
				}
				if f.Tokens != wantTokens || f.Admitted != wantAdmitted {
					t.Errorf("flow charged %+v over %d calls, want %+v over %d (kept: %v)", f.Tokens, f.Admitted, wantTokens, wantAdmitted, tc.kept)
				}
				if rpm := st.Limits[governor.RPM].Used; tc.flowRej != governor.RPM && rpm != wantRequests {
					t.Errorf("RPM used %d, want %d", rpm, wantRequests)
				}

				var wantRej [governor.NumLimits]int64
				if tc.counted {
					wantRej[tc.flowRej] = 1
				}
				if f.Rejections != wantRej {
					t.Errorf("flow rejections %v, want %v", f.Rejections, wantRej)
				}

				want := fp.cfg.Limits
				for l, v := range tc.learned {
					want[l] = v
				}
				if got := g.Limits(); got != want {
					t.Errorf("limits %v, want %v", got, want)
				}

				// The key is held for what the provider asked, and no longer.
				probe, err := g.Reserve(now, "probe", governor.Cost{Requests: 1, Input: 10, Output: 10})
				if err != nil {
					t.Fatal(err)
				}
				g.Advance(now)
				if got := probe.Admitted(); got != (tc.paused == 0) {
					t.Fatalf("a call right after admitted: %v, want %v", got, tc.paused == 0)
				}
				if tc.paused > 0 {
					if g.Advance(now.Add(tc.paused - time.Millisecond)); probe.Admitted() {
						t.Errorf("admitted before the %v the provider asked for", tc.paused)
					}
					if g.Advance(now.Add(tc.paused)); !probe.Admitted() {
						t.Errorf("still held after the %v the provider asked for", tc.paused)
					}
				}
			})
		}
	}
}

// TestFeedbackStreamThatFailed: a stream that began was counted, whatever
// error ended it; its caller passes nil with what usage came.
func TestFeedbackStreamThatFailed(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 10, 19, 4, 0, 0, 0, time.UTC)
	g, err := governor.New(governor.Config{Limits: governor.Limits{governor.TPM: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := g.Reserve(now, "f", reserved)
	g.Advance(now)
	Feedback(now, g, r, governor.Cost{}, governor.Snapshot{}, nil)
	if used := g.Stats(now).Limits[governor.TPM].Used; used != reserved.Tokens() {
		t.Errorf("TPM used %d, want the charge kept as reserved, %d", used, reserved.Tokens())
	}
}

// A success whose usage says far more than the call could have used — the
// billion prompt tokens a hostile upstream reported for a 10-token prompt —
// is settled within bounds: input at governor.InputFactor times the
// estimate plus governor.InputSlack, output at what was reserved. The
// key's day window, its budget and its pacers take that, and the next call
// is admitted at once, where the whole count filled TPD and the day's
// budget and held every flow for months on the day pacers. The cut is
// logged once for the two calls.
func TestFeedbackBoundsAnInflatedUsage(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 10, 19, 4, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		settle bool // Config.SettleOutput
		usage  Usage
		want   governor.Cost // the settled tokens
		cut    string        // the part logged as cut
	}{
		{"input", false, Usage{PromptTokens: 1_000_000_000, CompletionTokens: 5}, governor.Cost{Input: 8*13 + 4096, Output: 10}, "input"},
		{"input at the int64 bound", false, Usage{PromptTokens: math.MaxInt64, CompletionTokens: 5}, governor.Cost{Input: 8*13 + 4096, Output: 10}, "input"},
		{"output", true, Usage{PromptTokens: 12, CompletionTokens: 1_000_000_000}, governor.Cost{Input: 12, Output: 10}, "output"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			log := &bytes.Buffer{}
			g, err := governor.New(governor.Config{
				Key:          "k",
				Limits:       governor.Budget{Day: 5}.Limits(governor.Limits{governor.RPM: 600, governor.TPD: 10_000_000}),
				Price:        governor.Price{Input: 1, Output: 1},
				SettleOutput: tc.settle,
				Logger:       slog.New(slog.NewTextHandler(log, nil)),
			})
			if err != nil {
				t.Fatal(err)
			}
			c := governor.Cost{Requests: 1, Input: 13, Output: 10}
			for i := range 2 {
				at := now.Add(time.Duration(i) * time.Second)
				r, err := g.Reserve(at, "f", c)
				if err != nil {
					t.Fatal(err)
				}
				g.Advance(at)
				if !r.Admitted() {
					t.Fatalf("call %d after a usage of %+v waits on %s", i, tc.usage, g.Blocker(at, r))
				}
				Feedback(at, g, r, tc.usage.Governor(), governor.Snapshot{}, nil)
				if got := r.Cost(); got.Input != tc.want.Input || got.Output != tc.want.Output {
					t.Errorf("call %d settled at %+v, want input %d and output %d", i, got, tc.want.Input, tc.want.Output)
				}
			}
			st := g.Stats(now.Add(time.Second))
			if used := st.Limits[governor.TPD].Used; used > 2*(tc.want.Input+tc.want.Output) {
				t.Errorf("TPD used %d, want at most the two bounded calls' %d", used, 2*(tc.want.Input+tc.want.Output))
			}
			if spent, most := st.Limits[governor.MPD].Used, 2*(governor.Price{Input: 1, Output: 1}).Of(tc.want); spent > most {
				t.Errorf("spent %s of the day's budget, want at most %s", governor.FormatMoney(spent), governor.FormatMoney(most))
			}
			msg := "cut the " + tc.cut + " tokens the provider reported for a call to what the call could have used"
			if n := strings.Count(log.String(), msg); n != 1 {
				t.Errorf("logged %d lines %q for two calls, want 1:\n%s", n, msg, log)
			}
		})
	}
}
