package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/sim"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/llm"
	"github.com/sluice-dev/sluice/run"
)

// simLimits are the simulated key's limits: high, so that the tests are
// about the jobs, not the quota.
var simLimits = governor.Limits{governor.TPM: 10_000_000, governor.RPM: 100_000}

// simProvider starts the provider simulator, stopped when the test ends.
func simProvider(t *testing.T) llm.Config {
	t.Helper()
	model, err := forecast.NewModel(forecast.ModelConfig{Profile: "groq", Limits: simLimits, Wire: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := sim.NewServer(model, sim.ServerConfig{})
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	return llm.Config{BaseURL: "http://" + srv.Addr() + "/v1", Profile: llm.Groq}
}

// startJobs builds an app on appDB against the simulator, registers the
// jobs of the file text, and starts it; all is stopped when the test ends.
func startJobs(t *testing.T, appDB, text string, o Options) (*Config, *sluice.App) {
	t.Helper()
	c := mustLoad(t, text)
	app, err := sluice.New(context.Background(), sluice.Config{
		DatabaseURL:  appDB,
		PollInterval: 20 * time.Millisecond,
		RetryBase:    time.Millisecond, RetryMax: 20 * time.Millisecond,
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		Providers: []sluice.Provider{{Name: "groq", LLM: simProvider(t), Limits: simLimits}},
		Flows:     c.Flows(),
	})
	if err != nil {
		t.Fatal(err)
	}
	o.AppDB, o.Model, o.Provider = appDB, "sim-model", "groq"
	closeDBs, err := Register(context.Background(), app, c, o)
	if err != nil {
		t.Fatalf("Register: %v", err)
	}
	t.Cleanup(func() {
		if err := app.Stop(context.Background()); err != nil {
			t.Errorf("stop: %v", err)
		}
		if err := closeDBs(); err != nil {
			t.Errorf("close the jobs' databases: %v", err)
		}
	})
	if err := app.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c, app
}

// itemsDB makes the team's SQLite database at path with n items, keyed
// i001, i002 …, and returns their keys.
func itemsDB(t *testing.T, url string, n int) []string {
	t.Helper()
	stmts := []string{"CREATE TABLE items (id TEXT PRIMARY KEY, title TEXT NOT NULL, summary TEXT)"}
	var keys []string
	for i := 1; i <= n; i++ {
		k := fmt.Sprintf("i%03d", i)
		keys = append(keys, k)
		stmts = append(stmts, fmt.Sprintf("INSERT INTO items (id, title) VALUES ('%s', 'Article number %d about rivers')", k, i))
	}
	execDB(t, url, stmts...)
	return keys
}

// flaky is an HTTP output endpoint that answers 503 to every 5th request
// (20 %) and records every request.
type flaky struct {
	mu       sync.Mutex
	requests int
	failed   int
	idem     map[string][]string         // item key → Idempotency-Key of each request
	ok       map[string]int              // item key → deliveries answered 200
	bodies   map[string][]map[string]any // item key → bodies
	problems []string
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests++
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		f.problems = append(f.problems, fmt.Sprintf("request %d: %v", f.requests, err))
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" || r.Header.Get("Authorization") != "Bearer hook-secret" {
		f.problems = append(f.problems, fmt.Sprintf("request %d: %s, Content-Type %q, Authorization %q", f.requests, r.Method, r.Header.Get("Content-Type"), r.Header.Get("Authorization")))
	}
	key, _ := body["key"].(string)
	f.idem[key] = append(f.idem[key], r.Header.Get("Idempotency-Key"))
	f.bodies[key] = append(f.bodies[key], body)
	if f.requests%5 == 0 {
		f.failed++
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	f.ok[key]++
}

// A backfill whose output is an HTTP endpoint failing a fifth of its
// requests delivers every item, each try of an item with the same
// Idempotency-Key, its body the item's output and its accounts.
func TestJobsHTTPOutputEndToEnd(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	team := "sqlite:" + filepath.Join(dir, "team.db")
	keys := itemsDB(t, team, 30)
	hook := &flaky{idem: map[string][]string{}, ok: map[string]int{}, bodies: map[string][]map[string]any{}}
	srv := httptest.NewServer(hook)
	t.Cleanup(srv.Close)
	startJobs(t, filepath.Join(dir, "sluice.db"), fmt.Sprintf(`source_db: %s
jobs:
  - name: notify
    source:
      query: SELECT id, title FROM items
    prompt:
      item: "{{.title}}"
      batch_max: 10
      fallback: words
    max_tokens: 20
    poll: 1s
    output:
      url: %s
      auth_env: HOOK_TOKEN
`, quoted(team), quoted(srv.URL+"/deliveries")), Options{Getenv: func(k string) string {
		if k == "HOOK_TOKEN" {
			return "hook-secret"
		}
		return ""
	}})

	testenv.WaitUntil(t, 20*time.Millisecond, func() (bool, string) {
		hook.mu.Lock()
		defer hook.mu.Unlock()
		return len(hook.ok) == len(keys), fmt.Sprintf("%d of %d items delivered, %d requests", len(hook.ok), len(keys), hook.requests)
	})
	hook.mu.Lock()
	defer hook.mu.Unlock()
	if len(hook.problems) > 0 {
		t.Errorf("requests the endpoint did not expect: %q", hook.problems)
	}
	if hook.failed == 0 {
		t.Errorf("%d requests and none failed: the test proves nothing of retries", hook.requests)
	}
	retried := 0
	for _, k := range keys {
		if hook.ok[k] < 1 {
			t.Errorf("item %s not delivered", k)
		}
		if len(hook.idem[k]) > 1 {
			retried++
		}
		want := IdempotencyKey("notify", k)
		for i, got := range hook.idem[k] {
			if got != want {
				t.Errorf("item %s, request %d: Idempotency-Key %q, want %q", k, i+1, got, want)
			}
		}
		for _, b := range hook.bodies[k] {
			fields := slices.Sorted(func(yield func(string) bool) {
				for f := range b {
					if !yield(f) {
						return
					}
				}
			})
			if strings.Join(fields, ",") != "job,key,model,output,processed_at,tokens" {
				t.Errorf("item %s: body %v, want job, key, output, model, tokens and processed_at", k, b)
			}
			out, _ := b["output"].(string)
			tokens, _ := b["tokens"].(float64)
			at, _ := b["processed_at"].(string)
			ts, err := time.Parse(time.RFC3339Nano, at)
			if b["job"] != "notify" || b["model"] != "sim-model" || strings.TrimSpace(out) == "" || out != strings.TrimSpace(out) ||
				tokens < 1 || float64(llm.CountTokens("sim-model", out)) != tokens || err != nil || time.Since(ts) > time.Hour || time.Until(ts) > time.Minute {
				t.Errorf("item %s: body %v", k, b)
			}
		}
		// The tries of one item carry one output: each try posts what
		// the batch's answer gave it.
		for _, b := range hook.bodies[k][1:] {
			if b["output"] != hook.bodies[k][0]["output"] {
				t.Errorf("item %s: outputs %v and %v on two tries", k, hook.bodies[k][0]["output"], b["output"])
			}
		}
	}
	if retried == 0 {
		t.Errorf("no item was posted more than once, though %d requests failed", hook.failed)
	}
	if hasTable(t, team, SavesTable) {
		t.Errorf("an HTTP output made %s in the source's database", SavesTable)
	}
}

// A backfill whose output statement runs on a database of the team's other
// than sluice's saves each item once, recording it in sluice_job_saves in
// the same transaction.
func TestJobsSQLOutputOnTheTeamsDatabase(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		dir := t.TempDir()
		team, out := "sqlite:"+filepath.Join(dir, "team.db"), "sqlite:"+filepath.Join(dir, "out.db")
		if strings.HasPrefix(url, "postgres://") {
			team, out = url, testenv.Postgres(t)
		}
		keys := itemsDB(t, team, 30)
		execDB(t, out, `CREATE TABLE results (
		item_key TEXT NOT NULL UNIQUE, output TEXT NOT NULL, model TEXT NOT NULL, tokens INTEGER NOT NULL,
		processed_at TEXT NOT NULL, processed_at_ms BIGINT NOT NULL, job TEXT NOT NULL)`)
		began := time.Now()
		startJobs(t, filepath.Join(dir, "sluice.db"), fmt.Sprintf(`source_db: %s
jobs:
  - name: store
    source:
      query: SELECT id, title FROM items
    prompt:
      item: "{{.title}}"
      batch_max: 10
      fallback: words
    max_tokens: 20
    poll: 1s
    output:
      db: %s
      sql: >-
        INSERT INTO results (item_key, output, model, tokens, processed_at, processed_at_ms, job)
        VALUES (:key, :output, :model, :tokens, :processed_at, :processed_at_ms, :job)
`, quoted(team), quoted(out)), Options{})

		testenv.WaitUntil(t, 20*time.Millisecond, func() (bool, string) {
			n := count(t, out, "SELECT count(*) FROM results")
			return n == len(keys), fmt.Sprintf("%d of %d items saved", n, len(keys))
		})
		db := openDB(t, out)
		rows, err := db.Query("SELECT item_key, output, model, tokens, processed_at, processed_at_ms, job FROM results ORDER BY item_key")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for rows.Next() {
			var key, output, model, at, job string
			var tokens int
			var ms int64
			if err := rows.Scan(&key, &output, &model, &tokens, &at, &ms, &job); err != nil {
				t.Fatal(err)
			}
			got = append(got, key)
			ts, err := time.Parse(time.RFC3339Nano, at)
			if output == "" || model != "sim-model" || tokens != llm.CountTokens(model, output) || job != "store" || err != nil ||
				ts.UnixMilli() != ms || ts.Before(began.Truncate(time.Millisecond)) || time.Until(ts) > time.Minute {
				t.Errorf("item %s saved as %q, %q, %d tokens, at %q (%d ms), job %q", key, output, model, tokens, at, ms, job)
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, keys) {
			t.Errorf("saved %v, want each of %v once", got, keys)
		}
		// Each item once in sluice_job_saves, under its job.
		if n := count(t, out, "SELECT count(DISTINCT item_key) FROM "+SavesTable+" WHERE job = 'store'"); n != len(keys) {
			t.Errorf("%d items in %s, want %d", n, SavesTable, len(keys))
		}
		if n := count(t, out, "SELECT count(*) FROM "+SavesTable+" s JOIN results r ON r.item_key = s.item_key"); n != len(keys) {
			t.Errorf("%d of %s's rows match a saved result, want %d", n, SavesTable, len(keys))
		}
		if hasTable(t, team, SavesTable) {
			t.Errorf("%s made in the source's database, which outputs nothing", SavesTable)
		}
	})
}

// A backfill whose source and output are in sluice's own database saves in
// sluice's own transactions: every item's output is written, and no
// sluice_job_saves table is made there.
func TestJobsSQLOutputOnTheAppsDatabase(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		const n = 12
		articlesTable(t, url, n)
		startJobs(t, url, fmt.Sprintf(`source_db: %s
jobs:
  - name: summarise
    source:
      query: SELECT id, title FROM articles WHERE summary IS NULL
    prompt:
      item: "{{.title}}"
      batch_max: 10
      fallback: words
    max_tokens: 20
    poll: 1s
    output:
      sql: >-
        UPDATE articles SET summary = :output, summary_tokens = :tokens,
        summary_at = :processed_at_ms WHERE id = :key
`, quoted(url)), Options{})
		testenv.WaitUntil(t, 20*time.Millisecond, func() (bool, string) {
			done := count(t, url, "SELECT count(*) FROM articles WHERE summary IS NOT NULL")
			return done == n, fmt.Sprintf("%d of %d articles summarised", done, n)
		})
		if bad := count(t, url, "SELECT count(*) FROM articles WHERE summary = '' OR summary_tokens < 1 OR summary_at < 1"); bad != 0 {
			t.Errorf("%d articles saved without an output, its tokens or its time", bad)
		}
		if hasTable(t, url, SavesTable) {
			t.Errorf("%s made in sluice's own database, where the outputs are saved in sluice's transactions", SavesTable)
		}
	})
}

