package gateway

import (
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/llm"
)

// FuzzDecode: the gateway's fast reader accepts a chat request only when
// the whole decoder does, prices it the same, and lets nothing through
// whose numbers are out of bounds: a request it accepts costs within
// governor.MaxCost on every part.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		chatBody("Say hello.", 40, ""),
		chatBody("Say hello.", 40, `,"n":3`),
		chatBody("x", 9223372036854775807, ""),
		chatBody("x", 4611686018427387904, `,"n":2`),
		chatBody("x", 5, `,"n":100000`),
		chatBody("x", 0, `,"max_tokens":0`),
		chatBody("x", 5, `,"stream":true`),
		chatBody("x", 5, "} trailing"),
		`{"model":"m","max_tokens":5,"messages":[{}]}`,
		`{"model":"m","max_tokens":5,"messages":[{"role":"wizard","content":"x"}]}`,
		"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}",
		`{"model":"m","max_completion_tokens":70,"messages":[{"role":"user","content":[{"type":"text","text":"a"}]}]}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"stop":["max_tokens"],"Max_Tokens":1}`,
		"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":5,\"max_to\u212aens\":1}",
		`{"model":"0","messAges":[{"role":"user","content":"00000"}],"max_tokens":1}`,
	} {
		f.Add([]byte(s))
	}
	est, err := llm.NewEstimator(llm.EstimatorConfig{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		part, perr := decode(body)
		whole, werr := llm.DecodeChatRequest(body)
		if perr == nil && werr != nil {
			t.Fatalf("read in part, refused whole (%v): %q", werr, body)
		}
		if perr != nil {
			if !utf8.ValidString(perr.Error()) {
				t.Fatalf("error is not valid UTF-8: %q", perr)
			}
			return
		}
		if part.MaxTokens < 0 || part.MaxTokens > llm.MaxOutputTokens {
			t.Fatalf("max_tokens %d accepted: %q", part.MaxTokens, body)
		}
		if !utf8.Valid(body) {
			t.Fatalf("a body that is not UTF-8 was accepted: %q", body)
		}
		c := est.Cost(part)
		for _, v := range []int64{c.Requests, c.Input, c.Output} {
			if v < 0 || v > governor.MaxCost {
				t.Fatalf("cost %+v out of bounds for %q", c, body)
			}
		}
		if whole.MaxTokens != part.MaxTokens && whole.MaxTokens > 0 {
			t.Fatalf("read in part with max_tokens %d, whole with %d: %q", part.MaxTokens, whole.MaxTokens, body)
		}
		if part.MaxTokens > 0 && whole.MaxTokens > 0 && est.Cost(whole) != c {
			t.Fatalf("priced %+v read in part, %+v whole: %q", c, est.Cost(whole), body)
		}
	})
}

// FuzzMaxWait: X-Sluice-Max-Wait gives a wait within [0, MaxWaitCap], or an
// error that quotes the header; never a negative or wrapped duration.
func FuzzMaxWait(f *testing.F) {
	for _, s := range []string{"", "30s", "1m30s", "45", "0.5", "-1", "-1s", "1e300", "NaN", "Inf", "-Inf", "9223372036854775807", "2562047h47m16.854775807s", "1e-300", " 10 ", "µs"} {
		f.Add(s)
	}
	g := &Gateway{cfg: Config{MaxWait: time.Minute, MaxWaitCap: 10 * time.Minute}}
	f.Fuzz(func(t *testing.T, v string) {
		d, err := g.maxWait(v)
		if err != nil {
			if !strings.Contains(err.Error(), MaxWaitHeader) {
				t.Fatalf("error %q does not name the header", err)
			}
			return
		}
		if d < 0 || d > g.cfg.MaxWaitCap {
			t.Fatalf("maxWait(%q) = %s, outside [0, %s]", v, d, g.cfg.MaxWaitCap)
		}
		if s, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && s >= 0 && s <= 600 {
			if want := time.Duration(s * float64(time.Second)); d != want {
				t.Fatalf("maxWait(%q) = %s, want %s", v, d, want)
			}
		}
	})
}
