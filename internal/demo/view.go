package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-dev/sluice/examples/devpick"
	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/num"
)

// demoStallAfter is when a job with articles left and nothing saved is
// called stalled, on either side: sluice's own threshold, the seed's too.
const demoStallAfter = 2 * time.Hour

// demoSnapshot is what the views show: each side's jobs and key, at a
// moment of the simulated clock.
type demoSnapshot struct {
	At      time.Time      `json:"at"`        // the simulated time
	Elapsed float64        `json:"elapsed_s"` // simulated seconds since this run of the demo began
	Speed   float64        `json:"speed"`
	Limits  string         `json:"limits"`
	Sides   []demoSideView `json:"sides"`
}

type demoSideView struct {
	Side  string        `json:"side"` // naive or sluice: the key's name in /sim/stats
	Label string        `json:"label"`
	Jobs  []demoJobView `json:"jobs"`
	// What the side's provider key counted (the simulator's figures; none
	// against a real provider).
	Simulated bool             `json:"simulated"`
	Answered  int64            `json:"answered"`
	Refused   int64            `json:"refused"`   // 429s and 413s
	TooLarge  int64            `json:"too_large"` // of Refused, requests that can never fit
	ByLimit   map[string]int64 `json:"refused_by_limit,omitempty"`
	Tokens    int64            `json:"tokens"` // input and output tokens the provider charged
	// SavedTwice counts articles with an output of this side written more
	// than once (it must stay 0).
	SavedTwice int `json:"saved_twice"`
}

type demoJobView struct {
	Name      string `json:"name"`
	Done      int    `json:"done"`
	Remaining int    `json:"remaining"`
	Waiting   int    `json:"waiting,omitempty"` // titles whose summary is not done yet
	// Processed is how many were done since this run of the demo began;
	// RatePerHour that per simulated hour.
	Processed    int       `json:"processed"`
	RatePerHour  float64   `json:"rate_per_hour"`
	State        string    `json:"state"`
	Note         string    `json:"note,omitempty"`
	LastProgress time.Time `json:"last_progress_at,omitzero"`
}

// counts reads each side's progress from the articles table.
func (d *demo) counts(ctx context.Context) (map[string]map[string]int, error) {
	out := map[string]map[string]int{}
	for _, side := range d.sides() {
		p, err := devpick.Progress(ctx, d.db, devpick.Pipeline(side))
		if err != nil {
			return nil, err
		}
		out[side] = map[string]int{}
		for name, c := range p {
			out[side][name] = c.Done
		}
	}
	return out, nil
}

// snapshot reads both sides now.
func (d *demo) snapshot(ctx context.Context) (demoSnapshot, error) {
	now := d.clk.Now()
	snap := demoSnapshot{At: now.UTC(), Elapsed: now.Sub(d.began).Seconds(), Speed: d.o.speed, Limits: d.o.limitsText}
	flows, err := d.flows()
	if err != nil {
		return snap, err
	}
	for _, side := range d.sides() {
		p, err := devpick.Progress(ctx, d.db, devpick.Pipeline(side))
		if err != nil {
			return snap, err
		}
		v := demoSideView{Side: side, Label: sideLabel(side)}
		var naive map[string]devpick.NaiveStats
		if side == sideNaive {
			naive = d.naive.Stats()
		}
		for _, name := range jobNames {
			c := p[name]
			j := demoJobView{Name: name, Done: c.Done, Remaining: c.Remaining, Waiting: c.Waiting}
			j.Processed = c.Done - d.base[side][name]
			if h := now.Sub(d.began).Hours(); h > 0 {
				j.RatePerHour = float64(j.Processed) / h
			}
			j.LastProgress = d.progressed(side, name, c.Done, now)
			if side == sideSluice {
				f := flows[name]
				j.State = string(f.State)
				switch {
				case f.LastError != "":
					j.Note = "error: " + f.LastError
				case f.WaitingOn != "":
					j.Note = "waiting on " + f.WaitingOn
				}
			} else {
				j.State, j.Note = d.naiveState(name, c, j.LastProgress, now), naive[name].LastLine
			}
			v.Jobs = append(v.Jobs, j)
		}
		if m := d.models[side]; m != nil {
			st := m.Stats()
			v.Simulated = true
			v.Answered, v.Refused, v.TooLarge = st.Succeeded, st.RejectedByStatus[429]+st.RejectedByStatus[413], st.TooLarge
			v.Tokens = st.Charged.Input + st.Charged.Output
			for l, n := range st.RejectedByLimit {
				if n > 0 {
					if v.ByLimit == nil {
						v.ByLimit = map[string]int64{}
					}
					v.ByLimit[governor.Limit(l).String()] = n
				}
			}
		}
		if v.SavedTwice, err = savedTwice(ctx, d, side); err != nil {
			return snap, err
		}
		snap.Sides = append(snap.Sides, v)
	}
	return snap, nil
}

