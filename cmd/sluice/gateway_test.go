package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/govtext"
	"github.com/sluice-dev/sluice/internal/sim"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/llm"
)

const gatewayTestKey = "gsk-test-upstream-5c81d2e9"

// startGatewaySim serves a simulator that requires gatewayTestKey.
func startGatewaySim(t *testing.T, limits string) (*forecast.Model, string) {
	t.Helper()
	ls, err := govtext.Limits(limits)
	if err != nil {
		t.Fatal(err)
	}
	m, err := forecast.NewModel(forecast.ModelConfig{Profile: "groq", Limits: ls, Wire: true})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(sim.NewServer(m, sim.ServerConfig{APIKey: gatewayTestKey}))
	t.Cleanup(ts.Close)
	return m, ts.URL + "/v1"
}

// startGateway runs "sluice gateway args..." in-process until the test ends
// and returns its base URL and its log.
func startGateway(t *testing.T, vars map[string]string, args ...string) (string, *testenv.Buffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	stderr := &testenv.Buffer{}
	env := &cli.Env{Stdout: pw, Stderr: stderr, Getenv: func(k string) string { return vars[k] }}
	done := make(chan int, 1)
	go func() {
		code := runMain(ctx, env, append([]string{"gateway"}, args...))
		pw.Close()
		done <- code
	}()
	var out bytes.Buffer
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("gateway exited %d: %s", code, stderr.String())
			}
		case <-time.After(time.Minute):
			t.Error("gateway did not stop after its context ended")
		}
		for what, s := range map[string]string{"log": stderr.String(), "output": out.String()} {
			if strings.Contains(s, gatewayTestKey) {
				t.Errorf("the provider key appears in the gateway's %s", what)
			}
		}
	})
	br := bufio.NewReader(pr)
	lines := make(chan string, 1)
	go func() {
		l, _ := br.ReadString('\n')
		lines <- l
		_, _ = io.Copy(io.Discard, br)
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(time.Minute):
		t.Fatalf("gateway printed nothing: %s", stderr.String())
	}
	out.WriteString(line)
	addr, ok := strings.CutPrefix(line, "listening on http://")
	if !ok {
		t.Fatalf("first line %q (stderr %s)", line, stderr.String())
	}
	addr, _, _ = strings.Cut(addr, " ")
	return "http://" + addr, stderr
}

func gatewayPost(t *testing.T, url, body string, header map[string]string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if strings.Contains(string(data), gatewayTestKey) {
		t.Error("an answer carries the provider key")
	}
	return resp.StatusCode, data
}

type flowsBody struct {
	Flows []struct {
		Name     string           `json:"name"`
		Weight   float64          `json:"weight"`
		Priority int              `json:"priority"`
		Admitted int64            `json:"admitted"`
		Tokens   map[string]int64 `json:"tokens"`
	} `json:"flows"`
	Limits map[string]struct {
		Max int64 `json:"max"`
	} `json:"limits"`
}

