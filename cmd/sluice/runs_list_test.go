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
	"github.com/sluice-dev/sluice/internal/clock"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/run"
)

// checkServer serves the run API of an app on cfg's database with the
// function "check" of the event "doc", which fails with the doc's "fail",
// once a doc of each of docs (its ID → why it fails, "" for not) has run.
func checkServer(t *testing.T, cfg sluice.Config, docs map[string]string) *httptest.Server {
	t.Helper()
	ctx := context.Background()
	cfg.PollInterval, cfg.Logger = 20*time.Millisecond, slog.New(slog.NewTextHandler(io.Discard, nil))
	app, err := sluice.New(ctx, cfg)
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
	for id, why := range docs {
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
	return srv
}

// "sluice runs list" searches a server's runs by the API's parameters and
// prints them; a parameter the server refuses exits 1 with its words.
func TestRunsList(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, db string) {
		srv := checkServer(t, sluice.Config{DatabaseURL: db}, map[string]string{"d1": "missing title", "d2": "", "d3": "missing body"})

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

// On a server whose app runs on a clock of its own, "sluice runs list"
// says so above its runs, which it prints on that clock, and searches by
// it: since and until are times of the app's clock.
func TestRunsListOnTheAppsClock(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, db string) {
		clk := clock.At(100, time.Date(2031, 6, 15, 12, 0, 0, 0, time.UTC))
		srv := checkServer(t, sluice.Config{DatabaseURL: db, Now: clk.Now, Speed: 100}, map[string]string{"d1": ""})

		// The run was created after noon on the app's clock, half an hour
		// after half past eleven: 18 s of the wall clock.
		code, out, errOut := runsCLI("runs", "list", "--url", srv.URL, "--since", "2031-06-15T11:30:00Z")
		if code != 0 || !strings.HasPrefix(out, "Times in UTC on the server's clock (simulated time, ×100).\n") ||
			!strings.Contains(out, "check:d1  check     completed  2031-06-15 ") {
			t.Errorf("runs list since half past eleven: exit %d (%s):\n%s", code, errOut, out)
		}
		code, out, _ = runsCLI("runs", "list", "--url", srv.URL, "--until", "2031-06-15T11:30:00Z")
		if code != 0 || out != "no runs match\n" {
			t.Errorf("runs list until half past eleven: exit %d:\n%s", code, out)
		}
	})
}