// progressed returns when a side's job last saved something, as the demo
// saw its done count grow (the demo's start if it has not since).
func (d *demo) progressed(side, job string, done int, now time.Time) time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.last[side] == nil {
		d.last[side], d.seen[side] = map[string]time.Time{}, map[string]int{}
	}
	if prev, ok := d.seen[side][job]; !ok || done > prev {
		if ok {
			d.last[side][job] = now
		}
		d.seen[side][job] = done
	}
	if t := d.last[side][job]; !t.IsZero() {
		return t
	}
	return time.Time{}
}

// naiveState judges a job of the seed's scheduler as sluice judges its
// own: stalled when articles are left and nothing was saved for
// demoStallAfter (since its last save, or since the demo began).
func (d *demo) naiveState(job string, c devpick.Counts, last, now time.Time) string {
	switch {
	case c.Remaining == 0 && c.Waiting == 0:
		return string(health.Done)
	case c.Remaining == 0:
		return string(health.Idle)
	}
	since := last
	if since.IsZero() {
		since = d.began
	}
	if now.Sub(since) >= demoStallAfter {
		return string(health.Stalled)
	}
	if d.naive.RateLimitedUntil().After(now) {
		return "backing-off"
	}
	return string(health.Progressing)
}

// flows reads sluice's GET /v1/flows, in process.
func (d *demo) flows() (map[string]health.Flow, error) {
	rec := httptest.NewRecorder()
	d.api.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/flows", nil))
	if rec.Code != http.StatusOK {
		return nil, fmt.Errorf("GET /v1/flows: HTTP %d", rec.Code)
	}
	var v struct{ Flows []health.Flow }
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		return nil, fmt.Errorf("GET /v1/flows: %w", err)
	}
	out := map[string]health.Flow{}
	for _, f := range v.Flows {
		out[f.Name] = f
	}
	return out, nil
}

// savedTwice counts the articles with an output of side's written more
// than once.
func savedTwice(ctx context.Context, d *demo, side string) (int, error) {
	s := ""
	if side == sideNaive {
		s = "_naive"
	}
	var n int
	err := d.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+devpick.Table+` WHERE analysis`+s+`_saves > 1 OR summary_en`+s+`_saves > 1 OR title_en`+s+`_saves > 1`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count the articles saved twice: %w", err)
	}
	return n, nil
}

// renderDemo prints the live view: each side's jobs and key.
func renderDemo(w io.Writer, s demoSnapshot) {
	days := s.Elapsed / 86400
	fmt.Fprintf(w, "DevPick's key (%s) · simulated %s · %.2f days in", s.Limits, s.At.Format("Jan 2 15:04"), days)
	if s.Speed > 1 {
		fmt.Fprintf(w, " (×%g)", s.Speed)
	}
	fmt.Fprintln(w)
	for _, v := range s.Sides {
		fmt.Fprintf(w, "\n%s\n", v.Label)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, j := range v.Jobs {
			rate := "-"
			if j.Processed > 0 {
				rate = fmt.Sprintf("%.1f/h", j.RatePerHour)
			}
			left := ""
			if j.Waiting > 0 {
				left = fmt.Sprintf(" (+%s waiting for a summary)", num.Group(int64(j.Waiting)))
			}
			fmt.Fprintf(tw, "  %s\t%s%s\t%s\t%s\t%s\n", j.Name, cli.Bar(int64(j.Done), int64(j.Remaining)), left, rate, j.State, cli.Clip(j.Note, 70))
		}
		_ = tw.Flush()
		if v.Simulated {
			fmt.Fprintf(w, "  key %q: answered %s, refused %s", v.Side, num.Group(v.Answered), num.Group(v.Refused))
			if v.Refused > 0 {
				fmt.Fprintf(w, " (%s)", refusals(v))
			}
			fmt.Fprintf(w, ", %s tokens\n", num.Group(v.Tokens))
		}
	}
}

// refusals says what the provider refused: "too large 12; by limit: otpm 12".
func refusals(v demoSideView) string {
	var parts []string
	if v.TooLarge > 0 {
		parts = append(parts, fmt.Sprintf("%s too large, never to fit", num.Group(v.TooLarge)))
	}
	var lim []string
	for _, l := range slices.Sorted(maps.Keys(v.ByLimit)) {
		lim = append(lim, fmt.Sprintf("%s %s", l, num.Group(v.ByLimit[l])))
	}
	if len(lim) > 0 {
		parts = append(parts, "by limit: "+strings.Join(lim, ", "))
	}
	return strings.Join(parts, "; ")
}