// articlesTable makes the table articles on url with n articles, ids 1 to
// n, none summarised.
func articlesTable(t *testing.T, url string, n int) {
	t.Helper()
	execDB(t, url,
		"CREATE TABLE articles (id INTEGER PRIMARY KEY, title TEXT NOT NULL, summary TEXT, summary_tokens INTEGER, summary_at BIGINT)")
	for i := 1; i <= n; i++ {
		execDB(t, url, fmt.Sprintf("INSERT INTO articles (id, title) VALUES (%d, 'Article %d on bridges')", i, i))
	}
}

// A row the job recorded and that has since been deleted is rejected as
// no longer in the source and parked after max_rejects: the job ends with
// nothing pending, instead of passing over it in every run.
func TestJobsParkAnItemWhoseRowIsGone(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		const n = 5
		articlesTable(t, url, n)
		// Article 99 was listed by an earlier run, and deleted since.
		st, err := store.Open(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.AddItems(context.Background(), "summarise", []string{"99"}, time.Now(), ""); err != nil {
			t.Fatal(err)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		startJobs(t, url, fmt.Sprintf(`source_db: %s
jobs:
  - name: summarise
    source:
      query: SELECT id, title FROM articles WHERE summary IS NULL
    prompt:
      item: "{{.title}}"
      batch_max: 10
      fallback: words
    max_tokens: 20
    poll: 1s
    retry_after: 10ms
    max_rejects: 2
    output:
      sql: UPDATE articles SET summary = :output WHERE id = :key
`, quoted(url)), Options{})
		testenv.WaitUntil(t, 20*time.Millisecond, func() (bool, string) {
			done := count(t, url, "SELECT count(*) FROM articles WHERE summary IS NOT NULL")
			gone := count(t, url, `SELECT count(*) FROM sluice_backfill_items
				WHERE backfill = 'summarise' AND item_key = '99' AND state = 'parked' AND rejects = 2 AND reason = 'no longer in the source'`)
			return done == n && gone == 1, fmt.Sprintf("%d of %d articles summarised, article 99 parked as gone: %d", done, n, gone)
		})
		if left := count(t, url, "SELECT COALESCE(SUM(pending + rejected), 0) FROM sluice_job_counts WHERE name = 'summarise'"); left != 0 {
			t.Errorf("the job counts %d items left, want none", left)
		}
	})
}

