package main

import (
	"bytes"
	"context"
	"io"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/examples/summarize"
)

func TestServeRefusesOpenBindWithoutToken(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	env := &cmdEnv{stdout: io.Discard, stderr: &stderr, getenv: func(string) string { return "" }}
	code := runMain(context.Background(), env, []string{"serve", "--addr", "0.0.0.0:0", "--db", filepath.Join(t.TempDir(), "s.db")})
	if code != 1 || !strings.Contains(stderr.String(), "without authentication: set SLUICE_API_TOKEN") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
}

func TestServeRefusesShortToken(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	env := &cmdEnv{stdout: io.Discard, stderr: &stderr, getenv: func(k string) string {
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
	env := &cmdEnv{stdout: io.Discard, stderr: io.Discard, getenv: func(k string) string {
		if k == "SLUICE_API_TOKEN" {
			return "tok"
		}
		return ""
	}}
	app, err := newSummarizeApp(context.Background(), env, summarizeOptions{db: filepath.Join(t.TempDir(), "s.db"), providerURL: "http://127.0.0.1:1/v1", profile: "groq", limits: "rpm=30"})
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
	env.stdout, env.stderr = &out, &errb
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