// renderDemoSummary prints the closing comparison in numbers.
func renderDemoSummary(w io.Writer, s demoSnapshot) {
	fmt.Fprintf(w, "In %.2f simulated days on one key with the seed's limits:\n", s.Elapsed/86400)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "\t")
	for _, v := range s.Sides {
		fmt.Fprintf(tw, "%s\t", v.Label)
	}
	fmt.Fprintln(tw)
	for i, name := range jobNames {
		fmt.Fprintf(tw, "%s done in this run\t", name)
		for _, v := range s.Sides {
			fmt.Fprintf(tw, "%s\t", num.Group(int64(v.Jobs[i].Processed)))
		}
		fmt.Fprintln(tw)
	}
	if s.Sides[0].Simulated {
		for _, row := range []struct {
			label string
			f     func(demoSideView) int64
		}{
			{"provider answered", func(v demoSideView) int64 { return v.Answered }},
			{"provider refused (429/413)", func(v demoSideView) int64 { return v.Refused }},
			{"of them too large to ever fit", func(v demoSideView) int64 { return v.TooLarge }},
			{"tokens charged", func(v demoSideView) int64 { return v.Tokens }},
		} {
			fmt.Fprintf(tw, "%s\t", row.label)
			for _, v := range s.Sides {
				fmt.Fprintf(tw, "%s\t", num.Group(row.f(v)))
			}
			fmt.Fprintln(tw)
		}
	}
	fmt.Fprint(tw, "articles saved twice\t")
	for _, v := range s.Sides {
		fmt.Fprintf(tw, "%d\t", v.SavedTwice)
	}
	fmt.Fprintln(tw)
	_ = tw.Flush()
	if len(s.Sides) < 2 {
		return
	}
	naive, sl := s.Sides[0], s.Sides[1]
	fmt.Fprintln(w)
	var starved []string
	for i, j := range naive.Jobs {
		if j.State == string(health.Stalled) && sl.Jobs[i].State != string(health.Stalled) {
			starved = append(starved, j.Name)
		}
	}
	if len(starved) > 0 {
		fmt.Fprintf(w, "The seed's scheduler left %s stalled: nothing saved in the last %s with articles left.\n", strings.Join(starved, " and "), cli.Span(demoStallAfter))
	}
	if naive.Refused > 0 {
		fmt.Fprintf(w, "Its key refused %s requests; each 429 set the one rate_limited_until every job backs off on.\n", num.Group(naive.Refused))
	}
	if naive.TooLarge > 0 {
		fmt.Fprintf(w, "%s were too large ever to fit (no max_tokens: Groq expects 2,048 output tokens, OTPM allows 1,000), and were sent again.\n", num.Group(naive.TooLarge))
	}
	fmt.Fprintf(w, "sluice's key refused %s: every call was admitted only when it fit every limit, the key shared by tokens.\n", num.Group(sl.Refused))
}

// page is GET /demo: both sides, refreshed every two seconds.
func (d *demo) page(w http.ResponseWriter, r *http.Request) {
	snap, err := d.snapshot(r.Context())
	if err != nil {
		http.Error(w, "the demo cannot be read now: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	// A failed write is the client gone: there is no one to tell.
	_ = demoPage.Execute(w, snap)
}

var demoPage = template.Must(template.New("demo").Funcs(template.FuncMap{
	"group": func(n any) string {
		switch v := n.(type) {
		case int:
			return num.Group(int64(v))
		case int64:
			return num.Group(v)
		}
		return fmt.Sprint(n)
	},
	"pct": func(done, remaining int) int {
		if done+remaining == 0 {
			return 0
		}
		return done * 100 / (done + remaining)
	},
	"days":     func(s float64) string { return fmt.Sprintf("%.2f", s/86400) },
	"refusals": refusals,
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="2">
<title>sluice demo: side by side</title>
<style>
body{font:15px/1.4 system-ui,sans-serif;margin:1.5rem;color:#1b1f24}
.sides{display:flex;gap:2rem;flex-wrap:wrap}.side{flex:1;min-width:22rem}
table{border-collapse:collapse;width:100%}td,th{padding:.3rem .5rem;text-align:left;border-bottom:1px solid #ddd}
meter{width:8rem}.stalled{color:#b00020;font-weight:600}.progressing,.done{color:#1a7f37}
.key{margin-top:.6rem}.bad{color:#b00020}
</style></head><body>
<p><a href="/">Dashboard</a></p>
<h1>DevPick's key, side by side</h1>
<p>Limits {{.Limits}} · simulated {{.At.Format "Jan 2 15:04"}} · {{days .Elapsed}} days in{{if gt .Speed 1.0}} (×{{.Speed}}){{end}}</p>
<div class="sides">
{{range .Sides}}<section class="side" aria-label="{{.Label}}">
<h2>{{.Label}}</h2>
<table><thead><tr><th>job</th><th>progress</th><th>done</th><th>left</th><th>per hour</th><th>state</th></tr></thead><tbody>
{{range .Jobs}}<tr><td>{{.Name}}</td><td><meter min="0" max="100" value="{{pct .Done .Remaining}}">{{pct .Done .Remaining}}%</meter></td>
<td>{{group .Done}}</td><td>{{group .Remaining}}</td><td>{{printf "%.1f" .RatePerHour}}</td><td class="{{.State}}" title="{{.Note}}">{{.State}}</td></tr>
{{end}}</tbody></table>
{{if .Simulated}}<p class="key">Key <code>{{.Side}}</code>: answered {{group .Answered}}, <span{{if .Refused}} class="bad"{{end}}>refused {{group .Refused}}</span>{{if .Refused}} ({{refusals .}}){{end}}, {{group .Tokens}} tokens.</p>{{end}}
</section>
{{end}}</div>
</body></html>
`))
