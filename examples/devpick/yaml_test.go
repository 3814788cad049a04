package devpick

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/jobs"
	"github.com/sluice-dev/sluice/llm"
)

// recorder is a provider whose answer to each item depends on the job and
// the article only, never on the batch or the order of calls: two
// pipelines that ask about the same articles get the same outputs however
// their batches fall. Summaries of odd-numbered articles come back in
// Japanese. It keeps every request it answers.
type recorder struct {
	mu   sync.Mutex
	reqs []llm.ChatRequest
}

func (f *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req llm.ChatRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) != 2 {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	job := ""
	for _, j := range Jobs {
		if req.Messages[0].Content == j.prompt {
			job = j.Name
		}
	}
	var b strings.Builder
	for _, m := range itemMarker.FindAllStringSubmatch(req.Messages[1].Content, -1) {
		seq, _ := strconv.Atoi(m[3])
		switch {
		case job == Summary && seq%2 == 1:
			fmt.Fprintf(&b, "[%s] 日本語のままの要約です。\n", m[1])
		default:
			fmt.Fprintf(&b, "[%s] The %s of article %d, in English.\n", m[1], job, seq)
		}
	}
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	id := fmt.Sprintf("chatcmpl-rec-%d", len(f.reqs))
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": id, "object": "chat.completion", "model": req.Model,
		"choices": []map[string]any{{"index": 0, "message": map[string]string{"role": "assistant", "content": b.String()}, "finish_reason": "stop"}},
		"usage":   map[string]int{"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
	})
}

// sameMessages compares messages by role and content, as they go on the
// wire.
func sameMessages(a, b []llm.Message) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Role != b[i].Role || a[i].Content != b[i].Content {
			return false
		}
	}
	return true
}

// outputs reads each article's three outputs.
func outputs(t *testing.T, db *sql.DB) map[string][3]sql.NullString {
	t.Helper()
	rows, err := db.Query(`SELECT id, analysis, summary_en, title_en FROM ` + Table + ` ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][3]sql.NullString{}
	for rows.Next() {
		var id string
		var o [3]sql.NullString
		if err := rows.Scan(&id, &o[0], &o[1], &o[2]); err != nil {
			t.Fatal(err)
		}
		out[id] = o
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// The DevPick jobs in YAML (examples/devpick-yaml/sluice.yaml) do what
// Register's do: on the same articles, each of their requests is the one
// this package builds for the same articles, byte for byte, and every
// article ends with the same analysis, summary and title — the odd ones'
// Japanese summaries refused as not English by both, so neither titles
// them.
func TestYAMLJobsMatchGo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const seeded, arrived = 10, 4
	fill := func(db *sql.DB) {
		if _, err := Seed(ctx, db, seeded); err != nil {
			t.Fatal(err)
		}
		for range arrived {
			if _, err := Arrive(ctx, db, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
	}
	done := func(db *sql.DB) (bool, string) {
		var analysed, summarised, titled int
		err := db.QueryRow(`SELECT COUNT(analysis), COUNT(summary_en), COUNT(title_en) FROM `+Table).Scan(&analysed, &summarised, &titled)
		if err != nil {
			t.Fatal(err)
		}
		const total = seeded + arrived
		return analysed == total && summarised == total/2 && titled == total/2,
			fmt.Sprintf("%d analysed, %d summarised, %d titled of %d", analysed, summarised, titled, total)
	}
	limits := governor.Limits{governor.RPM: 100_000}

	// Go: Register, titles After the summaries as in the YAML.
	goFake := &recorder{}
	goSrv := httptest.NewServer(goFake)
	t.Cleanup(goSrv.Close)
	goDB, goPath := tempDB(t)
	fill(goDB)
	startApp(t, goPath, goSrv.URL, limits, goDB, Config{TitleAfterSummary: true})

	// YAML: the example's file, its articles in a database of their own.
	yFake := &recorder{}
	ySrv := httptest.NewServer(yFake)
	t.Cleanup(ySrv.Close)
	dir := t.TempDir()
	teamPath := filepath.Join(dir, "devpick.db")
	teamDB, err := OpenDB(teamPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = teamDB.Close() })
	fill(teamDB)
	text, err := os.ReadFile(filepath.Join("..", "devpick-yaml", "sluice.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfgText := strings.Replace(string(text), "source_db: sqlite:devpick.db", "source_db: sqlite:"+teamPath, 1)
	// Quick polls, as startApp gives the Go jobs.
	cfgText = strings.NewReplacer("poll: 10s", "poll: 50ms", "poll: 15s", "poll: 50ms").Replace(cfgText)
	cfgPath := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfgText), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := jobs.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	appPath := filepath.Join(dir, "sluice.db")
	app, err := sluice.New(ctx, sluice.Config{
		DatabaseURL:  appPath,
		PollInterval: 20 * time.Millisecond,
		RetryBase:    time.Millisecond, RetryMax: 20 * time.Millisecond,
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		Providers: []sluice.Provider{{Name: "groq", LLM: llm.Config{BaseURL: ySrv.URL, Profile: llm.Groq}, Limits: limits}},
		Flows:     cfg.Flows(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = app.Stop(context.Background()) })
	closeDBs, err := jobs.Register(ctx, app, cfg, jobs.Options{AppDB: appPath, Model: "sim-model"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = closeDBs() })
	if err := app.Start(ctx); err != nil {
		t.Fatal(err)
	}

	waitFor(t, "the Go jobs done", func() (bool, string) { return done(goDB) })
	waitFor(t, "the YAML jobs done", func() (bool, string) { return done(teamDB) })
	checkSavedOnce(t, goDB)

	// Every YAML request is the one Go builds for its articles.
	yFake.mu.Lock()
	defer yFake.mu.Unlock()
	for i, got := range yFake.reqs {
		var job *Job
		for k := range Jobs {
			if got.Messages[0].Content == Jobs[k].prompt {
				job = &Jobs[k]
			}
		}
		if job == nil {
			t.Fatalf("YAML request %d: its system message is none of the Go jobs' prompts:\n%s", i, got.Messages[0].Content)
		}
		var arts []Article
		for _, m := range itemMarker.FindAllStringSubmatch(got.Messages[1].Content, -1) {
			seq, _ := strconv.ParseInt(m[3], 10, 64)
			arts = append(arts, Generate(seq))
		}
		want := job.request("sim-model", arts, true)
		if got.Model != want.Model || got.MaxTokens != want.MaxTokens || !sameMessages(got.Messages, want.Messages) {
			t.Fatalf("YAML request %d (%s, %d articles) differs from Go's:\n got %q max_tokens %d\nwant %q max_tokens %d",
				i, job.Name, len(arts), got.Messages[1].Content, got.MaxTokens, want.Messages[1].Content, want.MaxTokens)
		}
	}
	if len(yFake.reqs) == 0 {
		t.Fatal("the YAML jobs made no request")
	}
	// And every article ends the same on both.
	g, y := outputs(t, goDB), outputs(t, teamDB)
	if !reflect.DeepEqual(g, y) {
		for id := range g {
			if g[id] != y[id] {
				t.Errorf("article %s: Go %v, YAML %v", id, g[id], y[id])
			}
		}
	}
}
