package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/cli"
)

// startSimProvider runs "sluice sim-provider args..." in-process and returns
// the first line it prints and the base URL it listens on. The command stops
// when the test ends, and must exit 0.
func startSimProvider(t *testing.T, getenv func(string) string, args ...string) (line, base string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	var stderr bytes.Buffer
	env := &cli.Env{Stdout: pw, Stderr: &stderr, Getenv: getenv}
	done := make(chan int, 1)
	go func() {
		code := runMain(ctx, env, append([]string{"sim-provider"}, args...))
		pw.Close()
		done <- code
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("sim-provider exited %d: %s", code, stderr.String())
			}
		case <-time.After(time.Minute):
			t.Error("sim-provider did not stop after its context ended")
		}
	})
	br := bufio.NewReader(pr)
	lines := make(chan string, 1)
	go func() {
		l, _ := br.ReadString('\n')
		lines <- l
		_, _ = io.Copy(io.Discard, br)
	}()
	select {
	case line = <-lines:
	case <-time.After(time.Minute):
		t.Fatal("sim-provider printed nothing")
	}
	addr, ok := strings.CutPrefix(line, "listening on http://")
	if !ok {
		t.Fatalf("first line %q (stderr %s)", line, stderr.String())
	}
	addr, _, _ = strings.Cut(addr, " ")
	return line, "http://" + strings.TrimSpace(addr)
}

