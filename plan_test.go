package sluice_test

import (
	"context"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/llm"
	"github.com/sluice-dev/sluice/run"
)

// planPage GETs the dashboard's /plan and fails t unless it answers 200.
func planPage(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	res, err := srv.Client().Get(srv.URL + "/plan")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /plan: %d, want 200:\n%s", res.StatusCode, body)
	}
	return string(body)
}

var (
	cellRE = regexp.MustCompile(`(?s)<td[^>]*>(.*?)</td>`)
	tagRE  = regexp.MustCompile(`<[^>]*>`)
)

// planRow is the cells' text of the plan page's row with attr="value"
// (data-flow or data-limit), nil when there is none.
func planRow(page, attr, value string) []string {
	m := regexp.MustCompile(`(?s)<tr ` + attr + `="` + regexp.QuoteMeta(value) + `">(.*?)</tr>`).FindStringSubmatch(page)
	if m == nil {
		return nil
	}
	var cells []string
	for _, c := range cellRE.FindAllStringSubmatch(m[1], -1) {
		cells = append(cells, strings.Join(strings.Fields(html.UnescapeString(tagRE.ReplaceAllString(c[1], " "))), " "))
	}
	return cells
}

// The columns of the plan page's flow rows.
const (
	colItemsPerDay  = 2
	colTokensPerDay = 4
	colBacklog      = 5
)

