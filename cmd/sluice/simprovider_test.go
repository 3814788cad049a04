package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
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
		{[]string{"--model-limits", "a=rpm=30;b=tpx=5"}, 1, `--model-limits: model "b": unknown limit "tpx"`},
		{[]string{"--model-limits", "a=rpm=30;b=rpm=5;a=tpm=9"}, 1, `--model-limits: model "a" given twice`},
		{[]string{"--model-limits", "a=rpm=30;llama"}, 1, `--model-limits: "llama": want NAME=LIMITS`},
		{[]string{"--model-limits", "=rpm=30"}, 1, `--model-limits: "=rpm=30": no model name before '='`},
		{[]string{"--model-limits", " ; "}, 1, "--model-limits: no model"},
		{[]string{"--model-limits", "a=tpm=9223372036854775807"}, 1, `--model-limits: model "a": simulated provider: provider.limits.tpm: 9223372036854775807 is more than the bound`},
		{[]string{"--model-limits", "a=rpm=30", "--model", "b"}, 1, "--model and --model-limits"},
		{[]string{"--model-limits", "a=rpm=30", "--limits", "rpm=5"}, 1, "--limits and --model-limits"},
		{[]string{"--outage", "sim-model=slow@0s+1h"}, 1, `--outage: outage "sim-model=slow@0s+1h": outage mode "slow": want one of 5xx, overload, 429, down`},
		{[]string{"--outage", "sim-model=5xx@soon+1h"}, 1, `--outage: outage "sim-model=5xx@soon+1h": start "soon" is not a Go duration`},
		{[]string{"--outage", "sim-model=5xx@0s+9000h"}, 1, "duration 9000h0m0s is more than the bound of 8784h0m0s (366 days)"},
		{[]string{"--outage", "sim-model=5xx"}, 1, `--outage: outage "sim-model=5xx": no '@' after the mode`},
		{[]string{"--outage", "other=5xx@0s+1h"}, 1, `--outage: outage other=5xx@0s+1h0m0s: model "other" is not served (the server serves sim-model)`},
		{[]string{"--model-limits", "a=;b=", "--outage", "a=5xx@0s+1h;a=down@30m+1h"}, 1, "--outage: outage a=down@30m0s+1h0m0s overlaps outage a=5xx@0s+1h0m0s"},
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
		"-default-max-tokens", "-max-output-tokens", "-faults", "-seed", "-model", "-api-key-env", "-model-limits", "-outage",
		"--model-limits 'llama-3.1-8b-instant=rpm=30,tpm=6000", "--outage 'llama-3.1-8b-instant=5xx@10m+1h'", "POST /sim/outage"} {
		if !strings.Contains(stdout.String(), flag) {
			t.Errorf("help does not document %q", flag)
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

// getJSON fetches url and decodes its JSON into v.
func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// postOutage posts body to base's /sim/outage and returns the status.
func postOutage(t *testing.T, base, body string) int {
	t.Helper()
	resp, err := http.Post(base+"/sim/outage", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestSimProviderModelLimits: --model-limits serves each model with its own
// limits and the command's other settings; a model not named is a 404;
// /v1/models lists them and /sim/stats reports each; --outage and POST
// /sim/outage put a model in an outage that charges nothing.
func TestSimProviderModelLimits(t *testing.T) {
	t.Parallel()
	const small, large, down = "llama-3.1-8b-instant", "llama-3.3-70b-versatile", "down-model"
	line, base := startSimProvider(t, func(string) string { return "" }, "--addr", "127.0.0.1:0", "--profile", "groq",
		"--model-limits", small+"=rpm=30,tpm=1000;"+large+"=rpm=30,tpm=5000 ; "+down+"=",
		"--outage", down+"=down@0s+1h;"+large+"=429@8000h+1h", "--outage", small+"=overload@1000h+1h")
	for _, want := range []string{"profile groq", "limits " + small + "=rpm=30,tpm=1000;" + large + "=rpm=30,tpm=5000;" + down + "=,",
		"models " + small + ", " + large + ", " + down,
		"outages " + down + "=down@0s+1h0m0s;" + large + "=429@8000h0m0s+1h0m0s;" + small + "=overload@1000h0m0s+1h0m0s"} {
		if !strings.Contains(line, want) {
			t.Errorf("first line %q does not say %q", line, want)
		}
	}
	body := func(model string) string {
		return `{"model":"` + model + `","max_tokens":900,"messages":[{"role":"user","content":"hi"}]}`
	}
	if resp := chat(t, base, "", body(small)); resp.StatusCode != 200 || resp.Header.Get("x-ratelimit-limit-tokens") != "1000" {
		t.Fatalf("%s: %d limit %q", small, resp.StatusCode, resp.Header.Get("x-ratelimit-limit-tokens"))
	}
	if resp := chat(t, base, "", body(small)); resp.StatusCode != 429 {
		t.Fatalf("%s over its TPM: %d", small, resp.StatusCode)
	}
	for range 3 {
		if resp := chat(t, base, "", body(large)); resp.StatusCode != 200 || resp.Header.Get("x-ratelimit-limit-tokens") != "5000" {
			t.Fatalf("%s while %s is full: %d", large, small, resp.StatusCode)
		}
	}
	if resp := chat(t, base, "", body("sim-model")); resp.StatusCode != 404 {
		t.Errorf("a model not served: %d, want 404", resp.StatusCode)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	if resp, err := client.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body(down))); err == nil {
		resp.Body.Close()
		t.Errorf("%s in its outage answered %d", down, resp.StatusCode)
	}
	// An outage begun at run time, then ended.
	if code := postOutage(t, base, `{"model":"`+large+`","mode":"5xx","for":"1h"}`); code != 200 {
		t.Fatalf("POST /sim/outage: %d", code)
	}
	if resp := chat(t, base, "", body(large)); resp.StatusCode != 500 {
		t.Errorf("%s in its outage: %d, want 500", large, resp.StatusCode)
	}
	if code := postOutage(t, base, `{"model":"`+large+`","mode":"5xx","for":"367d"}`); code != 400 {
		t.Errorf("POST /sim/outage of a bad duration: %d, want 400", code)
	}
	if code := postOutage(t, base, `{"model":"`+large+`","for":"0s"}`); code != 200 {
		t.Fatalf("POST /sim/outage to end it: %d", code)
	}
	if resp := chat(t, base, "", body(large)); resp.StatusCode != 200 {
		t.Errorf("%s after its outage: %d, want 200", large, resp.StatusCode)
	}

	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	getJSON(t, base+"/v1/models", &list)
	if len(list.Data) != 3 || list.Data[0].ID != down || list.Data[1].ID != small || list.Data[2].ID != large {
		t.Errorf("/v1/models = %+v", list)
	}
	type modelStats struct {
		Requests int64            `json:"requests"`
		Rejected int64            `json:"rejected"`
		Limits   map[string]int64 `json:"limits"`
		Outage   map[string]int64 `json:"outage"`
	}
	var st struct {
		modelStats
		Models map[string]modelStats `json:"models"`
	}
	getJSON(t, base+"/sim/stats", &st)
	s, l, d := st.Models[small], st.Models[large], st.Models[down]
	if st.Requests != 6 || st.Rejected != 1 || st.Outage["5xx"] != 1 || st.Outage["down"] != 1 ||
		s.Requests != 2 || s.Rejected != 1 || s.Limits["tpm"] != 1000 ||
		l.Requests != 4 || l.Limits["tpm"] != 5000 || l.Outage["5xx"] != 1 ||
		d.Requests != 0 || d.Outage["down"] != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestSimProviderOutageOneModel: the model of a single-model simulator has
// outages too, under its name, whatever model a request names.
func TestSimProviderOutageOneModel(t *testing.T) {
	t.Parallel()
	getenv := func(k string) string {
		if k == "SIM_PROVIDER_OUTAGE_KEY" {
			return "sk-cli-outage-key"
		}
		return ""
	}
	_, base := startSimProvider(t, getenv, "--addr", "127.0.0.1:0", "--outage", "sim-model=overload@0s+1h", "--api-key-env", "SIM_PROVIDER_OUTAGE_KEY")
	body := `{"model":"any-model","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
	if resp := chat(t, base, "sk-cli-outage-key", body); resp.StatusCode != 503 {
		t.Fatalf("in the outage: %d, want 503", resp.StatusCode)
	}
	// POST /sim/outage needs the key.
	if code := postOutage(t, base, `{"model":"sim-model","for":"0s"}`); code != 401 {
		t.Fatalf("POST /sim/outage without the key: %d, want 401", code)
	}
	req, _ := http.NewRequest("POST", base+"/sim/outage", strings.NewReader(`{"model":"sim-model","for":"0s"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-cli-outage-key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("ending the outage: %d", resp.StatusCode)
	}
	if resp := chat(t, base, "sk-cli-outage-key", body); resp.StatusCode != 200 {
		t.Fatalf("after the outage: %d, want 200", resp.StatusCode)
	}
	var st map[string]json.RawMessage
	getJSON(t, base+"/sim/stats", &st)
	if _, ok := st["models"]; ok || string(st["outage"]) != `{"429":0,"5xx":0,"down":0,"overload":1}` {
		t.Errorf("stats %s", st)
	}
}