func getFlows(t *testing.T, url string, header map[string]string) flowsBody {
	t.Helper()
	req, _ := http.NewRequest("GET", url+"/v1/flows", nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var fb flowsBody
	if err := json.NewDecoder(resp.Body).Decode(&fb); err != nil {
		t.Fatalf("/v1/flows: status %d: %v", resp.StatusCode, err)
	}
	return fb
}

const gatewayChat = `{"model":"llama-3.1-8b-instant","messages":[{"role":"user","content":"Analyse this."}]}`

func TestGatewayCommand(t *testing.T) {
	t.Parallel()
	m, upstream := startGatewaySim(t, "rpm=60,tpm=6000")
	url, log := startGateway(t, map[string]string{"SLUICE_UPSTREAM_KEY": gatewayTestKey},
		"--upstream", upstream, "--profile", "groq", "--limits", "rpm=60,tpm=6000", "--addr", "127.0.0.1:0",
		"--flow", "summary=2", "--flow", "analysis=1:1:300")
	status, body := gatewayPost(t, url, gatewayChat, map[string]string{"X-Sluice-Flow": "analysis"})
	if status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	fb := getFlows(t, url, nil)
	got := map[string]string{}
	for _, f := range fb.Flows {
		b, _ := json.Marshal(f)
		got[f.Name] = string(b)
		switch f.Name {
		case "analysis":
			if f.Admitted != 1 || f.Priority != 1 || f.Tokens["output"] != 300 {
				t.Errorf("analysis = %s; want one call with the flow's 300 max_tokens", b)
			}
		case "summary":
			if f.Weight != 2 {
				t.Errorf("summary = %s", b)
			}
		}
	}
	if len(got) != 3 || fb.Limits["tpm"].Max != 6000 {
		t.Errorf("flows %v limits %v; want summary, analysis and default", got, fb.Limits)
	}
	if st := m.Stats(); st.Succeeded != 1 || st.Charged.Output != 300 {
		t.Errorf("upstream saw %+v", st)
	}
	// Not a terminal: the log is JSON lines.
	if !strings.Contains(log.String(), `"flow":"analysis","status":200`) {
		t.Errorf("log lacks the request as JSON: %s", log.String())
	}
}

// TestGatewayKeepsTheDay: "sluice gateway --db" has written every charge
// it made to the store by the time it exits.
func TestGatewayKeepsTheDay(t *testing.T) {
	t.Parallel()
	_, upstream := startGatewaySim(t, "tpd=100000000")
	db := filepath.Join(t.TempDir(), "gw.db")
	t.Run("serve", func(t *testing.T) {
		url, _ := startGateway(t, map[string]string{"SLUICE_UPSTREAM_KEY": gatewayTestKey},
			"--upstream", upstream, "--profile", "groq", "--limits", "tpd=100000000", "--addr", "127.0.0.1:0",
			"--key-name", "groq-day", "--db", db)
		if status, body := gatewayPost(t, url, gatewayChat, nil); status != 200 {
			t.Fatalf("status %d: %s", status, body)
		}
	}) // its cleanup stops the command
	st, err := store.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	saved, err := st.Charges(context.Background(), "groq-day", time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(saved) != 1 || saved[0].Cost.Output == 0 {
		t.Fatalf("the store holds %+v after the gateway exited, want the one call's charge", saved)
	}
	versions, err := st.ConfigVersions(context.Background(), time.Now().Add(-time.Hour))
	if err != nil || len(versions) != 1 || versions[0].Source != "gateway" || !strings.Contains(string(versions[0].Config), `"key":"groq-day"`) ||
		strings.Contains(string(versions[0].Config), gatewayTestKey) {
		t.Fatalf("config versions %+v, %v: want the gateway's, naming its key and not its secret", versions, err)
	}
}

func TestGatewayConfigFile(t *testing.T) {
	t.Parallel()
	_, upstream := startGatewaySim(t, "rpm=60,tpm=6000")
	file := filepath.Join(t.TempDir(), "gateway.yaml")
	conf := `upstream: ` + upstream + `
profile: groq
limits: rpm=1,tpm=10
key_env: MY_PROVIDER_KEY
max_wait: 5s
flows:
  - name: title
    weight: 3
    default_max_tokens: 20
client_keys:
  - env: TITLE_APP_KEY
    flow: title
`
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	url, _ := startGateway(t, map[string]string{"MY_PROVIDER_KEY": gatewayTestKey, "TITLE_APP_KEY": "app-title-key-0123"},
		"--config", file, "--limits", "rpm=60,tpm=6000", "--addr", "127.0.0.1:0")
	if status, body := gatewayPost(t, url, gatewayChat, nil); status != 401 {
		t.Errorf("without a client key: %d %s", status, body)
	}
	auth := map[string]string{"Authorization": "Bearer app-title-key-0123"}
	if status, body := gatewayPost(t, url, gatewayChat, auth); status != 200 {
		t.Fatalf("with the client key: %d %s", status, body)
	}
	fb := getFlows(t, url, auth)
	for _, f := range fb.Flows {
		if f.Name == "title" && (f.Admitted != 1 || f.Weight != 3 || f.Tokens["output"] != 20) {
			t.Errorf("title flow %+v", f)
		}
	}
	if fb.Limits["tpm"].Max != 6000 {
		t.Errorf("the --limits flag did not win over the file: %v", fb.Limits)
	}
}

func TestGatewayCommandErrors(t *testing.T) {
	t.Parallel()
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("upstream: http://127.0.0.1:1/v1\nlimts: rpm=1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	unpriced := filepath.Join(t.TempDir(), "unpriced.yaml")
	if err := os.WriteFile(unpriced, []byte("upstream: http://127.0.0.1:1/v1\nflows:\n  - {name: intern, budget: \"day=1\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no upstream", nil, 2, "--upstream is required"},
		{"bad flow", []string{"--upstream", "http://127.0.0.1:1/v1", "--flow", "summary"}, 2, "want NAME=WEIGHT"},
		{"bad weight", []string{"--upstream", "http://127.0.0.1:1/v1", "--flow", "summary=-1"}, 2, "weight -1: want a positive number"},
		{"short client key", []string{"--upstream", "http://127.0.0.1:1/v1", "--client-keys-env", "SHORT"}, 1, "client key 1 is 1 characters long"},
		{"bad limits", []string{"--upstream", "http://127.0.0.1:1/v1", "--limits", "tpm=lots"}, 1, "--limits"},
		{"bad price", []string{"--upstream", "http://127.0.0.1:1/v1", "--price", "input=cheap"}, 1, `price input: "cheap" is not a number`},
		{"budget without a price", []string{"--upstream", "http://127.0.0.1:1/v1", "--budget", "day=5"}, 1, "a budget needs the key's price"},
		{"budget among the limits", []string{"--upstream", "http://127.0.0.1:1/v1", "--limits", "mpd=5"}, 1, "limit mpd is a budget of money"},
		{"bad profile", []string{"--upstream", "http://127.0.0.1:1/v1", "--profile", "azure"}, 1, "unknown profile"},
		{"typo in the file", []string{"--config", bad}, 1, "limts"},
		{"a flow's budget without a price", []string{"--config", unpriced}, 1, `flows[0].budget: flow "intern": a budget needs the key's price`},
		{"open to the network without client keys", []string{"--upstream", "http://127.0.0.1:1/v1", "--addr", "0.0.0.0:0"}, 1, "without authentication: give client keys"},
		{"bad upstream", []string{"--upstream", "ftp://x"}, 1, "not an http(s) URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			env := &cli.Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(k string) string {
				if k == "SHORT" {
					return "x"
				}
				return ""
			}}
			code := runMain(context.Background(), env, append([]string{"gateway"}, tc.args...))
			if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want %d naming %q", code, stderr.String(), tc.code, tc.want)
			}
		})
	}
}

