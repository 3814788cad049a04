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
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/llm"
)

// startApp builds an app on the SQLite file path with one provider at
// baseURL, registers the pipeline with quick polls, and starts it.
func startApp(t *testing.T, path, baseURL string, limits governor.Limits, db *sql.DB, cfg Config) *sluice.App {
	t.Helper()
	ctx := context.Background()
	app, err := sluice.New(ctx, sluice.Config{
		DatabaseURL:  path,
		PollInterval: 20 * time.Millisecond,
		RetryBase:    time.Millisecond, RetryMax: 20 * time.Millisecond,
		HealthEvery: 100 * time.Millisecond,
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		Providers:   []sluice.Provider{{Name: "groq", LLM: llm.Config{BaseURL: baseURL, Profile: llm.Groq}, Limits: limits}},
		Flows:       Flows(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = app.Stop(context.Background()) })
	cfg.DB = db
	cfg.AnalysisPoll, cfg.Poll = 50*time.Millisecond, 50*time.Millisecond
	if err := Register(app, cfg); err != nil {
		t.Fatal(err)
	}
	if err := app.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return app
}

// waitFor polls cond until it holds, failing the test with what cond last
// said if it does not within testenv.Budget.
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	testenv.WaitUntil(t, 25*time.Millisecond, func() (bool, string) {
		ok, state := cond()
		return ok, "not yet " + what + ": " + state
	})
}

// checkSavedOnce checks that no output column was written twice and that
// every English title belongs to an article whose summary was saved first.
func checkSavedOnce(t *testing.T, db *sql.DB) {
	t.Helper()
	var twice, orphan, naive int
	err := db.QueryRow(`SELECT
	    SUM(CASE WHEN analysis_saves > 1 OR summary_en_saves > 1 OR title_en_saves > 1 THEN 1 ELSE 0 END),
	    SUM(CASE WHEN title_en IS NOT NULL AND (summary_en IS NULL OR summary_en_at > title_en_at) THEN 1 ELSE 0 END),
	    SUM(CASE WHEN analysis_naive_saves + summary_en_naive_saves + title_en_naive_saves > 0 THEN 1 ELSE 0 END)
	FROM `+Table).Scan(&twice, &orphan, &naive)
	if err != nil {
		t.Fatal(err)
	}
	if twice != 0 || orphan != 0 || naive != 0 {
		t.Errorf("%d articles saved twice, %d titled without a saved summary before, %d with naive columns written; want none", twice, orphan, naive)
	}
}

// The pipeline on the provider simulator: new articles are analysed, the
// summary and title backfills save, each article at most once, and titles
// only of articles whose summary was saved before.
func TestPipelineProgresses(t *testing.T) {
	t.Parallel()
	limits := governor.Limits{governor.RPM: 100_000, governor.TPM: 10_000_000, governor.OTPM: 1_000_000}
	model, url := simServer(t, forecast.ModelConfig{Limits: limits, Seed: 3}, nil)
	db, path := tempDB(t)
	ctx := context.Background()
	if _, err := Seed(ctx, db, 30); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := Arrive(ctx, db, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	startApp(t, path, url, limits, db, Config{RetryAfter: 50 * time.Millisecond})
	for range 2 { // and while it runs
		if _, err := Arrive(ctx, db, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every new article analysed and summaries and titles saved", func() (bool, string) {
		p, err := Progress(ctx, db, SluicePipeline)
		if err != nil {
			t.Fatal(err)
		}
		return p[Analysis].Remaining == 0 && p[Summary].Done > 0 && p[Title].Done > 0, fmt.Sprintf("%+v", p)
	})
	checkSavedOnce(t, db)
	var analysed int
	if err := db.QueryRow(`SELECT COUNT(*) FROM ` + Table + ` WHERE analysis_saves = 1`).Scan(&analysed); err != nil {
		t.Fatal(err)
	}
	if analysed != 5 {
		t.Errorf("%d articles analysed by the pipeline, want the 5 new ones", analysed)
	}
	if st := model.Stats(); st.Rejected != 0 {
		t.Errorf("the provider refused %d requests, want none", st.Rejected)
	}
}

// fakeProvider answers each item of a batch in its marked block: English,
// except the summaries of articles with an odd number, which it answers in
// Japanese. It records which articles each job asked about.
type fakeProvider struct {
	mu    sync.Mutex
	asked map[string]map[string]int // job → article → requests
	calls int
}

var itemMarker = regexp.MustCompile(`(?m)^\[(\d+)\] \((a(\d+))\)`)

func (f *fakeProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Messages []struct{ Content string } `json:"messages"`
	}
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
	f.mu.Lock()
	for _, m := range itemMarker.FindAllStringSubmatch(req.Messages[1].Content, -1) {
		f.asked[job][m[2]]++
		seq, _ := strconv.Atoi(m[3])
		switch {
		case job == Summary && seq%2 == 1:
			fmt.Fprintf(&b, "[%s] 日本語のままの要約です。\n", m[1])
		case job == Title:
			fmt.Fprintf(&b, "[%s] An English Headline\n", m[1])
		default:
			fmt.Fprintf(&b, "[%s] An English summary of the article, with its key points.\n", m[1])
		}
	}
	f.calls++
	id := fmt.Sprintf("chatcmpl-fake-%d", f.calls) // unique, as a provider's are: the backfill's records key on it
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": id, "object": "chat.completion", "model": "sim-model",
		"choices": []map[string]any{{"index": 0, "message": map[string]string{"role": "assistant", "content": b.String()}, "finish_reason": "stop"}},
		"usage":   map[string]int{"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
	})
}

