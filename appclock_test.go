package sluice_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/internal/clock"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/run"
)

// An app on a clock of its own — a hundred times as fast as the wall
// clock, from a day more than four years ahead — shows its runs on that
// clock, on SQLite and PostgreSQL alike: the API's runs, a run with its
// steps and its history, and the dashboard's pages, each answer saying the
// clock; a search since or until a time of that clock finds the run created
// on its side of it and not the other; and the event's time stands beside
// its run's. DBOS records the runs by the wall clock, more than four years
// behind and a hundred times as slow.
//
// The runs are created gap of the wall clock apart, and the search's bound
// read halfway: the conversion may be off by the speed times the time the
// machine takes between two readings of the clocks, and the search's
// answer stands as long as that is under half the gap.
func TestRunsOnTheAppsClock(t *testing.T) {
	t.Parallel()
	const (
		speed = 100
		gap   = 400 * time.Millisecond // of the wall clock, between the two runs
		step  = 20 * time.Millisecond  // of the wall clock, what the step takes at least
	)
	// A run's times may fall short of the clock read before it was sent by
	// DBOS's rounding to the millisecond and the conversion's error: a
	// minute of the app's clock is 600 ms of the wall clock's.
	const slack = time.Minute
	testenv.Databases(t, func(t *testing.T, db string) {
		clk := clock.At(speed, time.Date(2031, 6, 15, 12, 0, 0, 0, time.UTC))
		app := newApp(t, sluice.Config{DatabaseURL: db, Now: clk.Now, Speed: speed})
		err := sluice.Register(app, run.Function{ID: "ingest", Event: "doc"}, func(ctx *sluice.Context, ev sluice.Event[map[string]any]) (string, error) {
			return sluice.Step(ctx, "load", func(context.Context) (string, error) {
				time.Sleep(step) // the work of the step, which takes its time
				return "ok", nil
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := app.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		// send sends a doc and waits for its run, which the clock's reading
		// before and after bound.
		send := func(id string) (runID string, from, to time.Time) {
			from = clk.Now()
			sent, err := app.Send(t.Context(), "doc", id, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := app.Wait(t.Context(), sent[0].RunID); err != nil {
				t.Fatal(err)
			}
			return sent[0].RunID, from, clk.Now()
		}
		first, firstFrom, firstTo := send("a")
		wallAfter(gap / 2)
		mid := clk.Now()
		wallAfter(gap / 2)
		second, _, secondTo := send("b")

		within := func(what string, got, from, to time.Time) {
			t.Helper()
			if got.Before(from.Add(-slack)) || got.After(to) {
				t.Errorf("%s at %s, want on the app's clock, from %s to %s", what, got, from, to)
			}
		}
		api := httptest.NewServer(app.Handler(sluice.HandlerConfig{}))
		t.Cleanup(api.Close)
		var list struct {
			Runs  []run.Summary
			Now   time.Time
			Speed float64
		}
		getJSON(t, api.URL+"/v1/runs", &list)
		if len(list.Runs) != 2 || list.Runs[0].ID != second || list.Runs[1].ID != first {
			t.Fatalf("runs %+v, want %s then %s", list.Runs, second, first)
		}
		within("the first run's creation", list.Runs[1].CreatedAt, firstFrom, firstTo)
		within("the first run's end", list.Runs[1].EndedAt, firstFrom, firstTo)
		if list.Speed != speed || list.Now.Before(secondTo) {
			t.Errorf("the runs' answer says the clock's now is %s at speed %v, want after %s at %v", list.Now, list.Speed, secondTo, speed)
		}

		var detail struct {
			CreatedAt time.Time `json:"created_at"`
			Event     struct{ TS time.Time }
			Steps     []struct {
				StartedAt  time.Time `json:"started_at"`
				DurationMS float64   `json:"duration_ms"`
			}
			Speed float64
		}
		getJSON(t, api.URL+"/v1/runs/"+first, &detail)
		within("the first run's creation in its detail", detail.CreatedAt, firstFrom, firstTo)
		within("its event", detail.Event.TS, firstFrom, firstTo)
		if len(detail.Steps) != 1 || detail.Speed != speed {
			t.Fatalf("the run's detail: %+v", detail)
		}
		within("its step", detail.Steps[0].StartedAt, firstFrom, firstTo)
		if want := float64(speed * step / time.Millisecond); detail.Steps[0].DurationMS < want {
			t.Errorf("the step took %v ms, want at least %v: %v of the wall clock at ×%d", detail.Steps[0].DurationMS, want, step, speed)
		}
		var hist struct {
			CreatedAt time.Time `json:"created_at"`
			Attempts  []struct {
				EndedAt time.Time `json:"ended_at"`
			}
		}
		getJSON(t, api.URL+"/v1/runs/"+first+"/history", &hist)
		within("the first run's creation in its history", hist.CreatedAt, firstFrom, firstTo)
		if len(hist.Attempts) != 1 {
			t.Fatalf("history: %+v", hist)
		}
		within("its attempt's end", hist.Attempts[0].EndedAt, firstFrom, firstTo)

		var flows struct {
			Now   time.Time
			Speed float64
		}
		before := clk.Now()
		getJSON(t, api.URL+"/v1/flows", &flows)
		if flows.Speed != speed || flows.Now.Before(before) || flows.Now.After(clk.Now()) {
			t.Errorf("/v1/flows says its clock reads %s at ×%v, want from %s at ×%d", flows.Now, flows.Speed, before, speed)
		}

		// A search by the app's clock: the first run was created before mid,
		// the second after.
		at := mid.Format(time.RFC3339Nano)
		for _, tc := range []struct{ query, want string }{{"since=" + at, second}, {"until=" + at, first}} {
			getJSON(t, api.URL+"/v1/runs?"+tc.query, &list)
			if len(list.Runs) != 1 || list.Runs[0].ID != tc.want {
				t.Errorf("runs %s: %+v, want %s alone", tc.query, list.Runs, tc.want)
			}
		}

		dash, err := app.Dashboard(sluice.DashboardConfig{})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(dash)
		t.Cleanup(srv.Close)
		page := getPage(t, srv.URL+"/runs?since="+url.QueryEscape(at))
		if !strings.Contains(page, `data-run="`+second+`"`) || strings.Contains(page, `data-run="`+first+`"`) {
			t.Errorf("the Runs page's search since %s does not list %s alone:\n%s", at, second, page)
		}
		page = getPage(t, srv.URL+"/runs/"+url.PathEscape(first))
		created := regexp.MustCompile(`<dt>Created</dt><dd><time datetime="([^"]+)"`).FindStringSubmatch(page)
		if created == nil {
			t.Fatalf("the run's page has no creation time:\n%s", page)
		}
		c, err := time.Parse(time.RFC3339Nano, created[1])
		if err != nil {
			t.Fatal(err)
		}
		within("the first run's creation on its page", c, firstFrom, firstTo)
		if !strings.Contains(page, "simulated time, ×100") {
			t.Errorf("the run's page does not name its clock:\n%s", page)
		}
	})
}

// wallAfter returns once d of the wall clock has passed: the app's clock
// moves on with it.
func wallAfter(d time.Duration) {
	<-time.After(d)
}

func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	body := getPage(t, u)
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("GET %s: %s: %v", u, body, err)
	}
}

func getPage(t *testing.T, u string) string {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s (%v)", u, resp.StatusCode, b, err)
	}
	return string(b)
}
