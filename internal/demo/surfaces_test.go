package demo

import (
	"context"
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/examples/devpick"
	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/httpapi"
	"github.com/sluice-dev/sluice/internal/httpjson"
	"github.com/sluice-dev/sluice/internal/plan"
	"github.com/sluice-dev/sluice/internal/progress"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/ui"
	"github.com/sluice-dev/sluice/run"
)

// One job at one moment shows the same done, total, percentage, rate and
// time left on every surface that shows it: GET /v1/flows, `sluice
// status`, the dashboard's Flows, flow, Overview and Plan pages, and the
// demo's terminal view and side-by-side page. The job is the summary
// backfill of the demo as the health monitor judges it: 19 of its items
// saved and 1 parked, 568 eligible (the 1,412 articles that had their
// summary before it began are not its items), 4 done in the last 47
// minutes: 5.1 an hour, as the monitor reports it.
func TestOneJobShowsTheSameFiguresEverywhere(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 5, 4, 40, 0, 0, time.UTC)
	rate := health.NewSampler(time.Hour, time.Minute)
	rate.Add(now.Add(-47*time.Minute), 16)
	rate.Add(now, 20)
	job := store.Job{Name: devpick.Summary, Pending: 560, Rejected: 8, Saved: 19, Parked: 1,
		LastProgressAt: now.Add(-3 * time.Minute), MonitoringSince: now.Add(-2 * time.Hour)}
	flow := health.Evaluate(job, 0, health.Quota{}, rate, now).Flow
	mon := oneFlow{flow}
	fig := progress.Of(flow, now)
	if fig.Done == 0 || fig.Remaining == 0 || fig.Left <= 0 {
		t.Fatalf("the job's figures %+v: want some done, some left and a time left", fig)
	}
	// What every surface must show of it.
	counts, perHour, left := fig.Counts(), progress.Rate(fig.RatePerHour), progress.Span(fig.Left)
	eta := fig.ETA.Format("2006-01-02 15:04") // the pages write it, to the minute at least

	// GET /v1/flows: the numbers themselves, and the monitor's ETA is the
	// one the pages show at the same moment.
	api := httpapi.New(httpapi.Config{Health: mon, Now: func() time.Time { return now }})
	rec := httptest.NewRecorder()
	api.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/flows", nil))
	var answer struct {
		Flows []health.Flow
		httpjson.Clock
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &answer); err != nil || len(answer.Flows) != 1 {
		t.Fatalf("GET /v1/flows: %d %s (%v)", rec.Code, rec.Body, err)
	}
	if a := answer.Flows[0]; a.Done != fig.Done || a.Done+a.Remaining != fig.Total || a.RatePerHour != fig.RatePerHour || !a.ETA.Equal(fig.ETA) {
		t.Errorf("GET /v1/flows says done %d of %d at %v/h, ETA %s; the pages %d of %d at %v/h, ETA %s",
			a.Done, a.Done+a.Remaining, a.RatePerHour, a.ETA, fig.Done, fig.Total, fig.RatePerHour, fig.ETA)
	}

	surfaces := map[string]string{} // surface → the text of the job's row
	var status strings.Builder
	if err := progress.WriteStatus(&status, answer.Flows, progress.ServerClock(answer.Clock, answer.Flows, now)); err != nil {
		t.Fatal(err)
	}
	surfaces["sluice status"] = lineOf(t, status.String(), devpick.Summary)

	dash, err := ui.New(ui.Config{Engine: noRuns{}, Health: mon, Now: func() time.Time { return now }, AppNow: func() time.Time { return now },
		Keys: func(context.Context, time.Time) []governor.Stats {
			return []governor.Stats{{Key: demoProvider, Flows: []governor.FlowStats{{Name: devpick.Summary, Weight: 1, Share: 1}}}}
		},
		Plan: func(context.Context) (*plan.Plan, error) {
			eta := 95.1
			return &plan.Plan{Scenario: "app groq", Limits: map[string]plan.Limit{},
				Flows: map[string]plan.Flow{devpick.Summary: {Backlog: 568, EtaHours: &eta, EtaFrom: "simulated", StallRisk: "low"}}}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	for path, mark := range map[string]string{"/flows": `data-flow="summary"`, "/flows/summary": `class="summary"`, "/": `data-flow="summary"`, "/plan": `data-flow="summary"`} {
		surfaces["dashboard "+path] = rowOf(t, get(t, dash, path), mark)
	}

	// The demo, on its sluice side, reads the same job through the API.
	db, err := devpick.OpenDB(filepath.Join(t.TempDir(), "devpick.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	if _, err := devpick.Seed(ctx, db, 0); err != nil {
		t.Fatal(err)
	}
	d := &demo{o: demoOptions{speed: demoSpeed, limitsText: devpick.Limits}, clk: stopped(now), db: db, api: api,
		first: now, began: now, base: map[string]map[string]int{}, last: map[string]map[string]time.Time{}, seen: map[string]map[string]int{}, rates: map[string]*health.Sampler{}}
	if _, err := lastPoint(ctx, db); err != nil {
		t.Fatal(err)
	}
	snap, err := d.snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var view strings.Builder
	renderDemo(&view, snap)
	surfaces["the demo's terminal view"] = lineOf(t, view.String(), devpick.Summary)
	page, err := d.page(httptest.NewRequest(http.MethodGet, "/demo", nil))
	if err != nil {
		t.Fatal(err)
	}
	surfaces["the demo's page /demo"] = rowOf(t, string(page), `data-job="summary"`)

	for surface, text := range surfaces {
		want := []string{counts, perHour, left}
		if strings.Contains(surface, "/") {
			want = append(want, eta)
		}
		for _, w := range want {
			if !strings.Contains(text, w) {
				t.Errorf("%s shows %q, without %q", surface, text, w)
			}
		}
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("the job: %s at %s/h, %s left", counts, perHour, left)
		for surface, text := range surfaces {
			t.Logf("%s: %s", surface, text)
		}
	}
}

// stopped is a clock that stays at its time.
type stopped time.Time

func (s stopped) Now() time.Time                   { return time.Time(s) }
func (stopped) Real(d time.Duration) time.Duration { return d }

// oneFlow is a health monitor of one flow.
type oneFlow []health.Flow

func (o oneFlow) Flows() []health.Flow { return o }
func (oneFlow) Ready() error           { return nil }

// noRuns is an engine without runs.
type noRuns struct{}

func (noRuns) Runs(context.Context, engine.RunFilter) ([]run.Summary, error) { return nil, nil }
func (noRuns) RunDetail(context.Context, string, int) (*engine.RunDetail, error) {
	return nil, nil
}
func (noRuns) Cancel(context.Context, string) error          { return nil }
func (noRuns) Rerun(context.Context, string) (string, error) { return "", nil }
func (noRuns) RerunFrom(context.Context, string, string) (string, error) {
	return "", nil
}
func (noRuns) Replay(context.Context, string) (engine.Replayed, error) {
	return engine.Replayed{}, nil
}

// get returns h's page at path.
func get(t *testing.T, h http.Handler, path string) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	body, _ := io.ReadAll(rec.Body)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s: %d\n%s", path, rec.Code, body)
	}
	return string(body)
}

var (
	tags   = regexp.MustCompile(`<[^>]*>`)
	spaces = regexp.MustCompile(`\s+`)
)

// rowOf is the text of the element of page that mark opens: up to its
// row's or section's end, without tags.
func rowOf(t *testing.T, page, mark string) string {
	t.Helper()
	i := strings.Index(page, mark)
	if i < 0 {
		t.Fatalf("no %s in\n%s", mark, page)
	}
	rest := page[i:]
	for _, end := range []string{"</tr>", "</section>"} {
		if j := strings.Index(rest, end); j >= 0 {
			rest = rest[:j]
			break
		}
	}
	return strings.TrimSpace(spaces.ReplaceAllString(html.UnescapeString(tags.ReplaceAllString(rest, " ")), " "))
}

// lineOf is the line of a terminal table that names job.
func lineOf(t *testing.T, out, job string) string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == job {
			return spaces.ReplaceAllString(l, " ")
		}
	}
	t.Fatalf("no line of %s in\n%s", job, out)
	return ""
}