func chat(t *testing.T, base, key, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func TestSimProviderFlags(t *testing.T) {
	t.Parallel()
	getenv := func(k string) string {
		if k == "SIM_PROVIDER_TEST_KEY" {
			return "sk-cli-test-key"
		}
		return ""
	}
	line, base := startSimProvider(t, getenv, "--profile", "groq", "--limits", "rpm=30,tpm=8000,otpm=1000",
		"--addr", "127.0.0.1:0", "--api-key-env", "SIM_PROVIDER_TEST_KEY", "--model", "llama-3.1-8b-instant")
	for _, want := range []string{"profile groq", "limits rpm=30,tpm=8000,otpm=1000", "window rolling", "accounting reserve", "default max_tokens 1000"} {
		if !strings.Contains(line, want) {
			t.Errorf("first line %q does not say %q", line, want)
		}
	}
	if strings.Contains(line, "sk-cli-test-key") {
		t.Errorf("the key is printed: %q", line)
	}
	body := `{"model":"llama-3.1-8b-instant","max_tokens":50,"messages":[{"role":"user","content":"hi"}]}`
	if resp := chat(t, base, "", body); resp.StatusCode != 401 {
		t.Errorf("without the key: %d, want 401", resp.StatusCode)
	}
	resp := chat(t, base, "sk-cli-test-key", body)
	if resp.StatusCode != 200 || resp.Header.Get("x-ratelimit-limit-tokens") != "8000" {
		t.Errorf("with the key: %d, limit-tokens %q", resp.StatusCode, resp.Header.Get("x-ratelimit-limit-tokens"))
	}
	// The default max_tokens (1000) of a request without one fills the OTPM minute.
	noMax := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	if resp := chat(t, base, "sk-cli-test-key", noMax); resp.StatusCode != 429 || resp.Header.Get("retry-after") == "" {
		t.Errorf("over OTPM: %d retry-after %q", resp.StatusCode, resp.Header.Get("retry-after"))
	}
}

func TestSimProviderScenario(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "s.yaml")
	err := os.WriteFile(path, []byte(`name: s
duration: 1h
seed: 3
provider:
  profile: anthropic
  accounting: settle
  default_max_tokens: 500
  limits: {rpm: 50, itpm: 20000, otpm: 4000}
flows:
  - name: a
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	// The scenario's provider, with its limits overridden by the flag.
	line, base := startSimProvider(t, func(string) string { return "" }, "--scenario", path, "--addr", "127.0.0.1:0", "--limits", "rpm=5,otpm=4000")
	if !strings.Contains(line, "profile anthropic") || !strings.Contains(line, "limits rpm=5,otpm=4000") ||
		!strings.Contains(line, "accounting settle") || !strings.Contains(line, "default max_tokens 500") {
		t.Errorf("first line %q", line)
	}
	resp := chat(t, base, "", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 200 || resp.Header.Get("anthropic-ratelimit-requests-limit") != "5" ||
		resp.Header.Get("anthropic-ratelimit-output-tokens-remaining") != "3000" || resp.Header.Get("anthropic-ratelimit-input-tokens-limit") != "" {
		t.Errorf("status %d headers %v", resp.StatusCode, resp.Header)
	}
}

func TestSimProviderErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--window", "sliding"}, 1, `--window: "sliding" is not rolling or fixed`},
		{[]string{"--accounting", "later"}, 1, "--accounting"},
		{[]string{"--profile", "mistral"}, 1, `--profile "mistral"`},
		{[]string{"--limits", "tpx=5"}, 1, "--limits"},
		{[]string{"--faults", "timeout=2"}, 1, "--faults: timeout"},
		{[]string{"--api-key-env", "SIM_PROVIDER_UNSET"}, 1, "SIM_PROVIDER_UNSET"},
		{[]string{"--scenario", "/nonexistent/s.yaml"}, 1, "s.yaml"},
		{[]string{"--latency", "soon"}, 2, "latency"},
		{[]string{"extra"}, 2, "unexpected argument"},
		{[]string{"--latency", "2h"}, 1, "provider.latency: 2h0m0s is more than the bound of 1h0m0s"},
		{[]string{"--limits", "tpm=9223372036854775807"}, 1, "provider.limits.tpm: 9223372036854775807 is more than the bound of 1,000,000,000,000"},
		{[]string{"--max-output-tokens", "2000000"}, 1, "max output tokens: 2000000 is not between 1 and 1048576"},
		{[]string{"--max-output-tokens", "500"}, 1, "default max tokens: 1000 is more than the model's max output tokens, 500"},
		{[]string{"--default-max-tokens", "100000"}, 1, "default max tokens: 100000 is more than the model's max output tokens, 32768"},
		{[]string{"--addr", "0.0.0.0:0"}, 1, "refusing to listen on 0.0.0.0:0, off loopback, without authentication: pass --allow-remote to serve the simulator to other machines (or bind to 127.0.0.1)"},
		{[]string{"--addr", ":8089"}, 1, "pass --allow-remote"},
		{[]string{"--addr", "[::]:0", "--api-key-env", "SIM_PROVIDER_SET"}, 1, "pass --allow-remote"},
		{[]string{"--addr", "nonsense"}, 1, `--addr "nonsense"`},
	} {
		var stdout, stderr bytes.Buffer
		env := &cli.Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(k string) string {
			if k == "SIM_PROVIDER_SET" {
				return "sk-sim-provider-test-key"
			}
			return ""
		}}
		args := append([]string{"sim-provider", "--addr", "127.0.0.1:0"}, tc.args...)
		if code := runMain(context.Background(), env, args); code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d stderr %q, want %d and %q", tc.args, code, stderr.String(), tc.code, tc.want)
		}
	}
}

func TestSimProviderHelp(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	env := &cli.Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}
	if code := runMain(context.Background(), env, []string{"sim-provider", "--help"}); code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, flag := range []string{"-addr", "-allow-remote", "-scenario", "-profile", "-limits", "-window", "-accounting", "-latency",
		"-default-max-tokens", "-max-output-tokens", "-faults", "-seed", "-model", "-api-key-env"} {
		if !strings.Contains(stdout.String(), flag) {
			t.Errorf("help does not document %s", flag)
		}
	}
}

// TestSimProviderBinds: loopback addresses need no flag; any other needs
// --allow-remote. (Only loopback names are bound here: a test must not
// open a port to the network.)
func TestSimProviderBinds(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"127.0.0.1:0", "localhost:0", "[::1]:0"} {
		t.Run(addr, func(t *testing.T) {
			t.Parallel()
			if addr == "[::1]:0" {
				if ln, err := net.Listen("tcp", addr); err != nil {
					t.Skip("no IPv6 loopback here")
				} else {
					ln.Close()
				}
			}
			line, base := startSimProvider(t, func(string) string { return "" }, "--addr", addr)
			if !strings.Contains(line, "max output tokens 32768") {
				t.Errorf("first line %q", line)
			}
			if resp := chat(t, base, "", `{"model":"m","max_tokens":40000,"messages":[{"role":"user","content":"hi"}]}`); resp.StatusCode != 400 {
				t.Errorf("max_tokens over the model's bound: %d, want 400", resp.StatusCode)
			}
			if resp := chat(t, base, "", `{"model":"m","max_tokens":4611686018427387904,"messages":[{"role":"user","content":"hi"}]}`); resp.StatusCode != 400 {
				t.Errorf("max_tokens of 2^62: %d, want 400", resp.StatusCode)
			}
		})
	}
}
