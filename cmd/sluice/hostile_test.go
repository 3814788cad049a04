package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/examples/summarize"
	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/internal/redact"
	"github.com/sluice-dev/sluice/internal/testenv"
)

// TestHostileUpstreamNeverShowsTheKey: a provider that echoes the key into
// every field of its errors, every header, its completions and its stream
// events. The key shows in none of what serve and the gateway leave: serve's
// runs as its API and its dashboard show them, the gateway's answers
// (plain and streamed, served by serve --gateway and by sluice gateway),
// their logs, and any row of serve's database.
func TestHostileUpstreamNeverShowsTheKey(t *testing.T) {
	t.Parallel()
	const key = testenv.HostileKey
	upstream := testenv.HostileProvider(t)
	t.Run("serve", func(t *testing.T) {
		t.Parallel()
		testenv.Databases(t, func(t *testing.T, db string) {
			const token = "api-token-0123456789abcdef"
			vars := map[string]string{"SLUICE_API_TOKEN": token, "PROVIDER_KEY": key}
			base, logs := startServeLogged(t, func(k string) string { return vars[k] },
				"--db", db, "--provider-url", upstream, "--profile", "openai", "--api-key-env", "PROVIDER_KEY",
				"--limits", "rpm=100000,tpm=10000000", "--gateway", "--log-level", "debug", "--log-format", "text")
			auth := map[string]string{"Authorization": "Bearer " + token}
			var seen strings.Builder
			ends := map[string]string{"say-400": "failed", "say-quota": "failed", "hello": "completed"}
			for doc := range ends {
				code, body := call(t, "POST", base+"/v1/events", `{"name":"`+summarize.Event+`","data":{"documentId":"`+doc+`"}}`, auth)
				if code != http.StatusAccepted {
					t.Fatalf("event %s: %d %s", doc, code, body)
				}
			}
			deadline := time.Now().Add(time.Minute)
			for doc, want := range ends {
				id := summarize.FunctionID + ":key:" + doc
				for {
					_, body := call(t, "GET", base+"/v1/runs/"+id, "", auth)
					if strings.Contains(body, `"status":"`+want+`"`) {
						seen.WriteString(body)
						if doc == "say-400" && !strings.Contains(body, redact.KeyMark) {
							t.Errorf("the 400's error lost the provider's fields rather than the key in them: %s", body)
						}
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("run %s did not end %s: %s", id, want, body)
					}
					time.Sleep(20 * time.Millisecond) // poll interval: until the run has ended (the loop's deadline bounds it)
				}
				_, page := call(t, "GET", base+"/runs/"+id, "", auth)
				seen.WriteString(page)
			}
			for _, path := range []string{"/v1/runs", "/v1/flows", "/", "/runs", "/flows"} {
				_, body := call(t, "GET", base+path, "", auth)
				seen.WriteString(body)
			}
			testenv.AssertNoKey(t, "serve's API and dashboard", seen.String(), key)
			testenv.AssertNoKey(t, "serve --gateway's answers", gatewayAnswers(t, base, auth), key)
			testenv.AssertNoKey(t, "serve's log", logs.String(), key)
			testenv.AssertNoKey(t, "serve's database", testenv.DatabaseText(t, db), key)
		})
	})
	t.Run("gateway", func(t *testing.T) {
		t.Parallel()
		base, logs := startGateway(t, map[string]string{"SLUICE_UPSTREAM_KEY": key}, "--upstream", upstream, "--profile", "openai",
			"--limits", "rpm=100000,tpm=10000000", "--addr", "127.0.0.1:0", "--retry-base", "1ms", "--log-level", "debug")
		testenv.AssertNoKey(t, "the gateway's answers", gatewayAnswers(t, base, nil), key)
		testenv.AssertNoKey(t, "the gateway's log", logs.String(), key)
	})
}

// gatewayAnswers sends the gateway at base one request of each kind the
// hostile provider answers differently, and returns every answer's status,
// header and body.
func gatewayAnswers(t *testing.T, base string, header map[string]string) string {
	t.Helper()
	h := map[string]string{"X-Sluice-Max-Wait": "5s"}
	for k, v := range header {
		h[k] = v
	}
	var all strings.Builder
	for _, tc := range []struct {
		say, extra string
		status     int
	}{
		{"hello", "", 200},
		{"hello", `,"stream":true`, 200},
		{"stream-error", `,"stream":true`, 200},
		{"say-400", "", 400},
		{"say-500", "", 500},
		{"say-quota", "", 429},
		{"say-429-once", "", 200},
	} {
		code, body := call(t, "POST", base+"/v1/chat/completions",
			`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"`+tc.say+`"}]`+tc.extra+`}`, h)
		if code != tc.status {
			t.Errorf("%s%s: status %d, want %d: %s", tc.say, tc.extra, code, tc.status, body)
		}
		if tc.say == "say-400" && !strings.Contains(body, redact.KeyMark) {
			t.Errorf("the gateway's 400 lost the provider's fields rather than the key in them: %s", body)
		}
		all.WriteString(body)
	}
	_, body := call(t, "GET", base+"/v1/models", "", h)
	all.WriteString(body)
	return all.String()
}

// call makes one request and returns its status and its header and body as
// text.
func call(t *testing.T, method, url, body string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
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
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s: %d\n", method, url, resp.StatusCode)
	_ = resp.Header.Write(&b)
	b.Write(data)
	b.WriteByte('\n')
	return resp.StatusCode, b.String()
}

// startServeLogged runs "sluice serve args…" until the test ends and returns
// its base URL once it is ready, and its log.
func startServeLogged(t *testing.T, getenv func(string) string, args ...string) (string, *testenv.Buffer) {
	t.Helper()
	pr, pw := io.Pipe()
	logs := &testenv.Buffer{}
	env := &cli.Env{Stdout: pw, Stderr: logs, Getenv: getenv}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- runMain(ctx, env, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...))
		pw.Close()
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("serve exited %d after its context ended: %s", code, logs.String())
		}
	})
	lines := bufio.NewScanner(pr)
	if !lines.Scan() {
		t.Fatalf("serve printed nothing: %s", logs.String())
	}
	base, ok := strings.CutPrefix(lines.Text(), "listening on ")
	if !ok {
		t.Fatalf("first line %q, want the address", lines.Text())
	}
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "ready in") {
		t.Fatalf("second line %q, want ready: %s", lines.Text(), logs.String())
	}
	go func() {
		for lines.Scan() {
		}
	}()
	return base, logs
}
