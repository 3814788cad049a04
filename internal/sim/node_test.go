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
	m := newModel(t, Config{Profile: "groq", Wire: true, Limits: limits("rpm=50,tpm=2000,otpm=1000")})
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
