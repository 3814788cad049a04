package main

import (
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/testenv"
)

// TestServeThrottlesEveryDoor: sluice serve counts the wrong tokens of
// every door that checks one — the API, the gateway's client keys (the
// API's token is one), /metrics with its own token — toward one throttle
// per address, with the dashboard's: once an address is throttled at one
// door, the right token gets 429 with Retry-After at every door, and the
// log says so in one line. The attack that found the API unthrottled ran
// on both databases; so does its case here.
func TestServeThrottlesEveryDoor(t *testing.T) {
	t.Parallel()
	const apiToken, metricsToken = "api-token-0123456789abcdef", "metrics-token-0123456789abcdef"
	const chat = `{"model":"sim-model","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct{ guessAt, db string }{
		{"/v1/runs", "sqlite"},
		{"/v1/runs", "postgres"},
		{"/v1/chat/completions", "sqlite"},
		{"/metrics", "sqlite"},
	} {
		t.Run("guesses at "+tc.guessAt+" on "+tc.db, func(t *testing.T) {
			t.Parallel()
			db := filepath.Join(t.TempDir(), "s.db")
			if tc.db == "postgres" {
				db = testenv.Postgres(t)
			}
			env := map[string]string{"SLUICE_API_TOKEN": apiToken, "SCRAPE": metricsToken}
			base, logs := startServeLogged(t, func(k string) string { return env[k] },
				"--db", db, "--provider-url", "http://127.0.0.1:1/v1",
				"--gateway", "--metrics-token-env", "SCRAPE")
			try := func(path, token string) (int, string) {
				t.Helper()
				method, body := "GET", ""
				if path == "/v1/chat/completions" {
					method, body = "POST", chat
				}
				return call(t, method, base+path, body, map[string]string{"Authorization": "Bearer " + token})
			}

			// Until the throttle answers: 10 wrong tokens within a minute,
			// more should the machine take longer than that over them.
			wrong := 0
			for ; ; wrong++ {
				code, answer := try(tc.guessAt, fmt.Sprintf("guess-%04d-not-a-token", wrong))
				if code == http.StatusTooManyRequests {
					break
				}
				if code != http.StatusUnauthorized {
					t.Fatalf("wrong token %d at %s: %s", wrong+1, tc.guessAt, answer)
				}
				if wrong == 1000 {
					t.Fatalf("1,000 wrong tokens at %s, never throttled", tc.guessAt)
				}
			}
			if wrong < 10 {
				t.Errorf("throttled after %d wrong tokens, want 10", wrong)
			}

			for _, door := range []struct{ path, token string }{
				{"/v1/runs", apiToken},
				{"/v1/chat/completions", apiToken},
				{"/metrics", metricsToken},
				{"/runs", apiToken},
			} {
				code, answer := try(door.path, door.token)
				if code != http.StatusTooManyRequests || !strings.Contains(answer, "\nRetry-After: ") {
					t.Errorf("the right token at %s from the throttled address: want 429 with Retry-After, got %s", door.path, answer)
				}
			}
			code, answer := call(t, "POST", base+"/login", url.Values{"token": {apiToken}, "next": {"/"}}.Encode(),
				map[string]string{"Content-Type": "application/x-www-form-urlencoded"})
			if code != http.StatusTooManyRequests || strings.Contains(answer, "Set-Cookie") {
				t.Errorf("the dashboard's sign-in with the right token from the throttled address: want 429 and no session, got %s", answer)
			}
			if n := strings.Count(logs.String(), `"msg":"sluice: requests with a wrong token","remote":"127.0.0.1"`); n != 1 {
				t.Errorf("%d log lines for the address's wrong tokens, want 1:\n%s", n, logs.String())
			}
		})
	}
}