// A batch's outputs saved on the team's database are not saved again when
// the batch is delivered a second time (a step retried after its
// transaction committed): sluice_job_saves holds their keys. A refused
// output is not saved.
func TestJobsDeliverSQLSavesABatchOnce(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		out := url
		if !strings.HasPrefix(url, "postgres://") {
			out = "sqlite:" + url
		}
		execDB(t, out, "CREATE TABLE results (item_key TEXT NOT NULL UNIQUE, output TEXT NOT NULL)")
		c := mustLoad(t, fmt.Sprintf(`jobs:
  - name: store
    source: {query: "SELECT id, title FROM items"}
    prompt: {item: "{{.title}}", batch_max: 3}
    output:
      db: %s
      sql: INSERT INTO results (item_key, output) VALUES (:key, :output)
`, quoted(out)))
		j := c.jobs[0]
		var d dbs
		defer d.close()
		db, err := d.get(context.Background(), j.outRef(Options{}))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(savesSchema); err != nil {
			t.Fatal(err)
		}
		at := time.Now()
		items := []saved{j.savedOf("k1", " one ", "m", at), j.savedOf("k2", "二", "m", at), j.savedOf("k3", "three", "m", at)}
		refused := []string{"", ReasonNotEnglish, ""}
		for try := 1; try <= 2; try++ {
			got, err := j.deliverSQL(context.Background(), db, items, refused, at)
			if err != nil || !slices.Equal(got, refused) {
				t.Fatalf("try %d: %q, %v; want %q", try, got, err, refused)
			}
		}
		if n := count(t, out, "SELECT count(*) FROM results WHERE item_key IN ('k1', 'k3')"); n != 2 {
			t.Errorf("%d of the two accepted outputs saved", n)
		}
		if n := count(t, out, "SELECT count(*) FROM results"); n != 2 {
			t.Errorf("%d results, want the 2 accepted once each", n)
		}
		if n := count(t, out, "SELECT count(*) FROM results WHERE item_key = 'k1' AND output = 'one'"); n != 1 {
			t.Errorf("k1's output not saved trimmed")
		}
		if n := count(t, out, "SELECT count(*) FROM "+SavesTable+" WHERE job = 'store'"); n != 2 {
			t.Errorf("%d keys in %s, want the 2 saved", n, SavesTable)
		}
	})
}