// TestDashboardPlan: the dashboard's Plan page shows the planner's table
// for the running configuration: the first provider key's limits, and a
// row for each flow that calls it — before Start, from the configuration
// alone (sizes unknown, so said); once calls ran, with each flow's calls
// of the last day. The second key's function is not on the page.
func TestDashboardPlan(t *testing.T) {
	t.Parallel()
	limits := governor.Limits{governor.RPM: 1000, governor.TPM: 100_000, governor.TPD: 5_000_000}
	_, groq := simProvider(t, limits)
	_, other := simProvider(t, governor.Limits{governor.RPM: 1000})
	app := newApp(t, sluice.Config{
		DatabaseURL: filepath.Join(t.TempDir(), "s.db"),
		Providers:   []sluice.Provider{{Name: "groq", LLM: groq, Limits: limits}, {Name: "other", LLM: other}},
		Flows:       []governor.FlowConfig{{Name: "ask", Weight: 3}},
	})
	registerCall(t, app, run.Function{ID: "ask", Event: "ask", Retries: run.NoRetries})
	registerCall(t, app, run.Function{ID: "ask-other", Event: "ask-other", Provider: "other", Retries: run.NoRetries})
	src := &memItems{items: map[string]string{}, saved: map[string]string{}}
	for i := range 7 {
		src.items[fmt.Sprintf("a%02d", i)] = "Ein Artikel über das Wetter."
	}
	err := sluice.RegisterBackfill(app, sluice.Backfill[string]{
		Backfill: run.Backfill{ID: "titles", MaxBatch: 2, Poll: 20 * time.Millisecond},
		Pending:  src.pending,
		Load:     src.load,
		Request: func(items []sluice.Item[string]) (*llm.ChatRequest, error) {
			var b strings.Builder
			for _, it := range items {
				b.WriteString(it.Data + "\n")
			}
			return &llm.ChatRequest{Model: "sim-model", MaxTokens: 20 * len(items), Messages: []llm.Message{{Role: "user", Content: b.String()}}}, nil
		},
		Parse: func(_ *llm.ChatResponse, items []sluice.Item[string]) ([]string, error) {
			return make([]string, len(items)), nil
		},
		Save: func(_ context.Context, _ sluice.Tx, it sluice.Item[string], output string) error {
			src.mu.Lock()
			defer src.mu.Unlock()
			src.saved[it.Key] = output
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	dash, err := app.Dashboard(sluice.DashboardConfig{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(dash)
	t.Cleanup(srv.Close)
	// Made again in the background once a plan is older than this: the
	// page polled below shows the calls within a few visits.
	sluice.SetPlanEvery(app, time.Millisecond)

	// Before Start: the configuration's flows, nothing recorded of them.
	page := planPage(t, srv)
	for _, want := range []string{"app groq as of", "ask: no call of it was recorded in the last day", "titles: no call of it was recorded in the last day"} {
		if !strings.Contains(html.UnescapeString(page), want) {
			t.Fatalf("the plan before Start lacks %q:\n%s", want, page)
		}
	}
	for _, f := range []string{"ask", "titles"} {
		if planRow(page, "data-flow", f) == nil {
			t.Fatalf("the plan before Start has no row of %s:\n%s", f, page)
		}
	}

	if err := app.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if st := sendWait(t, app, "ask", fmt.Sprint("ok-", i), ask{MaxTokens: 40}); st.Status != run.Completed {
			t.Fatalf("call %d: %s %s", i, st.Status, st.Error)
		}
	}
	if st := sendWait(t, app, "ask-other", "x", ask{MaxTokens: 40}); st.Status != run.Completed {
		t.Fatalf("call on the other key: %s %s", st.Status, st.Error)
	}

	// The governors write their charges every second, and the backfill
	// runs on its own: the page shows both flows' calls once they are in
	// the database, the backfill's backlog cleared.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(time.Minute)
	for {
		page = planPage(t, srv)
		a, ti := planRow(page, "data-flow", "ask"), planRow(page, "data-flow", "titles")
		if len(a) > colBacklog && len(ti) > colBacklog && a[colItemsPerDay] == "2" && ti[colTokensPerDay] != "0" && ti[colBacklog] == "0" {
			break
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("the plan does not show the calls of ask and titles within a minute: ask %q, titles %q\n%s", a, ti, page)
		}
	}
	if strings.Contains(page, "No plan is configured") || strings.Contains(page, "Nothing to plan") {
		t.Fatalf("the page says there is no plan:\n%s", page)
	}
	if a := planRow(page, "data-flow", "ask"); a[colTokensPerDay] == "0" || a[1] != "the governor" {
		t.Errorf("ask %q: want its 2 calls' tokens, paced by the governor", a)
	}
	for _, tc := range []struct{ limit, per, allowance string }{
		{"rpm", "minute", "1,000"}, {"tpm", "minute", "100,000"}, {"tpd", "day", "5,000,000"},
	} {
		r := planRow(page, "data-limit", tc.limit)
		if len(r) < 3 || r[0] != tc.limit || r[1] != tc.per || r[2] != tc.allowance {
			t.Errorf("limit row %s: %q, want %s per %s of %s", tc.limit, r, tc.limit, tc.per, tc.allowance)
		}
	}
	if planRow(page, "data-flow", "ask-other") != nil {
		t.Errorf("the plan of the first key shows the other key's function:\n%s", page)
	}
	if strings.Contains(html.UnescapeString(page), "ask: no call of it was recorded") {
		t.Errorf("the plan still says ask made no call:\n%s", page)
	}

	// A plan made in the background ends with the app: none is being
	// made once Stop returns, and a visit after it starts none. The next
	// one is held until its context ends, which only Stop can do.
	sluice.HoldPlans(app)
	for !sluice.PlanMaking(app) {
		planPage(t, srv)
		select {
		case <-tick.C: // poll interval; the loop above has the deadline
		case <-deadline:
			t.Fatal("no plan is made in the background within a minute")
		}
	}
	if err := app.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if sluice.PlanMaking(app) {
		t.Error("a plan is still being made after Stop returned")
	}
	planPage(t, srv)
	if sluice.PlanMaking(app) {
		t.Error("a visit after Stop started a plan in the background")
	}
}

// TestDashboardPlanNothing: an app with nothing on its first key, or no
// key at all, gets a page saying so, not a 500.
func TestDashboardPlanNothing(t *testing.T) {
	t.Parallel()
	_, groq := simProvider(t, governor.Limits{governor.RPM: 10})
	for _, tc := range []struct {
		name      string
		providers []sluice.Provider
		want      string
	}{
		{"no flow", []sluice.Provider{{Name: "groq", LLM: groq}}, "Nothing to plan yet: key groq has no flows in the configuration and no calls recorded in the last day."},
		{"no provider", nil, "Nothing to plan yet: the app has no LLM provider."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			app := newApp(t, sluice.Config{DatabaseURL: filepath.Join(t.TempDir(), "s.db"), Providers: tc.providers})
			if err := app.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			dash, err := app.Dashboard(sluice.DashboardConfig{})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(dash)
			t.Cleanup(srv.Close)
			if page := planPage(t, srv); !strings.Contains(page, tc.want) {
				t.Errorf("the plan page lacks %q:\n%s", tc.want, page)
			}
		})
	}
}
