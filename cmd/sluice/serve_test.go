package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/examples/summarize"
	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/internal/serveapp"
)

func TestServeRefusesOpenBindWithoutToken(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	env := &cli.Env{Stdout: io.Discard, Stderr: &stderr, Getenv: func(string) string { return "" }}
	code := runMain(context.Background(), env, []string{"serve", "--addr", "0.0.0.0:0", "--db", filepath.Join(t.TempDir(), "s.db")})
	if code != 1 || !strings.Contains(stderr.String(), "without authentication: set SLUICE_API_TOKEN") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
}

func TestServeRefusesShortToken(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	env := &cli.Env{Stdout: io.Discard, Stderr: &stderr, Getenv: func(k string) string {
		if k == "SLUICE_API_TOKEN" {
			return "x"
		}
		return ""
	}}
	code := runMain(context.Background(), env, []string{"serve", "--addr", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "s.db")})
	if code != 1 || !strings.Contains(stderr.String(), "SLUICE_API_TOKEN is 1 characters long") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
}

func TestSendPostsEvent(t *testing.T) {
	t.Parallel()
	env := &cli.Env{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(k string) string {
		if k == "SLUICE_API_TOKEN" {
			return "tok"
		}
		return ""
	}}
	app, err := serveapp.New(context.Background(), env.Getenv, serveapp.Options{DB: filepath.Join(t.TempDir(), "s.db"), ProviderURL: "http://127.0.0.1:1/v1", Profile: "groq", Limits: "rpm=30"})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Stop(context.Background())
	if err := app.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(app.Handler(sluiceHandlerConfig("tok")))
	defer srv.Close()

	var out, errb bytes.Buffer
	env.Stdout, env.Stderr = &out, &errb
	code := runMain(context.Background(), env, []string{"send", summarize.Event, "--id", "e1", "--data", `{"documentId":"d1"}`, "--url", srv.URL})
	if code != 0 || !strings.Contains(out.String(), `"run_id": "summarize-doc:key:d1"`) || !strings.Contains(out.String(), `"queued"`) {
		t.Fatalf("exit %d, out %s, err %s", code, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	code = runMain(context.Background(), env, []string{"send", "nobody/listens", "--url", srv.URL})
	if code != 1 || !strings.Contains(errb.String(), "no function") || !strings.Contains(errb.String(), "404") {
		t.Fatalf("unknown event: exit %d, err %s", code, errb.String())
	}
	code = runMain(context.Background(), env, []string{"send", "x", "--data", "[1]", "--url", srv.URL})
	if code != 1 || !strings.Contains(errb.String(), "not a JSON object") {
		t.Fatalf("bad data: exit %d, err %s", code, errb.String())
	}
}

// serve listens before it opens the database: while another connection
// holds the file's write lock, /healthz answers and /readyz says starting;
// once the lock goes, /readyz turns 200 and the API works.
func TestServeListensThenStarts(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "s.db")
	h, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	conn, err := h.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"BEGIN EXCLUSIVE", "CREATE TABLE held (x)"} {
		if _, err := conn.ExecContext(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	pr, pw := io.Pipe()
	env := &cli.Env{Stdout: pw, Stderr: io.Discard, Getenv: func(string) string { return "" }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- runMain(ctx, env, []string{"serve", "--addr", "127.0.0.1:0", "--db", "sqlite:" + path + "?_pragma=busy_timeout(20000)", "--provider-url", "http://127.0.0.1:1/v1"})
		pw.Close()
	}()
	lines := bufio.NewScanner(pr)
	if !lines.Scan() {
		t.Fatal("serve printed nothing")
	}
	base, ok := strings.CutPrefix(lines.Text(), "listening on ")
	if !ok {
		t.Fatalf("first line %q, want the address", lines.Text())
	}
	go func() {
		for lines.Scan() { // drain "ready in …"
		}
	}()
	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != 200 {
		t.Fatalf("/healthz right after listening: %d %s", code, body)
	}
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, `"starting"`) || !strings.Contains(body, "opening the database") {
		t.Fatalf("/readyz while the database is locked: %d %s", code, body)
	}
	if code, body := get("/v1/runs"); code != 503 || !strings.Contains(body, "starting") {
		t.Fatalf("the API while starting: %d %s", code, body)
	}
	if _, err := conn.ExecContext(context.Background(), "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	deadline := time.Now().Add(time.Minute)
	for {
		code, body := get("/readyz")
		if code == 200 {
			break
		}
		if code != 503 || !strings.Contains(body, `"starting"`) || time.Now().After(deadline) {
			t.Fatalf("/readyz while starting: %d %s", code, body)
		}
		time.Sleep(20 * time.Millisecond) // poll interval: until ready (the loop's deadline bounds it)
	}
	resp, err := http.Post(base+"/v1/events", "application/json", strings.NewReader(`{"name":"`+summarize.Event+`","data":{"documentId":"d1"}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 202 {
		t.Fatalf("event once ready: %d", resp.StatusCode)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("serve exited %d after its context ended", code)
	}
}

// A start-up that fails ends serve with the error, though it was listening.
func TestServeStartFailureExits(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	env := &cli.Env{Stdout: io.Discard, Stderr: &stderr, Getenv: func(string) string { return "" }}
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code := runMain(ctx, env, []string{"serve", "--addr", "127.0.0.1:0", "--db", filepath.Join(file, "s.db")})
	if code != 1 || !strings.Contains(stderr.String(), "s.db") {
		t.Fatalf("exit %d, stderr %q: want 1 naming the database", code, stderr.String())
	}
}

// serve's config file and its flags accept and refuse the same values, and
// a refusal names where the value was given: the flag, or the file's key
// and line. Flags given explicitly win over the file.
func TestServeConfigFile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		file string   // "" for none
		args []string // besides --config
		want string
	}{
		{"unknown key", "addr: 127.0.0.1:0\ncolour: red\n", nil, "colour: unknown key (line 2)"},
		{"bad duration in the file", "run_timeout: soon\n", nil, `run_timeout: invalid value "soon"`},
		{"negative run timeout in the file", "\nrun_timeout: -5m\n", nil, "run_timeout: -5m0s: want a positive duration (line 2)"},
		{"negative run timeout as a flag", "", []string{"--run-timeout", "-5m"}, "--run-timeout: -5m0s: want a positive duration"},
		{"bad limits in the file", "limits: rpm=abc\n", nil, "limits: "},
		{"bad limits as a flag", "", []string{"--limits", "rpm=abc"}, "--limits: "},
		{"bad price in the file", "price: input=free\n", nil, `price: price input: "free" is not a number (line 1)`},
		{"budget without a price", "", []string{"--budget", "day=5"}, "--budget: a budget needs the key's price"},
		// A budget with --node is the cluster's: taken, the next check refuses.
		{"budget on a node, then a bad profile", "", []string{"--price", "input=1", "--budget", "day=5", "--node", "a", "--profile", "acme"}, "--profile: "},
		{"a flow's bad budget", "gateway: true\nflows:\n  - {name: a, budget: \"day=x\"}\n", nil, `flows[0].budget: budget day: "x" is not a number`},
		{"a flow's budget without a price", "gateway: true\nflows:\n  - {name: a, budget: \"day=1\"}\n", nil, `flow "a": a budget needs the key's price`},
		{"flag wins over the file", "run_timeout: -5m\nlimits: nope=3\n", []string{"--run-timeout", "1m"}, "(line 2)"},
		{"bad log format", "log_format: xml\n", nil, `log_format: "xml": want auto, text or json (line 1)`},
		{"bad profile", "profile: acme\n", nil, "profile: "},
		{"event bound out of range", "max_event_bytes: 0\n", nil, "max_event_bytes: 0: want between 1 and"},
		{"allowed hosts as a list", "allowed_hosts: [\"bad host\"]\n", nil, "allowed_hosts: "},
		{"a node name with a space", "", []string{"--node", "node a"}, `--node: "node a": letters, digits, '.', '_' and '-' only`},
		{"a node name too long", "node: " + strings.Repeat("n", 65) + "\n", nil, "node: " + `"` + strings.Repeat("n", 64) + `…": at most 64 bytes (line 1)`},
		{"a lease TTL out of range", "lease_ttl: 2h\n", nil, "lease_ttl: 2h0m0s: want from 1ms to 1h (line 1)"},
		{"a day burst over a day", "day_burst: 25h\n", nil, "day_burst: 25h0m0s: want from 1ns to 24h, or negative for no pacing (line 1)"},
		{"a day burst of 0", "", []string{"--day-burst", "0"}, "--day-burst: 0s: want from 1ns to 24h, or negative for no pacing"},
		{"an adoption period of 0", "", []string{"--adopt-every", "0"}, "--adopt-every: 0s: want from 1ns to 1h, or negative for never"},
		{"an adoption period over an hour", "adopt_every: 61m\n", nil, "adopt_every: 1h1m0s: want from 1ns to 1h, or negative for never (line 1)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			args := append([]string{"serve", "--addr", "127.0.0.1:0", "--db", filepath.Join(dir, "s.db")}, tt.args...)
			if tt.file != "" {
				path := filepath.Join(dir, "serve.yaml")
				if err := os.WriteFile(path, []byte(tt.file), 0o600); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--config", path)
			}
			var stderr bytes.Buffer
			env := &cli.Env{Stdout: io.Discard, Stderr: &stderr, Getenv: func(string) string { return "" }}
			code := runMain(context.Background(), env, args)
			if code != 1 || !strings.Contains(stderr.String(), tt.want) {
				t.Fatalf("exit %d, stderr %q; want 1 and %q", code, stderr.String(), tt.want)
			}
			if tt.file != "" && !strings.HasPrefix(tt.want, "--") && !strings.Contains(stderr.String(), "--config ") {
				t.Errorf("a value from the file is not named by the file: %q", stderr.String())
			}
		})
	}
}

// A bound of the gateway's line given to serve without the gateway does
// nothing, so it is refused, as gateway flows are, and the bound is
// checked when the gateway is on.
func TestServeMaxFlowParkedNeedsTheGateway(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"without --gateway", []string{"--max-flow-parked", "8"}, "--max-flow-parked: a bound of the gateway's line without the gateway"},
		{"out of bounds", []string{"--gateway", "--max-flow-parked", "0"}, "--max-flow-parked: 0 is not between 1 and"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stderr bytes.Buffer
			env := &cli.Env{Stdout: io.Discard, Stderr: &stderr, Getenv: func(string) string { return "" }}
			args := append([]string{"serve", "--addr", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "s.db")}, tc.args...)
			if code := runMain(context.Background(), env, args); code == 0 || !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("exit %d, stderr %q, want it to say %q", code, stderr.String(), tc.want)
			}
		})
	}
}