// A job with an event runs once per event: its output is saved on the
// team's database, the run's result names the item and its tokens, and an
// event whose data lacks the key fails, naming it.
func TestJobsEventEndToEnd(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out := "sqlite:" + filepath.Join(dir, "out.db")
	execDB(t, out, "CREATE TABLE replies (doc TEXT NOT NULL UNIQUE, reply TEXT NOT NULL, job TEXT NOT NULL)")
	_, app := startJobs(t, filepath.Join(dir, "sluice.db"), fmt.Sprintf(`jobs:
  - name: reply
    source: {event: doc.created, key: doc_id}
    prompt:
      system: "Answer the message of {{(index .Items 0).Row.author}}."
      item: "{{.author}} asks: {{.text}}"
    max_tokens: 30
    output:
      db: %s
      sql: INSERT INTO replies (doc, reply, job) VALUES (:key, :output, :job)
`, quoted(out)), Options{})
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Budget)
	defer cancel()
	sent, err := app.Send(ctx, "doc.created", "ev-1", map[string]any{"doc_id": "d-7", "author": "Ann", "text": "How do rivers form?"})
	if err != nil || len(sent) != 1 || sent[0].Status != "queued" {
		t.Fatalf("send: %+v, %v", sent, err)
	}
	res, err := sluice.Result[EventResult](ctx, app, sent[0].RunID)
	if err != nil || res.Key != "d-7" || res.Tokens < 1 {
		t.Fatalf("the run's result: %+v, %v", res, err)
	}
	if n := count(t, out, "SELECT count(*) FROM replies WHERE doc = 'd-7' AND reply <> '' AND job = 'reply'"); n != 1 {
		t.Errorf("%d replies saved for d-7, want 1", n)
	}
	if n := count(t, out, "SELECT count(*) FROM "+SavesTable+" WHERE job = 'reply' AND item_key = 'ev-1'"); n != 1 {
		t.Errorf("event ev-1 recorded %d times in %s, want once", n, SavesTable)
	}

	sent, err = app.Send(ctx, "doc.created", "ev-2", map[string]any{"id": "d-8", "author": "Bo", "text": "And lakes?"})
	if err != nil || len(sent) != 1 {
		t.Fatalf("send: %+v, %v", sent, err)
	}
	if _, err := sluice.Result[EventResult](ctx, app, sent[0].RunID); err == nil || !strings.Contains(err.Error(), "its data has no doc_id (the job's key)") {
		t.Errorf("an event without the key: %v", err)
	}
	if n := count(t, out, "SELECT count(*) FROM replies"); n != 1 {
		t.Errorf("%d replies, want only d-7's", n)
	}
}

