package main

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/run"
)

const runsToken = "runs-token-0123456789abcdef"

// versionApp is an app recording its runs under version on db, with the
// function "work" and, when withGone, "gone". Until hold is closed, a
// step of them blocks until the app stops, and says so on entered.
func versionApp(t *testing.T, db, version string, withGone bool, hold <-chan struct{}, entered chan<- string) *sluice.App {
	t.Helper()
	ctx := context.Background()
	app, err := sluice.New(ctx, sluice.Config{DatabaseURL: db, AppVersion: version, PollInterval: 20 * time.Millisecond,
		StopGrace: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = app.Stop(context.Background()) })
	handler := func(ctx *sluice.Context, ev sluice.Event[map[string]any]) (string, error) {
		return sluice.Step(ctx, "call", func(c context.Context) (string, error) {
			select {
			case <-hold:
				return "done", nil
			default:
			}
			entered <- ctx.RunID()
			<-c.Done() // a stop with no grace cuts it: the run stays unfinished
			return "", c.Err()
		})
	}
	fns := []run.Function{{ID: "work", Event: "work", Concurrency: []run.Concurrency{{Limit: 1}}}}
	if withGone {
		fns = append(fns, run.Function{ID: "gone", Event: "gone"})
	}
	for _, f := range fns {
		if err := sluice.Register(app, f, handler); err != nil {
			t.Fatal(err)
		}
	}
	if err := app.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return app
}

func runsCLI(args ...string) (code int, stdout, stderr string) {
	var out, errOut testenv.Buffer
	env := &cli.Env{Stdout: &out, Stderr: &errOut, Getenv: func(k string) string {
		if k == "SLUICE_API_TOKEN" {
			return runsToken
		}
		return ""
	}}
	code = runMain(context.Background(), env, args)
	return code, out.String(), errOut.String()
}

// Runs left unfinished by a server of version a wait on a server of
// version b: "sluice runs versions" and "sluice status" say so and what to
// run; "sluice runs resume --from-version a" resumes them there, printing
// each run and the one of a function b lacks as skipped with why, and they
// complete; "sluice runs cancel" cancels that one. The server's refusal of
// its own version exits 1 with its words.
func TestRunsOfOtherVersions(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, db string) {
		ctx := context.Background()
		entered := make(chan string, 2)
		hold := make(chan struct{})
		a := versionApp(t, db, "a", true, hold, entered)
		first, err := a.Send(ctx, "work", "1", nil)
		if err != nil {
			t.Fatal(err)
		}
		queued, err := a.Send(ctx, "work", "2", nil) // behind the first: concurrency 1
		if err != nil {
			t.Fatal(err)
		}
		lost, err := a.Send(ctx, "gone", "1", nil)
		if err != nil {
			t.Fatal(err)
		}
		<-entered
		<-entered // the first of work and gone's run are in their step
		if err := a.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		close(hold)

		b := versionApp(t, db, "b", false, hold, nil)
		srv := httptest.NewServer(b.Handler(sluice.HandlerConfig{Token: runsToken}))
		t.Cleanup(srv.Close)

		code, out, errOut := runsCLI("runs", "versions", "--url", srv.URL)
		if code != 0 {
			t.Fatalf("runs versions: exit %d: %s", code, errOut)
		}
		for _, w := range []string{"this server's version: b", "a        3     work 2, gone 1  gone", "sluice runs resume --from-version VERSION"} {
			if !strings.Contains(out, w) {
				t.Errorf("runs versions does not say %q:\n%s", w, out)
			}
		}
		code, out, errOut = runsCLI("status", "--url", srv.URL)
		if want := "3 runs of version a wait: sluice runs resume --from-version a (or cancel); not functions of this server, left by a resume: gone\n"; code != 0 || !strings.HasSuffix(out, want) {
			t.Errorf("status: exit %d (%s), output\n%s\nwant it to end with\n%s", code, errOut, out, want)
		}

		code, _, errOut = runsCLI("runs", "resume", "--from-version", "b", "--url", srv.URL)
		if code != 1 || !strings.Contains(errOut, "that is this process's own version (HTTP 409)") {
			t.Errorf("resume of b's own version: exit %d, stderr %q", code, errOut)
		}
		code, out, errOut = runsCLI("runs", "resume", "--from-version", "a", "--url", srv.URL)
		if code != 0 {
			t.Fatalf("runs resume: exit %d: %s", code, errOut)
		}
		for _, w := range []string{"version a: resumed here 2 runs\n", "  " + first[0].RunID + "\n", "  " + queued[0].RunID + "\n",
			"skipped 1 run:\n  " + lost[0].RunID + `: "gone" is not a function of this process`} {
			if !strings.Contains(out, w) {
				t.Errorf("runs resume does not say %q:\n%s", w, out)
			}
		}
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		for _, id := range []string{first[0].RunID, queued[0].RunID} {
			if s, err := b.Wait(wctx, id); err != nil || s.Status != run.Completed || s.Version != "b" {
				t.Fatalf("run %s after the resume: %+v, %v; want completed on b", id, s, err)
			}
		}

		code, out, errOut = runsCLI("runs", "cancel", "--from-version", "a", "--url", srv.URL)
		if code != 0 || !strings.Contains(out, "version a: cancelled 1 run\n  "+lost[0].RunID+"\n") || strings.Contains(out, "skipped") {
			t.Errorf("runs cancel: exit %d (%s):\n%s", code, errOut, out)
		}
		code, out, _ = runsCLI("runs", "versions", "--url", srv.URL)
		if code != 0 || !strings.Contains(out, "no other version has unfinished runs") {
			t.Errorf("runs versions at the end: exit %d:\n%s", code, out)
		}
	})
}

// The command's refusals: no subcommand, an unknown one, no version, a
// version the server could not carry; and a server without the route.
func TestRunsUsage(t *testing.T) {
	t.Parallel()
	srv, _ := flowsServer(t, "{}")
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"runs"}, 2, "missing the subcommand"},
		{[]string{"runs", "restart"}, 2, `unknown subcommand "restart"`},
		{[]string{"runs", "resume"}, 2, "--from-version is required"},
		{[]string{"runs", "cancel", "--from-version", "v 1"}, 1, `--from-version: version: "v 1": want 1-128 letters`},
		{[]string{"runs", "versions", "--url", srv.URL}, 1, "/v1/versions: HTTP 404"},
	} {
		if code, _, errOut := runsCLI(tc.args...); code != tc.code || !strings.Contains(errOut, tc.says) {
			t.Errorf("%q: exit %d, stderr %q; want %d saying %q", tc.args, code, errOut, tc.code, tc.says)
		}
	}
	if code, out, _ := runsCLI("runs", "resume", "--help"); code != 0 || !strings.Contains(out, "Usage: sluice runs resume --from-version V") {
		t.Errorf("runs resume --help: exit %d:\n%s", code, out)
	}
}
