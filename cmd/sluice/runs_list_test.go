package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/run"
)

// "sluice runs list" searches a server's runs by the API's parameters and
// prints them; a parameter the server refuses exits 1 with its words.
func TestRunsList(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, db string) {
		ctx := context.Background()
		app, err := sluice.New(ctx, sluice.Config{DatabaseURL: db, PollInterval: 20 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = app.Stop(context.Background()) })
		err = sluice.Register(app, run.Function{ID: "check", Event: "doc", Retries: run.NoRetries},
			func(ctx *sluice.Context, ev sluice.Event[map[string]string]) (string, error) {
				return sluice.Step(ctx, "look", func(context.Context) (string, error) {
					if why := ev.Data["fail"]; why != "" {
						return "", errors.New(why)
					}
					return "ok", nil
				})
			})
		if err != nil {
			t.Fatal(err)
		}
		if err := app.Start(ctx); err != nil {
			t.Fatal(err)
		}
		for id, why := range map[string]string{"d1": "missing title", "d2": "", "d3": "missing body"} {
			sent, err := app.Send(ctx, "doc", id, map[string]string{"fail": why})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := app.Wait(ctx, sent[0].RunID); err != nil {
				t.Fatal(err)
			}
		}
		srv := httptest.NewServer(app.Handler(sluice.HandlerConfig{Token: runsToken}))
		t.Cleanup(srv.Close)

		code, out, errOut := runsCLI("runs", "list", "--url", srv.URL, "--status", "failed", "--reason", "missing t")
		if code != 0 || !strings.Contains(out, "check:d1  check     failed") || strings.Contains(out, "check:d3") || !strings.Contains(out, "missing title") {
			t.Errorf("runs list by reason: exit %d (%s):\n%s", code, errOut, out)
		}
		code, out, _ = runsCLI("runs", "list", "--url", srv.URL, "--event-key", "d2")
		if code != 0 || !strings.Contains(out, "check:d2") || strings.Count(out, "check:") != 1 {
			t.Errorf("runs list by event key: exit %d:\n%s", code, out)
		}
		code, out, _ = runsCLI("runs", "list", "--url", srv.URL, "--reason", "nothing like it")
		if code != 0 || out != "no runs match\n" {
			t.Errorf("runs list with no match: exit %d:\n%s", code, out)
		}
		code, _, errOut = runsCLI("runs", "list", "--url", srv.URL, "--until", "soon")
		if code != 1 || !strings.Contains(errOut, `until "soon" is neither an RFC 3339 time nor a duration like 1h`) {
			t.Errorf("runs list --until soon: exit %d, stderr %q", code, errOut)
		}
	})
}