func (f *fakeProvider) count(job, id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.asked[job][id]
}

// The title backfill takes only articles whose summary was saved: the
// summaries of odd-numbered articles come back in Japanese, are rejected as
// not English, retried and parked; those articles never reach the titles,
// while the even ones get both. Marked answers are split at their markers.
func TestTitlesOnlyAfterSavedSummaries(t *testing.T) {
	t.Parallel()
	fake := &fakeProvider{asked: map[string]map[string]int{Analysis: {}, Summary: {}, Title: {}}}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	db, path := tempDB(t)
	ctx := context.Background()
	const n = 16
	if _, err := Seed(ctx, db, n); err != nil {
		t.Fatal(err)
	}
	const maxRejects = 2
	startApp(t, path, srv.URL, governor.Limits{governor.RPM: 100_000}, db, Config{Strict: true, RetryAfter: 20 * time.Millisecond, MaxRejects: maxRejects})
	waitFor(t, "even articles titled and odd summaries tried twice", func() (bool, string) {
		p, err := Progress(ctx, db, SluicePipeline)
		if err != nil {
			t.Fatal(err)
		}
		for seq := int64(1); seq <= n; seq += 2 {
			if fake.count(Summary, ArticleID(seq)) < maxRejects {
				return false, fmt.Sprintf("%+v; article %d asked %d times", p, seq, fake.count(Summary, ArticleID(seq)))
			}
		}
		return p[Title].Done == n/2, fmt.Sprintf("%+v", p)
	})
	checkSavedOnce(t, db)
	rows, err := db.Query(`SELECT seq, summary_en IS NOT NULL, title_en IS NOT NULL, COALESCE(summary_en, '') FROM ` + Table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var seq int64
		var summary, title bool
		var text string
		if err := rows.Scan(&seq, &summary, &title, &text); err != nil {
			t.Fatal(err)
		}
		odd := seq%2 == 1
		if summary == odd || title == odd {
			t.Errorf("article %d: summary %v, title %v; want both for even articles, neither for odd", seq, summary, title)
		}
		if summary && text != "An English summary of the article, with its key points." {
			t.Errorf("article %d: summary %q, want its own block of the answer", seq, text)
		}
		if c := fake.count(Title, ArticleID(seq)); odd && c != 0 {
			t.Errorf("article %d, whose summary was never saved, was sent to the title backfill %d times", seq, c)
		}
		if c := fake.count(Summary, ArticleID(seq)); odd && c > maxRejects {
			t.Errorf("article %d: summary asked %d times, want it parked after %d rejections", seq, c, maxRejects)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// Every request sets max_tokens for its batch, within the seed's OTPM.
func TestRequestsSetMaxTokens(t *testing.T) {
	t.Parallel()
	a := Generate(1)
	for _, j := range Jobs {
		for n := 1; n <= j.MaxBatch; n++ {
			items := make([]Article, n)
			for i := range items {
				items[i] = a
			}
			req := j.request("sim-model", items, true)
			if req.MaxTokens != n*j.ItemMaxTokens {
				t.Errorf("%s, %d items: max_tokens %d, want %d", j.Name, n, req.MaxTokens, n*j.ItemMaxTokens)
			}
			if naive := j.request("sim-model", items, false); naive.MaxTokens != 0 {
				t.Errorf("%s: the naive request sets max_tokens %d, want none", j.Name, naive.MaxTokens)
			}
		}
		if j.ItemMaxTokens > 1000 {
			t.Errorf("%s: one item's max_tokens %d can never fit the seed's OTPM of 1,000", j.Name, j.ItemMaxTokens)
		}
	}
}
