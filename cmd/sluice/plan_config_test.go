package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/testenv"
)

// TestPlanFromRecords: with --db, sluice plan reads the key and flows the
// app last recorded, each flow's call sizes and items per call from the
// last day's charges and samples, and each backfill's backlog from its job;
// with --config, a gateway's key and flows from its config file. On both
// databases.
func TestPlanFromRecords(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		ctx := context.Background()
		st := testenv.OpenStore(t, url)
		now := time.Now()
		cfg := `{"providers":[{"name":"groq","profile":"groq","limits":{"rpm":30,"tpm":8000,"tpd":200000,"otpm":1000},"window":"rolling","accounting":"reserve"}],
			"flows":[{"Name":"summaries","Weight":2,"Priority":0}],"functions":[],
			"backfills":[{"ID":"summaries","MaxBatch":3},{"ID":"titles","After":"summaries","MaxBatch":5}]}`
		if _, err := st.RecordConfig(ctx, store.ConfigVersion{At: now.Add(-time.Hour), Source: "app", Hash: "h1", Code: "c", Config: []byte(cfg)}); err != nil {
			t.Fatal(err)
		}
		// 10 summary calls of 3 items (300 in, 250 out each item), 4 title
		// calls of 5 items (40 in, 40 out each item), in the last hour.
		var charges []store.Charge
		for i := range 10 {
			charges = append(charges, store.Charge{ID: fmt.Sprint("s", i), Flow: "summaries", At: now.Add(-time.Duration(i+1) * time.Minute), Cost: governor.Cost{Requests: 1, Input: 900, Output: 750}})
		}
		for i := range 4 {
			charges = append(charges, store.Charge{ID: fmt.Sprint("t", i), Flow: "titles", At: now.Add(-time.Duration(i+1) * time.Minute), Cost: governor.Cost{Requests: 1, Input: 200, Output: 200}})
		}
		if err := st.UpsertCharges(ctx, "groq", charges); err != nil {
			t.Fatal(err)
		}
		if err := st.RecordSamples(ctx, []store.Sample{
			{At: now.Add(-time.Minute), Flow: "summaries", Source: "app", Done: 30, Admitted: 10},
			{At: now.Add(-time.Minute), Flow: "titles", Source: "app", Done: 20, Admitted: 4},
		}); err != nil {
			t.Fatal(err)
		}
		keys := make([]string, 600)
		for i := range keys {
			keys[i] = fmt.Sprintf("a%04d", i)
		}
		if _, err := st.AddItems(ctx, "summaries", keys, now, ""); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := runCLI("plan", "--db", url, "--print-scenario")
		for _, want := range []string{"name: summaries", "weight: 2", "backlog: 600", "batch_max: 3", "item_input_tokens: 300", "item_output_tokens: 250", "after: summaries", "tpd: 200000"} {
			if code != 0 || !strings.Contains(out, want) {
				t.Errorf("exit %d (%s), derived scenario without %q:\n%s", code, errOut, want, out)
			}
		}
		code, out, errOut = runCLI("plan", "--db", url, "--json")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		var p struct {
			Limits map[string]struct{ Backlog float64 } `json:"limits"`
			Flows  map[string]struct {
				Backlog  int      `json:"backlog"`
				EtaHours *float64 `json:"eta_hours"`
			} `json:"flows"`
		}
		if err := json.Unmarshal([]byte(out), &p); err != nil {
			t.Fatal(err)
		}
		// 600 summaries at 550 tokens, and as many titles after them at 80 (the
		// records cannot tell instructions from items: all is per item).
		if got, want := p.Limits["tpd"].Backlog, 600*550.0+600*80; got != want {
			t.Errorf("tpd backlog %v, want %v", got, want)
		}
		if s := p.Flows["summaries"]; s.Backlog != 600 || s.EtaHours == nil {
			t.Errorf("summaries %+v", s)
		}

		// A second key plans only what names it: the backfills above call
		// the first provider.
		cfg2 := `{"providers":[{"name":"groq","limits":{"tpm":8000}},{"name":"openai","limits":{"tpm":30000}}],"flows":[],
			"functions":[{"ID":"classify","Provider":"openai"},{"ID":"welcome"}],
			"backfills":[{"ID":"summaries","MaxBatch":3},{"ID":"essays","Provider":"openai"}]}`
		if _, err := st.RecordConfig(ctx, store.ConfigVersion{At: now.Add(-time.Minute), Source: "app", Hash: "h2", Code: "c", Config: []byte(cfg2)}); err != nil {
			t.Fatal(err)
		}
		code, out, errOut = runCLI("plan", "--db", url, "--key", "openai", "--print-scenario")
		if code != 0 || !strings.Contains(out, "name: essays") || !strings.Contains(out, "name: classify") || !strings.Contains(out, "tpm: 30000") ||
			strings.Contains(out, "name: summaries") || strings.Contains(out, "name: welcome") {
			t.Errorf("exit %d (%s), the openai key's scenario: want essays and classify only:\n%s", code, errOut, out)
		}

		// A gateway's config file names its key, flows and database.
		file := filepath.Join(t.TempDir(), "gateway.yaml")
		err := os.WriteFile(file, []byte("upstream: https://api.groq.com/openai/v1\nprofile: groq\nkey_name: groq\nlimits: rpm=30,tpm=8000\ndb: "+url+"\nflows:\n  - {name: titles, weight: \"3\"}\n"), 0o600)
		if err != nil {
			t.Fatal(err)
		}
		code, out, errOut = runCLI("plan", "--config", file, "--print-scenario")
		for _, want := range []string{"name: titles", "weight: 3", "name: summaries", "tpm: 8000"} {
			if code != 0 || !strings.Contains(out, want) {
				t.Errorf("exit %d (%s), gateway scenario without %q:\n%s", code, errOut, want, out)
			}
		}
	})
}