func TestGatewayHelp(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	env := &cli.Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}
	if code := runMain(context.Background(), env, []string{"gateway", "--help"}); code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, flag := range []string{"-config", "-upstream", "-profile", "-limits", "-addr", "-key-env", "-key-name", "-client-keys-env",
		"-window", "-accounting", "-max-wait", "-default-max-tokens", "-max-body-bytes", "-lag", "-day-burst", "-retry-base", "-log-level", "-flow", "-db",
		"-max-waiting", "-max-flow-waiting", "-max-waiting-bytes", "-header-timeout", "-body-timeout", "-write-timeout", "-idle-timeout", "-allowed-hosts"} {
		if !strings.Contains(stdout.String(), "  "+flag+" ") && !strings.Contains(stdout.String(), "  "+flag+"\n") {
			t.Errorf("help does not document %s", flag)
		}
	}
	// readGatewayFile hands each single-value key of the file to its flag.
	file := reflect.TypeFor[gatewayFile]()
	for i := range file.NumField() {
		key := file.Field(i).Tag.Get("yaml")
		if file.Field(i).Type.Kind() == reflect.String && !strings.Contains(stdout.String(), "  -"+strings.ReplaceAll(key, "_", "-")+" ") {
			t.Errorf("the file's key %s has no flag", key)
		}
	}
}

