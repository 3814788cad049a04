package llm

import (
	"net/http"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
)

func TestSnapshotGolden(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 10, 19, 3, 59, 0, 0, time.UTC)
	obs := func(limit, remaining int64, reset time.Duration) governor.Observed {
		return governor.Observed{Known: true, Limit: limit, Remaining: remaining, Reset: reset}
	}
	tests := []struct {
		name    string
		profile Profile
		header  http.Header
		want    governor.Snapshot
	}{
		{
			// Groq: -requests are the DAY's requests, -tokens the MINUTE's tokens.
			name:    "groq requests are RPD, tokens are TPM",
			profile: Groq,
			header: header(
				"x-ratelimit-limit-requests", "14400",
				"x-ratelimit-remaining-requests", "14370",
				"x-ratelimit-reset-requests", "2m59.56s",
				"x-ratelimit-limit-tokens", "8000",
				"x-ratelimit-remaining-tokens", "6649",
				"x-ratelimit-reset-tokens", "7.66s",
			),
			want: governor.Snapshot{
				governor.RPD: obs(14400, 14370, 2*time.Minute+59560*time.Millisecond),
				governor.TPM: obs(8000, 6649, 7660*time.Millisecond),
			},
		},
		{
			name:    "groq hour and millisecond resets",
			profile: Groq,
			header: header(
				"x-ratelimit-remaining-requests", "0",
				"x-ratelimit-reset-requests", "1h2m3s",
				"x-ratelimit-remaining-tokens", "0",
				"x-ratelimit-reset-tokens", "120ms",
			),
			want: governor.Snapshot{
				governor.RPD: obs(0, 0, time.Hour+2*time.Minute+3*time.Second),
				governor.TPM: obs(0, 0, 120*time.Millisecond),
			},
		},
		{
			// OpenAI: the same header names, but -requests are per MINUTE.
			name:    "openai requests are RPM",
			profile: OpenAI,
			header: header(
				"x-ratelimit-limit-requests", "500",
				"x-ratelimit-remaining-requests", "499",
				"x-ratelimit-reset-requests", "120ms",
				"x-ratelimit-limit-tokens", "30000",
				"x-ratelimit-remaining-tokens", "29000",
				"x-ratelimit-reset-tokens", "2s",
			),
			want: governor.Snapshot{
				governor.RPM: obs(500, 499, 120*time.Millisecond),
				governor.TPM: obs(30000, 29000, 2*time.Second),
			},
		},
		{
			name:    "openai resets 1s, 6m0s, 20ms",
			profile: OpenAI,
			header: header(
				"x-ratelimit-remaining-requests", "9",
				"x-ratelimit-reset-requests", "6m0s",
				"x-ratelimit-remaining-tokens", "10",
				"x-ratelimit-reset-tokens", "1s",
			),
			want: governor.Snapshot{
				governor.RPM: obs(0, 9, 6*time.Minute),
				governor.TPM: obs(0, 10, time.Second),
			},
		},
		{
			name:    "zero profile reads as openai",
			profile: "",
			header:  header("x-ratelimit-remaining-requests", "3", "x-ratelimit-reset-requests", "20ms"),
			want:    governor.Snapshot{governor.RPM: obs(0, 3, 20*time.Millisecond)},
		},
		{
			// Anthropic: four per-minute buckets, absolute RFC 3339 resets,
			// token remainders rounded to thousands.
			name:    "anthropic four limits with RFC 3339 resets",
			profile: Anthropic,
			header: header(
				"anthropic-ratelimit-requests-limit", "50",
				"anthropic-ratelimit-requests-remaining", "49",
				"anthropic-ratelimit-requests-reset", "2026-10-19T03:59:01Z",
				"anthropic-ratelimit-tokens-limit", "48000",
				"anthropic-ratelimit-tokens-remaining", "47000",
				"anthropic-ratelimit-tokens-reset", "2026-10-19T03:59:02.5Z",
				"anthropic-ratelimit-input-tokens-limit", "40000",
				"anthropic-ratelimit-input-tokens-remaining", "39000",
				"anthropic-ratelimit-input-tokens-reset", "2026-10-19T12:59:02+09:00",
				"anthropic-ratelimit-output-tokens-limit", "8000",
				"anthropic-ratelimit-output-tokens-remaining", "8000",
				"anthropic-ratelimit-output-tokens-reset", "2026-10-19T03:58:00Z", // in the past
				"retry-after", "20",
			),
			want: governor.Snapshot{
				governor.RPM:  obs(50, 49, time.Second),
				governor.TPM:  obs(48000, 47000, 2500*time.Millisecond),
				governor.ITPM: obs(40000, 39000, 2*time.Second),
				governor.OTPM: obs(8000, 8000, 0),
			},
		},
		{
			name:    "anthropic ignores x-ratelimit headers",
			profile: Anthropic,
			header:  header("x-ratelimit-remaining-requests", "3"),
			want:    governor.Snapshot{},
		},
		{
			name:    "unparseable values are ignored field by field",
			profile: Groq,
			header: header(
				"x-ratelimit-limit-requests", "lots",
				"x-ratelimit-remaining-requests", "12",
				"x-ratelimit-reset-requests", "tomorrow",
				"x-ratelimit-limit-tokens", "8000",
				"x-ratelimit-remaining-tokens", "-1",
				"x-ratelimit-reset-tokens", "-3s",
			),
			want: governor.Snapshot{
				governor.RPD: obs(0, 12, 0),
				governor.TPM: {Limit: 8000},
			},
		},
		{
			name:    "decimal counts are truncated, bare seconds accepted",
			profile: OpenAI,
			header: header(
				"x-ratelimit-limit-tokens", "30000.0",
				"x-ratelimit-remaining-tokens", "29999.7",
				"x-ratelimit-reset-tokens", "1.5",
			),
			want: governor.Snapshot{governor.TPM: obs(30000, 29999, 1500*time.Millisecond)},
		},
		{
			name:    "no headers",
			profile: Groq,
			header:  nil,
			want:    governor.Snapshot{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := tt.profile.Snapshot(tt.header, now)
			for l := range got {
				got[l].Source = "" // the header's name, for logs: see TestRateLimitHeaders
			}
			if got != tt.want {
				for l := range governor.NumLimits {
					if got[l] != tt.want[l] {
						t.Errorf("%s: got %+v, want %+v", l, got[l], tt.want[l])
					}
				}
			}
		})
	}
}