// An event job's key is a string, or a number as written. Any other value
// fails the run at once, naming the field and what it held, instead of
// reaching the output as Go's text of it ("<nil>", "map[a:1]", "[1]"), and
// so does a key no idempotency key could be (empty, a NUL, 3,000 bytes),
// on SQLite as on PostgreSQL, which would refuse the NUL itself in the
// save. Nothing is saved for them.
func TestJobsEventKeyIsAStringOrANumber(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		execDB(t, url, "CREATE TABLE replies (doc TEXT NOT NULL, reply TEXT NOT NULL)")
		_, app := startJobs(t, url, `jobs:
  - name: reply
    source: {event: doc.created, key: doc_id}
    prompt: {item: "{{.text}}"}
    max_tokens: 30
    output:
      sql: INSERT INTO replies (doc, reply) VALUES (:key, :output)
`, Options{})
		ctx, cancel := context.WithTimeout(context.Background(), testenv.Budget)
		defer cancel()
		cases := []struct {
			key, saved, fails string // saved: the key the output gets; fails: what the run's error says
		}{
			{key: `"d-7"`, saved: "d-7"},
			{key: `42`, saved: "42"},
			{key: `1.50`, saved: "1.50"},
			{key: `12345678901234567890`, saved: "12345678901234567890"},
			{key: `null`, fails: `field "doc_id" of its data (the job's key): must be a string or a number, not null`},
			{key: `{"a":1}`, fails: `(the job's key): must be a string or a number, not an object`},
			{key: `[1]`, fails: `(the job's key): must be a string or a number, not an array`},
			{key: `true`, fails: `(the job's key): must be a string or a number, not true`},
			{key: `""`, fails: `(the job's key): is empty`},
			{key: `"a\u0000b"`, fails: `(the job's key): has the control character U+0000`},
			{key: `"` + strings.Repeat("k", 3000) + `"`, fails: `(the job's key): 3000 bytes is over the limit of 256`},
		}
		runs := make([]string, len(cases))
		for i, tc := range cases {
			sent, err := app.Send(ctx, "doc.created", fmt.Sprintf("ev-%d", i), json.RawMessage(`{"doc_id":`+tc.key+`,"text":"How do rivers form?"}`))
			if err != nil || len(sent) != 1 || sent[0].Status != "queued" {
				t.Fatalf("send the key %.20s: %+v, %v", tc.key, sent, err)
			}
			runs[i] = sent[0].RunID
		}
		for i, tc := range cases {
			res, err := sluice.Result[EventResult](ctx, app, runs[i])
			if tc.fails == "" {
				if err != nil || res.Key != tc.saved {
					t.Errorf("the key %s: result %+v, %v; want the key %s", tc.key, res, err, tc.saved)
				}
				continue
			}
			var re *sluice.RunError
			if !errors.As(err, &re) || re.Run.Status != run.Failed || !strings.Contains(re.Run.Error, tc.fails) {
				t.Errorf("the key %.20s: the run gave the key %.40q, %v; want it failed saying %s", tc.key, res.Key, err, tc.fails)
			}
		}
		if n := count(t, url, "SELECT count(*) FROM replies"); n != 4 {
			t.Errorf("%d replies saved, want the 4 of a string or number key", n)
		}
		if n := count(t, url, "SELECT count(*) FROM replies WHERE doc IN ('d-7', '42', '1.50', '12345678901234567890')"); n != 4 {
			t.Errorf("%d replies saved under the keys as sent, want 4", n)
		}
	})
}