// TestGatewayFileAndFlagsAgree: a value refused as a flag is refused in the
// file, and the other way round, in the same words; the flag's error names
// the flag, the file's the key and its line. None is quietly replaced by a
// default.
func TestGatewayFileAndFlagsAgree(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for i, tc := range []struct {
		name string
		flag []string
		file string
		want string // in both errors
		key  string // in the file's, with its line
		line int
	}{
		{"zero weight", []string{"--flow", "a=0"}, "flows:\n  - name: a\n    weight: 0\n", `flow "a": weight 0`, "flows[0]", 3},
		{"negative weight", []string{"--flow", "a=-2"}, "flows:\n  - name: a\n    weight: -2\n", `flow "a": weight -2`, "flows[0]", 3},
		{"unbounded priority", []string{"--flow", "a=1:1000"}, "flows:\n  - name: a\n    priority: 1000\n", `flow "a": priority 1000`, "flows[0]", 3},
		{"fractional priority", []string{"--flow", "a=1:1.5"}, "flows:\n  - {name: a, priority: 1.5}\n", `flow "a": priority 1.5`, "flows[0]", 3},
		{"flow max_tokens 0", []string{"--flow", "a=1:0:0"}, "flows:\n  - name: a\n    default_max_tokens: 0\n", `flow "a": default max_tokens 0`, "flows[0]", 3},
		{"negative max body", []string{"--max-body-bytes", "-5"}, "max_body_bytes: -5\n", "-5 is not between 1 and 1073741824", "max_body_bytes", 2},
		{"negative default max tokens", []string{"--default-max-tokens", "-5"}, "default_max_tokens: -5\n", "-5 is not between 1 and 1048576", "default_max_tokens", 2},
		{"zero default max tokens", []string{"--default-max-tokens", "0"}, "default_max_tokens: 0\n", "0 is not between 1", "default_max_tokens", 2},
		{"absurd default max tokens", []string{"--default-max-tokens", "9223372036854775807"}, "default_max_tokens: 9223372036854775807\n", "9223372036854775807 is not between", "default_max_tokens", 2},
		{"zero max waiting", []string{"--max-waiting", "0"}, "max_waiting: 0\n", "0 is not between 1 and 1048576", "max_waiting", 2},
		{"zero max flow parked", []string{"--max-flow-parked", "0"}, "max_flow_parked: 0\n", "0 is not between 1 and 1048576", "max_flow_parked", 2},
		{"absurd max flow parked", []string{"--max-flow-parked", "99999999999"}, "max_flow_parked: 99999999999\n", "99999999999 is not between 1 and 1048576", "max_flow_parked", 2},
		{"fractional max waiting", []string{"--max-waiting", "1.5"}, "max_waiting: 1.5\n", `invalid value "1.5"`, "max_waiting", 2},
		{"max waiting in exponent form", []string{"--max-waiting", "1e3"}, "max_waiting: 1e3\n", `invalid value "1e3"`, "max_waiting", 2},
		{"negative body timeout", []string{"--body-timeout", "-1s"}, "body_timeout: -1s\n", "-1s is not positive", "body_timeout", 2},
		{"negative max wait", []string{"--max-wait", "-1s"}, "max_wait: -1s\n", "-1s is negative", "max_wait", 2},
		{"duration in words", []string{"--max-wait", "4 minutes"}, "max_wait: 4 minutes\n", `invalid value "4 minutes"`, "max_wait", 2},
		{"duration without a unit", []string{"--lag", "10"}, "lag: 10\n", `invalid value "10"`, "lag", 2},
		{"day burst of 0", []string{"--day-burst", "0"}, "day_burst: 0s\n", "0s: want from 1ns to 24h, or negative for no pacing", "day_burst", 2},
		{"day burst over a day", []string{"--day-burst", "25h"}, "day_burst: 25h\n", "25h0m0s: want from 1ns to 24h, or negative for no pacing", "day_burst", 2},
		{"window", []string{"--window", "sliding"}, "window: sliding\n", `"sliding" is not rolling or fixed`, "window", 2},
		{"window in capitals", []string{"--window", "Fixed"}, "window: Fixed\n", `"Fixed" is not rolling or fixed`, "window", 2},
		{"accounting", []string{"--accounting", "later"}, "accounting: later\n", `"later" is not reserve or settle`, "accounting", 2},
		{"limits", []string{"--limits", "tpm=lots"}, "limits: tpm=lots\n", `limit tpm: value "lots"`, "limits", 2},
		{"profile", []string{"--profile", "azure"}, "profile: azure\n", `unknown profile "azure"`, "profile", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := func(args ...string) (int, string) {
				var stdout, stderr bytes.Buffer
				env := &cli.Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}
				code := runMain(context.Background(), env, append([]string{"gateway", "--addr", "127.0.0.1:0"}, args...))
				return code, stderr.String()
			}
			code, msg := run(append([]string{"--upstream", "http://127.0.0.1:1/v1"}, tc.flag...)...)
			if code == 0 || !strings.Contains(msg, tc.want) || !strings.Contains(msg, tc.flag[0][1:]) {
				t.Errorf("flag %v: exit %d, %q; want a refusal naming %s and %q", tc.flag, code, msg, tc.flag[0], tc.want)
			}
			file := filepath.Join(dir, fmt.Sprintf("c%d.yaml", i))
			if err := os.WriteFile(file, []byte("upstream: http://127.0.0.1:1/v1\n"+tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
			code, msg = run("--config", file)
			where := fmt.Sprintf("(line %d)", tc.line)
			if code == 0 || !strings.Contains(msg, tc.want) || !strings.Contains(msg, tc.key+": ") || !strings.Contains(msg, where) {
				t.Errorf("file %q: exit %d, %q; want a refusal naming %q, %s %s", tc.file, code, msg, tc.want, tc.key, where)
			}
		})
	}
}