func TestPlanFromRecordsRefuses(t *testing.T) {
	t.Parallel()
	empty := filepath.Join(t.TempDir(), "empty.db")
	testenv.OpenStore(t, empty)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--db", filepath.Join(t.TempDir(), "none.db")}, "give the database the app or gateway records in"},
		{[]string{"--db", empty}, "the database holds no app configuration"},
		{[]string{"--scenario", "x.yaml", "--db", empty}, "give --scenario, or --config and/or --db, not both"},
		{nil, "--scenario, or --config and/or --db, is required"},
	} {
		code, _, errOut := runCLI(append([]string{"plan"}, tc.args...)...)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", tc.args, code, errOut, tc.want)
		}
	}
}

// With a serve config of jobs, sluice plan --config plans each job from its
// source: its flow, its backlog as its query lists it, the items its
// upstream job will feed it, and request sizes from its prompt on the rows;
// the provider section is the file's key. A broken job is refused as serve
// refuses it.
func TestPlanConfigOfJobs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	team := filepath.Join(dir, "team.db")
	db, err := sql.Open("sqlite", team)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE docs (id TEXT PRIMARY KEY, body TEXT NOT NULL, summary TEXT, title TEXT)`); err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		summary := any(nil)
		if i < 10 {
			summary = "done before"
		}
		if _, err := db.Exec(`INSERT INTO docs (id, body, summary) VALUES ($1, $2, $3)`, fmt.Sprintf("d%02d", i), strings.Repeat("words of a long body ", 20), summary); err != nil {
			t.Fatal(err)
		}
	}
	cfg := filepath.Join(dir, "sluice.yaml")
	write := func(text string) {
		if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const jobsText = `limits: rpm=30,tpm=6000,tpd=500000
price: input=0.05,output=0.08
source_db: sqlite:%s
jobs:
  - name: summary
    source: {query: "SELECT id, body FROM docs WHERE summary IS NULL"}
    prompt: {system: "Summarise each text.", item: "{{.body}}", batch_max: 4}
    max_tokens: 100
    flow: {weight: 3}
    within: 90s
    output: {sql: "UPDATE docs SET summary = :output WHERE id = :key"}
  - name: title
    after: summary
    source: {query: "SELECT id, body FROM docs WHERE title IS NULL"}
    prompt: {item: "{{.body}}"}
    max_tokens: 20
    flow: {priority: 1}
    stall_after: 20m
    output: {sql: "UPDATE docs SET title = :output WHERE id = :key"}
`
	write(fmt.Sprintf(jobsText, team))
	code, out, errOut := runCLI("plan", "--config", cfg, "--db", filepath.Join(dir, "sluice.db"), "--json")
	if code != 0 {
		t.Fatalf("plan: %d %s", code, errOut)
	}
	var p struct {
		Scenario string
		Flows    map[string]struct {
			Backlog, Fed int
		}
		Limits   map[string]struct{ Limit int64 }
		Warnings []string
	}
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if s, ti := p.Flows["summary"], p.Flows["title"]; s.Backlog != 20 || ti.Backlog != 10 || ti.Fed != 20 {
		t.Errorf("flows %+v: want summary's backlog 20, title's 10 now (summaries done) and 20 fed by summary", p.Flows)
	}
	if p.Limits["tpm"].Limit != 6000 || p.Limits["rpm"].Limit != 30 {
		t.Errorf("limits %+v, want the file's", p.Limits)
	}
	code, out, _ = runCLI("plan", "--config", cfg, "--db", filepath.Join(dir, "sluice.db"), "--print-scenario")
	if code != 0 || !strings.Contains(out, "weight: 3") || !strings.Contains(out, "batch_max: 4") || !strings.Contains(out, "item_max_tokens: 100") ||
		!strings.Contains(out, "after: summary") || !regexp.MustCompile(`item_input_tokens: [1-9]\d`).MatchString(out) ||
		// The batches' time as the jobs' backfills size them: the
		// summary's own, and a quarter of the title's stall_after.
		!strings.Contains(out, "within: 1m30s") || !strings.Contains(out, "within: 5m0s") {
		t.Errorf("scenario (%d):\n%s", code, out)
	}
	write(strings.Replace(fmt.Sprintf(jobsText, team), "{{.body}}", "{{.bodyy}}", 1))
	code, _, errOut = runCLI("plan", "--config", cfg, "--db", filepath.Join(dir, "sluice.db"))
	if code == 0 || !strings.Contains(errOut, cfg+": jobs[0].prompt.item: {{.bodyy}}: the query gives no column bodyy") || !strings.Contains(errOut, "(line 7)") {
		t.Errorf("a broken job: %d %s", code, errOut)
	}
}
