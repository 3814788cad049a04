package demo

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-dev/sluice/examples/devpick"
	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/internal/clock"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/num"
	"github.com/sluice-dev/sluice/internal/progress"
)

// demoStallAfter is when a job with articles left and nothing saved is
// called stalled, on either side: sluice's own threshold, the seed's too.
const demoStallAfter = 2 * time.Hour

// demoSnapshot is what the views show: each side's jobs and key, at a
// moment of the simulated clock.
type demoSnapshot struct {
	At time.Time `json:"at"` // the simulated time
	// Elapsed is the simulated seconds since the demo first started on
	// its database, over every run of it; RunElapsed since this run began.
	Elapsed    float64 `json:"elapsed_s"`
	RunElapsed float64 `json:"run_elapsed_s"`
	// Resumed says this run went on from an earlier one's database.
	Resumed bool    `json:"resumed,omitempty"`
	Speed   float64 `json:"speed"`
	// Clock names the simulated clock ("simulated time, ×720"); "" on
	// the wall clock.
	Clock  string         `json:"clock,omitempty"`
	Limits string         `json:"limits"`
	Sides  []demoSideView `json:"sides"`
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

// demoJobView is a job of a side. Done, Remaining, Total, RatePerHour,
// LeftS and ETA are progress.Of's, as sluice's dashboard and `sluice
// status` show them: the job's own articles (those that had their output
// before the demo began are not), the rate per simulated hour over the
// last simulated hour, the time left at that rate.
type demoJobView struct {
	Name        string    `json:"name"`
	Done        int64     `json:"done"`
	Remaining   int64     `json:"remaining"`
	Total       int64     `json:"total"`
	Waiting     int       `json:"waiting,omitempty"` // titles whose summary is not done yet
	RatePerHour float64   `json:"rate_per_hour"`
	LeftS       float64   `json:"left_s,omitempty"` // simulated seconds left at that rate
	ETA         time.Time `json:"eta,omitzero"`
	// Processed is how many articles it saved since this run of the demo
	// began.
	Processed    int       `json:"processed"`
	State        string    `json:"state"`
	Note         string    `json:"note,omitempty"`
	LastProgress time.Time `json:"last_progress_at,omitzero"`

	Fig progress.Figures `json:"-"`
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
	snap := demoSnapshot{At: now.UTC(), Elapsed: now.Sub(d.first).Seconds(), RunElapsed: now.Sub(d.began).Seconds(), Resumed: d.resumed,
		Speed: d.o.speed, Clock: clock.Label(d.o.speed, now, time.Now()), Limits: d.o.limitsText}
	flows, err := d.flows()
	if err != nil {
		return snap, err
	}
	for _, side := range d.sides() {
		p, err := devpick.Progress(ctx, d.db, devpick.Pipeline(side))
		if err != nil {
			return snap, err
		}
		saved, err := jobsDone(ctx, d.db, side)
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
			j := demoJobView{Name: name, Waiting: c.Waiting, Processed: c.Done - d.base[side][name]}
			var f health.Flow
			if side == sideSluice {
				f = flows[name]
				j.State, j.LastProgress = string(f.State), f.LastProgressAt
				switch {
				case f.LastError != "":
					j.Note = "error: " + f.LastError
				case f.WaitingOn != "":
					j.Note = "waiting on " + f.WaitingOn
				}
			} else {
				// The seed's scheduler has no store: its job's figures are
				// read from the articles as sluice's store counts its own.
				f = health.Flow{Name: name, Done: int64(saved[name]), Remaining: int64(c.Remaining), RatePerHour: d.naiveRate(name)}
				j.LastProgress = d.progressed(side, name, c.Done, now)
				j.State, j.Note = d.naiveState(name, c, j.LastProgress, now), naive[name].LastLine
			}
			j.Fig = progress.Of(f, now)
			j.Done, j.Remaining, j.Total, j.RatePerHour, j.ETA = j.Fig.Done, j.Fig.Remaining, j.Fig.Total, j.Fig.RatePerHour, j.Fig.ETA
			j.LeftS = j.Fig.Left.Seconds()
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
	d.record(snap)
	return snap, nil
}

// naiveRate is a job of the seed's scheduler's rate per hour as the health
// monitor measures sluice's: its done count's over the last hour of
// measureNaive's samples, rounded to a tenth.
func (d *demo) naiveRate(job string) float64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s := d.rates[job]; s != nil {
		return math.Round(s.PerHour()*10) / 10
	}
	return 0
}

// sampleNaive records a job of the seed's scheduler's done count at now.
func (d *demo) sampleNaive(job string, now time.Time, done int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.rates[job]
	if s == nil {
		s = health.NewSampler(time.Hour, time.Minute)
		d.rates[job] = s
	}
	s.Add(now, int64(done))
}

// jobsDone counts, by job, the articles a side's job saved: those with its
// output written by a save (*_saves > 0), not those seeded with it — the
// items of the job, as sluice's store counts those it processed.
func jobsDone(ctx context.Context, db *sql.DB, side string) (map[string]int, error) {
	s := ""
	if side == sideNaive {
		s = "_naive"
	}
	var a, b, c int
	err := db.QueryRowContext(ctx, `SELECT
    COALESCE(SUM(CASE WHEN analysis`+s+`_saves > 0 THEN 1 ELSE 0 END), 0),
    COALESCE(SUM(CASE WHEN summary_en`+s+`_saves > 0 THEN 1 ELSE 0 END), 0),
    COALESCE(SUM(CASE WHEN title_en`+s+`_saves > 0 THEN 1 ELSE 0 END), 0)
FROM `+devpick.Table).Scan(&a, &b, &c)
	if err != nil {
		return nil, fmt.Errorf("count the articles each job saved: %w", err)
	}
	return map[string]int{devpick.Analysis: a, devpick.Summary: b, devpick.Title: c}, nil
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
	fmt.Fprintf(w, "DevPick's key (%s) · %s · %.2f days in", s.Limits, clockText(s), s.Elapsed/86400)
	if s.Resumed {
		fmt.Fprintf(w, " (%.2f in this run)", s.RunElapsed/86400)
	}
	fmt.Fprintln(w)
	for _, v := range s.Sides {
		fmt.Fprintf(w, "\n%s\n", v.Label)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, j := range v.Jobs {
			rate, left := "-", "-"
			if j.Fig.RatePerHour > 0 {
				rate = progress.Rate(j.Fig.RatePerHour) + "/h"
			}
			if j.Fig.Left > 0 {
				left = progress.Span(j.Fig.Left) + " left"
			}
			waiting := ""
			if j.Waiting > 0 {
				waiting = fmt.Sprintf(" (+%s waiting for a summary)", num.Group(int64(j.Waiting)))
			}
			fmt.Fprintf(tw, "  %s\t%s%s\t%s\t%s\t%s\t%s\n", j.Name, j.Fig.Bar(), waiting, rate, left, j.State, cli.Clip(j.Note, 70))
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

// clockText is the moment of s on its clock, named: "simulated Dec 2
// 22:03 (simulated time, ×720)", or "Dec 2 22:03 UTC" on the wall clock.
func clockText(s demoSnapshot) string {
	if s.Clock == "" {
		return s.At.Format("Jan 2 15:04") + " UTC"
	}
	return "simulated " + s.At.Format("Jan 2 15:04") + " (" + s.Clock + ")"
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
	fmt.Fprintf(w, "In %.2f simulated days on one key with the seed's limits", s.Elapsed/86400)
	if s.Resumed {
		fmt.Fprintf(w, " (%.2f of them in this run)", s.RunElapsed/86400)
	}
	fmt.Fprintln(w, ":")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "\t")
	for _, v := range s.Sides {
		fmt.Fprintf(tw, "%s\t", v.Label)
	}
	fmt.Fprintln(tw)
	for i, name := range jobNames {
		fmt.Fprintf(tw, "%s done of its articles\t", name)
		for _, v := range s.Sides {
			fmt.Fprintf(tw, "%s\t", v.Jobs[i].Fig.Counts())
		}
		fmt.Fprintln(tw)
	}
	for i, name := range jobNames {
		if !s.Resumed {
			break // the job's articles done are this run's
		}
		fmt.Fprintf(tw, "%s saved in this run\t", name)
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
	fmt.Fprint(w, sluiceRefusals(sl.Refused, s.Speed))
}

// sluiceRefusals is the closing line on sluice's key's refusals. Its
// governor admits a call only when it fits every limit; on a compressed
// clock a call the machine holds up in transit reaches the simulator
// later on the key's clock than it was admitted, by the speed times the
// delay, and may land in a window the governor had already left: that,
// not the governor, is what a refusal there says.
func sluiceRefusals(refused int64, speed float64) string {
	if refused == 0 {
		return "sluice's key refused 0: every call was admitted only when it fit every limit, the key shared by tokens.\n"
	}
	line := fmt.Sprintf("sluice's key refused %s: its governor admits a call only when it fits every limit, so each refusal is a call that reached the key in a later window than it was admitted in", num.Group(refused))
	if speed > 1 {
		line += fmt.Sprintf(" (at ×%s, a twentieth of a second in transit on a busy machine is %s of the key's clock)", strconv.FormatFloat(speed, 'f', -1, 64), cli.Span(time.Duration(speed*float64(time.Second)/20)))
	}
	return line + "; it was retried after the key's retry-after.\n"
}

// page is GET /demo's content, shown in the dashboard's layout: both
// sides' jobs, their progress over time, their keys.
func (d *demo) page(r *http.Request) (template.HTML, error) {
	snap, err := d.snapshot(r.Context())
	if err != nil {
		return "", fmt.Errorf("the demo cannot be read now: %w", err)
	}
	chartSVG, err := d.chart(r.Context(), snap.At)
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	if err := demoPage.Execute(&b, demoPageView{demoSnapshot: snap, Chart: chartSVG}); err != nil {
		return "", fmt.Errorf("render the side-by-side page: %w", err)
	}
	// demoPage is html/template: what it writes is escaped.
	return template.HTML(b.String()), nil
}

// demoPageView is the page's data: the snapshot and the chart.
type demoPageView struct {
	demoSnapshot
	Chart template.HTML // the SVG of package chart, its labels escaped; "" without points
}

// Snapshot is the snapshot itself, for the template's clockText.
func (v demoPageView) Snapshot() demoSnapshot { return v.demoSnapshot }

var demoPage = template.Must(template.New("demo").Funcs(template.FuncMap{
	"group":    func(n int64) string { return num.Group(n) },
	"rate":     progress.Rate,
	"span":     progress.Span,
	"pct":      progress.Percent,
	"bar":      func(r float64) string { return strconv.FormatFloat(math.Round(math.Min(r, 1)*1000)/10, 'f', -1, 64) },
	"days":     func(s float64) string { return fmt.Sprintf("%.2f", s/86400) },
	"ts":       func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04Z") },
	"refusals": refusals,
	"clock":    clockText,
}).Parse(`<p class="lead">DevPick's key ({{.Limits}}) · {{clock .Snapshot}} · {{days .Elapsed}} days in{{if .Resumed}} ({{days .RunElapsed}} in this run, resumed){{end}}.</p>
<div class="sides">
{{range .Sides}}<section class="side" data-side="{{.Side}}" aria-label="{{.Label}}">
<h2>{{.Label}}</h2>
<table class="flows">
<thead><tr><th>Job</th><th>Progress</th><th class="num">Per {{if $.Clock}}simulated {{end}}hour</th><th>Time left</th><th>State</th></tr></thead>
<tbody>{{range .Jobs}}<tr data-job="{{.Name}}">
<td>{{.Name}}</td>
<td><div class="progress" data-done="{{.Done}}" data-remaining="{{.Remaining}}" data-total="{{.Total}}"><svg class="bar level-progress" viewBox="0 0 100 8" preserveAspectRatio="none" role="presentation"><rect class="track" width="100" height="8" rx="2"/><rect class="fill" width="{{bar .Fig.Ratio}}" height="8" rx="2"/></svg><span class="figures"><span class="done">{{group .Done}}</span> / <span class="total">{{group .Total}}</span> <span class="pct">({{pct .Fig.Ratio}})</span>{{if .Waiting}} <span class="quiet">+{{.Waiting}} waiting for a summary</span>{{end}}</span></div></td>
<td class="num">{{if .RatePerHour}}<span class="rate">{{rate .RatePerHour}}</span>{{else}}<span class="none">—</span>{{end}}</td>
<td>{{if .Fig.Left}}<span class="left">in {{span .Fig.Left}}</span> <span class="rel">({{ts .ETA}})</span>{{else}}<span class="none">—</span>{{end}}</td>
<td><span class="badge state-{{.State}}"{{with .Note}} title="{{.}}"{{end}}>{{.State}}</span></td>
</tr>{{end}}</tbody></table>
{{if .Simulated}}<p class="key">Key <code>{{.Side}}</code>: answered {{group .Answered}}, <span{{if .Refused}} class="bad"{{end}}>refused {{group .Refused}}</span>{{if .Refused}} ({{refusals .}}){{end}}, {{group .Tokens}} tokens.</p>{{end}}
</section>
{{end}}</div>
{{if .Chart}}<figure class="chart">{{.Chart}}<figcaption>Articles each job has done, on both sides, over {{if .Clock}}simulated {{end}}time since the demo began.</figcaption></figure>{{end}}
<p class="note">Progress: the job's own articles — those that had their output before the demo began are not counted — done, of done and eligible. Per {{if .Clock}}simulated {{end}}hour: measured over the last {{if .Clock}}simulated {{end}}hour; time left: the eligible articles at that rate. sluice's side reads them as its Flows page and <code>sluice status</code> do; the seed's scheduler's are read from the articles the same way.</p>
`))