func TestGatewayWarnsWhenToldNoLimit(t *testing.T) {
	t.Parallel()
	_, upstream := startGatewaySim(t, "rpm=60")
	_, log := startGateway(t, map[string]string{"SLUICE_UPSTREAM_KEY": gatewayTestKey}, "--upstream", upstream, "--addr", "127.0.0.1:0")
	if !strings.Contains(log.String(), "no --limits: the gateway knows no limit of the key until the provider says one") {
		t.Errorf("no warning for a gateway told no limit: %s", log.String())
	}
}

// TestGatewayServerGuards: the command's server refuses what a web page
// could send it, and cuts off a client that sends its body too slowly.
func TestGatewayServerGuards(t *testing.T) {
	t.Parallel()
	_, upstream := startGatewaySim(t, "rpm=60")
	url, _ := startGateway(t, map[string]string{"SLUICE_UPSTREAM_KEY": gatewayTestKey}, "--upstream", upstream, "--addr", "127.0.0.1:0",
		"--limits", "rpm=60", "--body-timeout", "300ms")
	for _, tc := range []struct {
		name   string
		header map[string]string
		want   int
	}{
		{"text/plain from a form", map[string]string{"Content-Type": "text/plain"}, http.StatusUnsupportedMediaType},
		{"rebound host", map[string]string{"Content-Type": "application/json", "Host": "evil.example"}, http.StatusMisdirectedRequest},
		{"cross-site origin", map[string]string{"Content-Type": "application/json", "Origin": "https://evil.example"}, http.StatusForbidden},
		{"json from loopback", map[string]string{"Content-Type": "application/json"}, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(gatewayChat))
			for k, v := range tc.header {
				if k == "Host" {
					req.Host = v
				} else {
					req.Header.Set(k, v)
				}
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d %s, want %d", resp.StatusCode, body, tc.want)
			}
			if tc.want != 200 && !strings.Contains(string(body), `"error":{`) {
				t.Errorf("refusal not in the provider's error format: %s", body)
			}
		})
	}
	// A slow body is cut off: the connection closes without an answer.
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"model\"")
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err == nil {
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusRequestTimeout {
			t.Fatalf("a body that never arrived: %d %s; want 408", resp.StatusCode, body)
		}
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("a slow body held the connection for a minute with a body timeout of 300 ms")
	}
}

// Each routed target's provider key in the routes' tests.
const (
	routeFreeKey = "gsk-route-free-7d3e1a9c4b"
	routePaidKey = "sk-route-paid-2f8b6c0e5a"
)

// startKeyedSim serves a simulator with profile's wire format that
// requires key, counting the chat calls it is sent.
func startKeyedSim(t *testing.T, profile, limits, key string) (*forecast.Model, string) {
	t.Helper()
	ls, err := govtext.Limits(limits)
	if err != nil {
		t.Fatal(err)
	}
	m, err := forecast.NewModel(forecast.ModelConfig{Profile: llm.Profile(profile), Limits: ls, Wire: true})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(sim.NewServer(m, sim.ServerConfig{APIKey: key}))
	t.Cleanup(ts.Close)
	return m, ts.URL + "/v1"
}

