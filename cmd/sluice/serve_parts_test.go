package main

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/examples/summarize"
	"github.com/sluice-dev/sluice/internal/forecast"
)

// startServe runs "sluice serve args…" until the test ends and returns its
// base URL once it is ready.
func startServe(t *testing.T, getenv func(string) string, args ...string) string {
	t.Helper()
	base, _ := startServeLogged(t, getenv, args...)
	return base
}

func startSim(t *testing.T, limits string) (*forecast.Model, string) {
	t.Helper()
	return startSimProfile(t, "groq", limits)
}

// One serve process answers for the functions' API, the gateway and
// /metrics on one address, and the gateway's callers and the functions
// share the key's one governor: both show under the key in /metrics, and
// the provider saw every call of both.
func TestServeRunsEverythingInOneProcess(t *testing.T) {
	t.Parallel()
	model, provider := startSim(t, "rpm=600,tpm=200000")
	const apiToken, metricsToken = "api-token-0123456789abcdef", "metrics-token-0123456789abcdef"
	env := map[string]string{"SLUICE_API_TOKEN": apiToken, "SCRAPE": metricsToken}
	base := startServe(t, func(k string) string { return env[k] },
		"--db", filepath.Join(t.TempDir(), "s.db"), "--provider-url", provider, "--limits", "rpm=600,tpm=200000",
		"--gateway", "--flow", "web=2", "--metrics-token-env", "SCRAPE")
	do := func(method, path, token, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	if code, body := do("POST", "/v1/chat/completions", "", `{"model":"sim-model","max_tokens":20,"messages":[{"role":"user","content":"hi"}]}`); code != 401 {
		t.Fatalf("the gateway without a key: %d %s", code, body)
	}
	code, body := do("POST", "/v1/chat/completions", apiToken, `{"model":"sim-model","max_tokens":20,"messages":[{"role":"user","content":"hi"}]}`)
	if code != 200 || !strings.Contains(body, "chat.completion") {
		t.Fatalf("the gateway with the API token: %d %s", code, body)
	}
	// The gateway forwards X-Sluice-Flow; the request above went to default.
	if code, body := do("POST", "/v1/events", apiToken, `{"name":"`+summarize.Event+`","data":{"documentId":"d1"}}`); code != 202 {
		t.Fatalf("event: %d %s", code, body)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		_, runs := do("GET", "/v1/runs?status=completed", apiToken, "")
		if strings.Contains(runs, "summarize-doc:key:d1") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the summarize run did not complete: %s", runs)
		}
		time.Sleep(50 * time.Millisecond) // poll interval: until the run has completed (the loop's deadline bounds it)
	}

	if code, body := do("GET", "/v1/flows", apiToken, ""); code != 200 || !strings.Contains(body, `"name":"web"`) || !strings.Contains(body, `"key":"groq"`) {
		t.Errorf("GET /v1/flows: %d %s", code, body)
	}
	if code, _ := do("GET", "/metrics", "", ""); code != 401 {
		t.Errorf("/metrics without a token: %d", code)
	}
	if code, _ := do("GET", "/metrics", apiToken, ""); code != 401 {
		t.Errorf("/metrics with the API's token, though it has its own: %d", code)
	}
	code, scrape := do("GET", "/metrics", metricsToken, "")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{
		`sluice_flow_admissions_total{flow="default",key="groq"} 1`, // the gateway's call
		`sluice_gateway_requests_total{code="200",flow="default",key="groq"} 1`,
		`sluice_runs_finished_total{function="summarize-doc",status="completed"} 1`,
		`sluice_limit_capacity{key="groq",limit="rpm"} 600`,
	} {
		if !strings.Contains(scrape, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if !strings.Contains(scrape, `sluice_flow_admissions_total{flow="summaries",key="groq"}`) {
		t.Errorf("/metrics lacks the functions' admissions under the same key:\n%s", grepLines(scrape, "sluice_flow_admissions_total"))
	}
	if st := model.Stats(); st.Requests < 2 || st.Rejected > 0 {
		t.Errorf("the provider saw %+v: want the gateway's call and the pipeline's, none refused", st)
	}
}

func grepLines(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
