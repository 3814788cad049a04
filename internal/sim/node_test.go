package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/testenv"
)

// TestOpenAINodeClient runs the official openai npm client, which no one here
// wrote, against the simulator: what it reads from our responses is what
// real users' code will read.
func TestOpenAINodeClient(t *testing.T) {
	t.Parallel()
	node, modules := testenv.NodeModules(t)
	script, err := filepath.Abs("../../clients/node/sim-check.mjs")
	if err != nil {
		t.Fatal(err)
	}
	const key = "sk-sim-node-test"
	m := servedModel(t, forecast.ModelConfig{Profile: "groq", Limits: limits("rpm=50,tpm=2000,otpm=1000")})
	ts := httptest.NewServer(NewServer(m, ServerConfig{APIKey: key}))
	defer ts.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Dir = filepath.Dir(script)
	cmd.Env = append(os.Environ(), "SIM_BASE_URL="+ts.URL+"/v1", "SIM_API_KEY="+key,
		"SIM_NODE_MODULES="+modules, "NODE_PATH="+modules)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node sim-check.mjs: %v\nstderr:\n%s\nstdout:\n%s", err, stderr.String(), stdout.String())
	}

	type failure struct {
		OK         bool    `json:"ok"`
		Name       string  `json:"name"`
		Status     int     `json:"status"`
		RetryAfter *string `json:"retry_after"`
		Message    string  `json:"message"`
		Type       *string `json:"type"`
		Code       *string `json:"code"`
	}
	var out struct {
		Stream struct {
			Text         string     `json:"text"`
			Usage        *usageJSON `json:"usage"`
			Chunks       int        `json:"chunks"`
			FinishReason string     `json:"finish_reason"`
		} `json:"stream"`
		Completion struct {
			Content      string    `json:"content"`
			FinishReason string    `json:"finish_reason"`
			Usage        usageJSON `json:"usage"`
		} `json:"completion"`
		RateLimit    failure `json:"rate_limit"`
		TooLargeTPM  failure `json:"too_large_tpm"`
		TooLargeOTPM failure `json:"too_large_otpm"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("output %q: %v", stdout.String(), err)
	}
	if testing.Verbose() {
		t.Logf("client output: %s", stdout.String())
	}

	// (a) A completion with real usage, and a stream with usage in its final chunk.
	if in := prompt("Say hello."); out.Completion.Usage != (usageJSON{in, 12, in + 12}) || out.Completion.FinishReason != "stop" {
		t.Errorf("completion = %+v, want usage {%d 12}", out.Completion, in)
	}
	if n, _ := cl100k().Count(out.Completion.Content); n != 12 {
		t.Errorf("completion content has %d tokens, want 12", n)
	}
	if in := prompt("Stream a few words."); out.Stream.Usage == nil || *out.Stream.Usage != (usageJSON{in, 9, in + 9}) {
		t.Errorf("stream usage = %+v, want {%d 9}", out.Stream.Usage, in)
	}
	if n, _ := cl100k().Count(out.Stream.Text); n != 9 || out.Stream.FinishReason != "stop" || out.Stream.Chunks < 3 {
		t.Errorf("stream = %+v (%d tokens)", out.Stream, n)
	}

	// (b) A 429 whose retry-after the client reads from the error's headers and whose message names the limit.
	rl := out.RateLimit
	if rl.OK || rl.Status != 429 || rl.Name != "RateLimitError" || rl.RetryAfter == nil {
		t.Fatalf("rate limit = %+v", rl)
	}
	if s, err := strconv.Atoi(*rl.RetryAfter); err != nil || s < 1 || s > 60 {
		t.Errorf("retry-after %q, want 1..60 seconds", *rl.RetryAfter)
	}
	if !strings.Contains(rl.Message, "Rate limit reached for model `llama-3.1-8b-instant`") || !strings.Contains(rl.Message, "on tokens per minute (TPM): Limit 2000, Used ") ||
		!strings.Contains(rl.Message, "Please try again in ") || rl.Code == nil || *rl.Code != "rate_limit_exceeded" {
		t.Errorf("rate limit message %q code %v", rl.Message, rl.Code)
	}

	// (c) The too-large rejections: Groq's 413 for TPM, and its 429 with a 900 s retry-after for OTPM.
	tl := out.TooLargeTPM
	if tl.OK || tl.Status != 413 || !strings.Contains(tl.Message, "Request too large") || !strings.Contains(tl.Message, "(TPM): Limit 2000, Requested ") {
		t.Errorf("too large (TPM) = %+v", tl)
	}
	to := out.TooLargeOTPM
	if to.OK || to.Status != 429 || to.RetryAfter == nil || *to.RetryAfter != "900" ||
		!strings.Contains(to.Message, "on output tokens per minute (OTPM): Limit 1000, Requested 1200. The request's expected output tokens exceed the enforced limit") {
		t.Errorf("too large (OTPM) = %+v", to)
	}

	st := m.Stats()
	if st.Requests != 6 || st.Succeeded != 3 || st.RejectedByStatus[429] != 2 || st.RejectedByStatus[413] != 1 {
		t.Errorf("simulator saw %+v", st)
	}
}

// TestOpenAINodeChoices runs the official openai npm client against the
// openai profile: it reads n choices from a plain answer and from a stream
// (chunk by chunk, and assembled by its own stream helper), and sees a
// request without a model, or with a model that is a number, refused in
// OpenAI's words.
func TestOpenAINodeChoices(t *testing.T) {
	t.Parallel()
	node, modules := testenv.NodeModules(t)
	script, err := filepath.Abs("testdata/choices-check.mjs")
	if err != nil {
		t.Fatal(err)
	}
	const key = "sk-sim-node-test"
	m := servedModel(t, forecast.ModelConfig{Profile: "openai", Limits: limits("rpm=50,tpm=20000")})
	ts := httptest.NewServer(NewServer(m, ServerConfig{APIKey: key}))
	defer ts.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Dir = filepath.Dir(script)
	cmd.Env = append(os.Environ(), "SIM_BASE_URL="+ts.URL+"/v1", "SIM_API_KEY="+key,
		"SIM_NODE_MODULES="+modules, "NODE_PATH="+modules)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node choices-check.mjs: %v\nstderr:\n%s\nstdout:\n%s", err, stderr.String(), stdout.String())
	}
	type answer struct {
		Indexes     []int      `json:"indexes"`
		Contents    []string   `json:"contents"`
		Finish      []string   `json:"finish"`
		Usage       *usageJSON `json:"usage"`
		Fingerprint *string    `json:"fingerprint"`
	}
	type failure struct {
		OK      bool    `json:"ok"`
		Status  int     `json:"status"`
		Message string  `json:"message"`
		Type    *string `json:"type"`
	}
	var out struct {
		Plain     answer `json:"plain"`
		Assembled answer `json:"assembled"`
		Chunks    struct {
			Texts        []string   `json:"texts"`
			Chunks       int        `json:"chunks"`
			NullUsage    int        `json:"null_usage"`
			Fingerprints int        `json:"fingerprints"`
			Usage        *usageJSON `json:"usage"`
		} `json:"chunks"`
		NoModel     failure `json:"no_model"`
		ModelNumber failure `json:"model_number"`
		NTooMany    failure `json:"n_too_many"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("output %q: %v", stdout.String(), err)
	}
	if testing.Verbose() {
		t.Logf("client output: %s", stdout.String())
	}
	in := prompt("Say a few words.")
	check := func(name string, a answer, n int, each int64) {
		t.Helper()
		if len(a.Indexes) != n || len(a.Contents) != n || a.Usage == nil || *a.Usage != (usageJSON{in, int64(n) * each, in + int64(n)*each}) ||
			a.Fingerprint == nil || *a.Fingerprint != "fp_sluice_sim" {
			t.Errorf("%s: %+v", name, a)
			return
		}
		for i := range n {
			if tokens, _ := cl100k().Count(a.Contents[i]); a.Indexes[i] != i || int64(tokens) != each || a.Finish[i] != "stop" {
				t.Errorf("%s: choice %d: index %d, %d tokens, finish %q", name, i, a.Indexes[i], tokens, a.Finish[i])
			}
		}
		if a.Contents[0] == a.Contents[1] {
			t.Errorf("%s: the choices have the same text", name)
		}
	}
	check("plain", out.Plain, 3, 7)
	check("assembled stream", out.Assembled, 2, 4)
	c := out.Chunks
	if len(c.Texts) != 2 || c.Usage == nil || *c.Usage != (usageJSON{in, 10, in + 10}) || c.NullUsage != c.Chunks-1 || c.Fingerprints != c.Chunks {
		t.Errorf("stream chunks: %+v", c)
	} else {
		for i, text := range c.Texts {
			if n, _ := cl100k().Count(text); n != 5 {
				t.Errorf("streamed choice %d has %d tokens, want 5", i, n)
			}
		}
	}
	for _, f := range []struct {
		name string
		got  failure
		want string
	}{
		{"no model", out.NoModel, "400 you must provide a model parameter"},
		{"model a number", out.ModelNumber, "400 Invalid type for 'model': expected a string, but got an integer instead."},
		{"n of 129", out.NTooMany, "400 129 is greater than the maximum of 128 - 'n'"},
	} {
		if f.got.OK || f.got.Status != 400 || f.got.Message != f.want || f.got.Type == nil || *f.got.Type != "invalid_request_error" {
			t.Errorf("%s: %+v, want %q", f.name, f.got, f.want)
		}
	}
	if st := m.Stats(); st.Requests != 3 || st.Succeeded != 3 || st.Charged.Output != 3*20+2*20+2*20 {
		t.Errorf("simulator saw %+v", st)
	}
}