// routesFile writes a gateway config routing "fast" over a free target
// (one request a day: its second would wait for hours) and a priced one.
func routesFile(t *testing.T, freeURL, paidURL, extra string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "gateway.yaml")
	conf := `profile: openai
` + extra + `models:
  - name: fast
    rule: cheapest
    max_wait: 30s
    targets:
      - name: groq-8b
        upstream: ` + freeURL + `
        api_key_env: GROQ_API_KEY
        profile: groq
        model: llama-3.1-8b-instant
        limits: rpd=1,rpm=30,tpm=6000
      - name: paid
        upstream: ` + paidURL + `
        api_key_env: OPENAI_API_KEY
        profile: openai
        model: gpt-4o-mini
        limits: rpm=500,tpm=200000
        price: input=0.15,output=0.60
        budget: day=2.00
`
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// routeVars are the environment of a gateway with routes.
var routeVars = map[string]string{"GROQ_API_KEY": routeFreeKey, "OPENAI_API_KEY": routePaidKey}

// checkNoRouteKeys fails when a target's key appears in text.
func checkNoRouteKeys(t *testing.T, what, text string) {
	t.Helper()
	for _, k := range []string{routeFreeKey, routePaidKey} {
		if strings.Contains(text, k) {
			t.Errorf("a target's key appears in the %s", what)
		}
	}
}