// An event's job delivers each event once, not each key: two events about
// one item both save, each under its event's ID, once however often
// delivered.
func TestJobsDeliverSQLEventsOfOneKey(t *testing.T) {
	t.Parallel()
	out := "sqlite:" + filepath.Join(t.TempDir(), "out.db")
	execDB(t, out, "CREATE TABLE replies (doc TEXT NOT NULL, reply TEXT NOT NULL)")
	c := mustLoad(t, fmt.Sprintf(`jobs:
  - name: reply
    source: {event: doc.created, key: doc_id}
    prompt: {item: "{{.text}}"}
    output:
      db: %s
      sql: INSERT INTO replies (doc, reply) VALUES (:key, :output)
`, quoted(out)))
	j := c.jobs[0]
	var d dbs
	defer d.close()
	db, err := d.get(context.Background(), j.outRef(Options{}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(savesSchema); err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	for _, ev := range []string{"ev-1", "ev-2", "ev-1"} {
		s := j.savedOf("d-7", "a reply to "+ev, "m", at)
		s.delivery = ev
		if _, err := j.deliverSQL(context.Background(), db, []saved{s}, []string{""}, at); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(t, out, "SELECT count(*) FROM replies WHERE doc = 'd-7'"); n != 2 {
		t.Errorf("%d replies to d-7, want one per event (2)", n)
	}
	if n := count(t, out, "SELECT count(*) FROM "+SavesTable+" WHERE job = 'reply' AND item_key IN ('ev-1', 'ev-2')"); n != 2 {
		t.Errorf("%d events recorded in %s, want 2", n, SavesTable)
	}
}

// A delivery that fails names the endpoint without the password its URL
// holds: run errors and logs keep the message.
func TestJobsDeliveryErrorHidesThePassword(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	u := strings.Replace(srv.URL, "http://", "http://team:s3cret-pass@", 1)
	c := mustLoad(t, fmt.Sprintf(`jobs:
  - name: notify
    source: {event: doc.created}
    prompt: {item: "{{.text}}"}
    output: {url: %s, timeout: 1s}
`, quoted(u)))
	j := c.jobs[0]
	s := j.savedOf("k1", "an output", "m", time.Now())
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Budget)
	defer cancel()
	_, err := j.deliverHTTP(ctx, srv.Client(), []saved{s}, []string{""})
	if err == nil || strings.Contains(err.Error(), "s3cret-pass") || !strings.Contains(err.Error(), "team:xxxxx@") {
		t.Fatalf("error %v: want the endpoint named without its password", err)
	}
}
