package devpick

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode"
)

// dump hashes every article row.
func dump(t *testing.T, db *sql.DB) (string, int) {
	t.Helper()
	rows, err := db.Query(`SELECT id, seq, published_at, title_ja, summary_ja, body_ja, analysis, analysis_naive FROM ` + Table + ` ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	h := sha256.New()
	n := 0
	for rows.Next() {
		var id, title, summary, body, analysis, naive string
		var seq, at int64
		if err := rows.Scan(&id, &seq, &at, &title, &summary, &body, &analysis, &naive); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(h, "%s|%d|%d|%s|%s|%s|%s|%s\n", id, seq, at, title, summary, body, analysis, naive)
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", h.Sum(nil)), n
}

// Seed builds the same articles on every database, and a second Seed
// inserts nothing.
func TestSeedDeterministicAndIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, _ := tempDB(t)
	b, _ := tempDB(t)
	const n = 300
	for _, db := range []*sql.DB{a, b} {
		got, err := Seed(ctx, db, n)
		if err != nil || got != n {
			t.Fatalf("Seed inserted %d (%v), want %d", got, err, n)
		}
	}
	ha, na := dump(t, a)
	hb, nb := dump(t, b)
	if ha != hb || na != n || nb != n {
		t.Fatalf("two seeded databases differ: %d rows %s, %d rows %s", na, ha, nb, hb)
	}
	again, err := Seed(ctx, a, n)
	if err != nil || again != 0 {
		t.Fatalf("a second Seed inserted %d (%v), want 0", again, err)
	}
	if h, m := dump(t, a); h != ha || m != n {
		t.Fatalf("a second Seed changed the articles: %d rows", m)
	}
	more, err := Seed(ctx, a, n+5)
	if err != nil || more != 5 {
		t.Fatalf("Seed of 5 more inserted %d (%v)", more, err)
	}

	// The articles differ from each other and are Japanese.
	titles := map[string]bool{}
	for seq := int64(1); seq <= n; seq++ {
		art := Generate(seq)
		titles[art.TitleJA] = true
		if !strings.ContainsFunc(art.TitleJA, func(r rune) bool { return unicode.In(r, unicode.Hiragana, unicode.Katakana, unicode.Han) }) {
			t.Fatalf("article %d's title %q has no Japanese", seq, art.TitleJA)
		}
		if art != Generate(seq) {
			t.Fatalf("Generate(%d) differs between two calls", seq)
		}
	}
	if len(titles) < n*9/10 {
		t.Errorf("only %d different titles among %d articles", len(titles), n)
	}
	p, err := Progress(ctx, a, SluicePipeline)
	if err != nil {
		t.Fatal(err)
	}
	if p[Analysis] != (Counts{Done: n + 5}) || p[Summary] != (Counts{Remaining: n + 5}) || p[Title] != (Counts{Waiting: n + 5}) {
		t.Errorf("progress of a seeded table %+v: want every article analysed, needing a summary, and its title waiting on it", p)
	}
}

// Seeded summaries make the seed's state: titles eligible at once, on both
// pipelines, and no save counted.
func TestSeedSummaries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := tempDB(t)
	if _, err := Seed(ctx, db, 50); err != nil {
		t.Fatal(err)
	}
	if got, err := SeedSummaries(ctx, db, 20); err != nil || got != 20 {
		t.Fatalf("SeedSummaries gave %d (%v), want 20", got, err)
	}
	if got, err := SeedSummaries(ctx, db, 20); err != nil || got != 0 {
		t.Fatalf("a second SeedSummaries gave %d (%v), want 0", got, err)
	}
	for _, p := range []Pipeline{SluicePipeline, NaivePipeline} {
		c, err := Progress(ctx, db, p)
		if err != nil {
			t.Fatal(err)
		}
		if c[Summary] != (Counts{Done: 20, Remaining: 30}) || c[Title] != (Counts{Remaining: 20, Waiting: 30}) {
			t.Errorf("%s: %+v, want 20 summaries done and their 20 titles eligible", p, c)
		}
	}
	var saves int
	if err := db.QueryRow(`SELECT COALESCE(SUM(summary_en_saves + summary_en_naive_saves), 0) FROM ` + Table).Scan(&saves); err != nil || saves != 0 {
		t.Errorf("seeded summaries counted %d saves (%v), want 0", saves, err)
	}
	if _, err := SeedSummaries(ctx, db, -1); err == nil {
		t.Error("a negative count accepted")
	}
}

// Arrive adds the next article, not analysed, for both pipelines.
func TestArrive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := tempDB(t)
	if _, err := Seed(ctx, db, 10); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 10, 18, 7, 0, 0, 0, time.UTC)
	for i := range 3 {
		a, err := Arrive(ctx, db, now.Add(time.Duration(i)*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if want := Generate(int64(11 + i)); a.Seq != want.Seq || a.TitleJA != want.TitleJA || a.ID != ArticleID(a.Seq) {
			t.Errorf("arrival %d is article %d %q, want %d %q", i, a.Seq, a.TitleJA, want.Seq, want.TitleJA)
		}
	}
	for _, pl := range []Pipeline{SluicePipeline, NaivePipeline} {
		p, err := Progress(ctx, db, pl)
		if err != nil {
			t.Fatal(err)
		}
		if p[Analysis] != (Counts{Done: 10, Remaining: 3}) {
			t.Errorf("%s: analysis %+v, want 10 done and the 3 arrivals remaining", pl, p[Analysis])
		}
	}
	var at int64
	if err := db.QueryRow(`SELECT published_at FROM `+Table+` WHERE id = $1`, ArticleID(13)).Scan(&at); err != nil || at != now.Add(2*time.Minute).UnixMilli() {
		t.Errorf("article 13 published at %d (%v), want its arrival time", at, err)
	}
	if _, err := Progress(ctx, db, "other"); err == nil {
		t.Error("Progress of an unknown pipeline: no error")
	}
}

// OpenDB takes the app's DatabaseURL and refuses PostgreSQL.
func TestOpenDB(t *testing.T) {
	t.Parallel()
	if _, err := OpenDB("postgres://localhost/sluice"); err == nil {
		t.Error("OpenDB of a PostgreSQL URL: no error")
	}
	db, err := OpenDB("sqlite:" + t.TempDir() + "/app.db")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := Seed(context.Background(), db, 1); err != nil {
		t.Fatal(err)
	}
}