// sluice gateway --config with models: one model name reaches both
// targets, each under its own model name and key; a model not routed is
// 404 model_not_found on a gateway without an upstream; /v1/flows shows
// the targets.
func TestGatewayRoutesConfigFile(t *testing.T) {
	t.Parallel()
	free, freeURL := startKeyedSim(t, "groq", "rpm=600", routeFreeKey)
	paid, paidURL := startKeyedSim(t, "openai", "rpm=600", routePaidKey)
	url, log := startGateway(t, routeVars, "--config", routesFile(t, freeURL, paidURL, ""), "--addr", "127.0.0.1:0")
	var got []string
	for i := range 3 {
		req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(fmt.Sprintf(`{"model":"fast","max_tokens":20,"messages":[{"role":"user","content":"item %d"}]}`, i)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
		checkNoRouteKeys(t, "answers", string(body)+fmt.Sprint(resp.Header))
		got = append(got, resp.Header.Get("X-Sluice-Target"))
	}
	if strings.Join(got, ",") != "groq-8b,paid,paid" {
		t.Errorf("targets %v, want the free one first, then the paid one while the free one cannot admit", got)
	}
	if f, p := free.Stats().Requests, paid.Stats().Requests; f != 1 || p != 2 {
		t.Errorf("the simulators saw %d and %d requests, want 1 and 2", f, p)
	}
	status, body := gatewayPost(t, url, gatewayChat, nil)
	if status != 404 || !strings.Contains(string(body), `"code":"model_not_found"`) || !strings.Contains(string(body), "serves: fast") {
		t.Errorf("a model not routed: %d %s", status, body)
	}
	resp, err := http.Get(url + "/v1/flows")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var view struct {
		Targets []struct {
			Name   string `json:"name"`
			Model  string `json:"model"`
			Sent   int64  `json:"sent"`
			Picked int64  `json:"picked"`
			Spend  *struct {
				Day      float64 `json:"day"`
				SpentDay float64 `json:"spent_day"`
			} `json:"spend"`
		} `json:"targets"`
	}
	if err := json.Unmarshal(raw, &view); err != nil || len(view.Targets) != 2 {
		t.Fatalf("/v1/flows: %v %s", err, raw)
	}
	if tv := view.Targets[1]; tv.Name != "paid" || tv.Model != "gpt-4o-mini" || tv.Sent != 2 || tv.Spend == nil || tv.Spend.Day != 2 || tv.Spend.SpentDay <= 0 {
		t.Errorf("paid in /v1/flows: %+v", tv)
	}
	checkNoRouteKeys(t, "/v1/flows", string(raw))
	checkNoRouteKeys(t, "log", log.String())
}

// Bad routes in the file are refused naming the file, the key and its
// line; a value is read as the key's own (limits, price, budget).
func TestGatewayRoutesConfigErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	target := "      - name: a\n        upstream: http://127.0.0.1:1/v1\n        model: m\n"
	for _, tc := range []struct {
		name, conf, want string
	}{
		{"unknown key", "models:\n  - name: fast\n    targets:\n      - name: a\n        upstream: http://127.0.0.1:1/v1\n        model: m\n        limts: rpm=1\n",
			"models[0].targets[0].limts: unknown key (line 7)"},
		{"bad limits", "models:\n  - name: fast\n    targets:\n" + target + "        limits: rpm=lots\n", "models[0].targets[0].limits: "},
		{"bad price", "models:\n  - name: fast\n    targets:\n" + target + "        price: input=cheap\n", `models[0].targets[0].price: price input: "cheap" is not a number (line 7)`},
		{"price as a mapping", "models:\n  - name: fast\n    targets:\n" + target + "        price: {input: 1}\n", "models[0].targets[0].price: want a single value"},
		{"budget without a price", "models:\n  - name: fast\n    targets:\n" + target + "        budget: day=2\n", `models[0].targets[0].budget: target "a": a budget needs the key's price, to know what a call costs (line 7)`},
		{"no upstream", "models:\n  - name: fast\n    targets:\n      - name: a\n        model: m\n", `models[0].targets[0]: target "a" needs an upstream: the provider's OpenAI-compatible API root (line 4)`},
		{"no model", "models:\n  - name: fast\n    targets:\n      - name: a\n        upstream: http://127.0.0.1:1/v1\n", `models[0].targets[0]: target "a" needs a model: the upstream's name of the model (line 4)`},
		{"no targets", "models:\n  - name: fast\n", `models[0]: model "fast" has no targets (line 2)`},
		{"bad rule", "models:\n  - name: fast\n    rule: fastest\n    targets:\n" + target, `models[0].rule: rule "fastest": want cheapest or ordered (line 3)`},
		{"bad max wait", "models:\n  - name: fast\n    max_wait: soon\n    targets:\n" + target, `models[0].max_wait: "soon": want a duration`},
		{"bad failures", "models:\n  - name: fast\n    failures: 0\n    targets:\n" + target, `models[0].failures: "0": want a whole number from 1 to 1000 (line 3)`},
		{"empty key variable", "models:\n  - name: fast\n    targets:\n" + target + "        api_key_env: NOT_SET\n", "models[0].targets[0].api_key_env: environment variable NOT_SET is empty (line 7)"},
		{"target twice", "models:\n  - name: fast\n    targets:\n" + target + target, `models[0].targets[1].name: target "a" is listed twice in model "fast" (line 7)`},
		{"model twice", "models:\n  - name: fast\n    targets:\n" + target + "  - name: fast\n    targets:\n" + target, `models[1].name: model "fast" is listed twice (line 7)`},
		{"bad target name", "models:\n  - name: fast\n    targets:\n      - name: a b\n        upstream: http://127.0.0.1:1/v1\n        model: m\n", `target name "a b"`},
		{"alias", "t: &t\nmodels:\n  - name: fast\n    targets:\n      - *t\n", "models: anchors and aliases are not read within models"},
		{"a flow's budget without any price", "flows:\n  - {name: intern, budget: \"day=1\"}\nmodels:\n  - name: fast\n    targets:\n" + target,
			`flows[0].budget: flow "intern": a budget needs the key's price`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
			if err := os.WriteFile(file, []byte(tc.conf), 0o600); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			env := &cli.Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}
			code := runMain(context.Background(), env, []string{"gateway", "--config", file})
			if code == 0 || !strings.Contains(stderr.String(), tc.want) || (!strings.Contains(stderr.String(), file) && tc.name != "bad target name") {
				t.Errorf("exit %d, stderr %q; want an error naming %s and %q", code, stderr.String(), file, tc.want)
			}
		})
	}
}