func TestParseProfile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want Profile
		ok   bool
	}{
		{"groq", Groq, true},
		{"OpenAI", OpenAI, true},
		{" anthropic ", Anthropic, true},
		{"", OpenAI, true},
		{"mistral", "", false},
	}
	for _, tt := range tests {
		got, err := ParseProfile(tt.in)
		if got != tt.want || (err == nil) != tt.ok {
			t.Errorf("ParseProfile(%q) = %q, %v; want %q, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestResetDurations(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"2m59.56s", 2*time.Minute + 59560*time.Millisecond, true},
		{"7.66s", 7660 * time.Millisecond, true},
		{"1h2m3s", time.Hour + 2*time.Minute + 3*time.Second, true},
		{"120ms", 120 * time.Millisecond, true},
		{"6m0s", 6 * time.Minute, true},
		{"1s", time.Second, true},
		{"20ms", 20 * time.Millisecond, true},
		{"0s", 0, true},
		{"3", 3 * time.Second, true},
		{"2026-01-01T00:00:30Z", 30 * time.Second, true},
		{"2026-01-01T00:00:00.250Z", 250 * time.Millisecond, true},
		{"2025-12-31T23:59:00Z", 0, true},
		{"9999h", maxWait, true},
		{"-1s", 0, false},
		{"", 0, false},
		{"1d", 0, false},
		{"NaN", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseReset(tt.in, now)
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseReset(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}