// TestGatewayRoutesOpenAINodeClient: the official openai npm client, with
// ONE model name, reaches TWO targets — two simulators with keys of their
// own behind sluice gateway --config — and reads which answered from
// X-Sluice-Target; /v1/flows agrees (clients/node/gateway-routes-check.mjs).
func TestGatewayRoutesOpenAINodeClient(t *testing.T) {
	t.Parallel()
	node, modules := testenv.NodeModules(t)
	script, err := filepath.Abs("../../clients/node/gateway-routes-check.mjs")
	if err != nil {
		t.Fatal(err)
	}
	free, freeURL := startKeyedSim(t, "groq", "rpm=600", routeFreeKey)
	paid, paidURL := startKeyedSim(t, "openai", "rpm=600", routePaidKey)
	const clientKey = "gw-routes-node-client-key"
	vars := map[string]string{"APP_KEY": clientKey}
	for k, v := range routeVars {
		vars[k] = v
	}
	url, log := startGateway(t, vars, "--config", routesFile(t, freeURL, paidURL, "client_keys:\n  - env: APP_KEY\n"), "--addr", "127.0.0.1:0")
	ctx := t.Context()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-30*time.Second))
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Dir = filepath.Dir(script)
	cmd.Env = append(os.Environ(), "GATEWAY_BASE_URL="+url+"/v1", "GATEWAY_API_KEY="+clientKey, "GATEWAY_MODEL=fast",
		"GATEWAY_REQUESTS=4", "GATEWAY_NODE_MODULES="+modules)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node gateway-routes-check.mjs: %v\nstderr:\n%s\nstdout:\n%s", err, stderr.String(), stdout.String())
	}
	t.Logf("the client saw: %s", stdout.String())
	type call struct {
		OK         bool   `json:"ok"`
		Status     int    `json:"status"`
		Code       string `json:"code"`
		Message    string `json:"message"`
		Target     string `json:"target"`
		TextLength int    `json:"text_length"`
		Chunks     int    `json:"chunks"`
	}
	var report struct {
		Calls        []call `json:"calls"`
		Stream       call   `json:"stream"`
		UnknownModel call   `json:"unknown_model"`
		Flows        struct {
			Status  int `json:"status"`
			Targets []struct {
				Name   string `json:"name"`
				Model  string `json:"model"`
				Sent   int64  `json:"sent"`
				Picked int64  `json:"picked"`
			} `json:"targets"`
		} `json:"flows"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &report); err != nil {
		t.Fatalf("gateway-routes-check.mjs printed %q: %v", stdout.String(), err)
	}
	answered := map[string]int{}
	for i, c := range append(report.Calls, report.Stream) {
		if !c.OK || c.TextLength == 0 {
			t.Errorf("call %d: %+v", i, c)
		}
		answered[c.Target]++
	}
	if len(report.Calls) != 4 || answered["groq-8b"] != 1 || answered["paid"] != 4 {
		t.Errorf("the client's calls were answered by %v, want groq-8b once and paid for the rest", answered)
	}
	if report.Stream.Chunks < 2 {
		t.Errorf("the stream came in %d chunks", report.Stream.Chunks)
	}
	if u := report.UnknownModel; u.OK || u.Status != 404 || u.Code != "model_not_found" {
		t.Errorf("a model not served: %+v, want a 404 model_not_found the client reads", u)
	}
	sent := map[string]int64{}
	for _, tv := range report.Flows.Targets {
		sent[tv.Name] = tv.Sent
	}
	if report.Flows.Status != 200 || sent["groq-8b"] != 1 || sent["paid"] != 4 {
		t.Errorf("/v1/flows: %+v", report.Flows)
	}
	if f, p := free.Stats().Requests, paid.Stats().Requests; f != 1 || p != 4 {
		t.Errorf("the simulators saw %d and %d requests, want 1 and 4: no request goes to two targets", f, p)
	}
	checkNoRouteKeys(t, "client's report", stdout.String())
	checkNoRouteKeys(t, "log", log.String())
}

// --help documents routes: the models: list and each key a target takes.
func TestGatewayRoutesHelp(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	env := &cli.Env{Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}
	if code := runMain(context.Background(), env, []string{"gateway", "--help"}); code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, typ := range []reflect.Type{reflect.TypeFor[gatewayModel](), reflect.TypeFor[gatewayTarget]()} {
		for i := range typ.NumField() {
			if key := typ.Field(i).Tag.Get("yaml"); !strings.Contains(stdout.String(), key+":") && !strings.Contains(stdout.String(), key+" ") {
				t.Errorf("help does not document the routes' key %s", key)
			}
		}
	}
	for _, want := range []string{"models:", "X-Sluice-Target", "model_not_found"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("help lacks %q", want)
		}
	}
}
