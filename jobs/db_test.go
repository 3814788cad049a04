package jobs

import (
	"context"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/testenv"
)

// Keys of any type and collation are paged in byte order and loaded back
// by the text the pages list: a key column that sorts without case on
// SQLite, and a timestamp key on PostgreSQL, whose text differs from its
// value as Go reads it.
func TestJobsKeysPageAndLoadAsText(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		pg := strings.HasPrefix(url, "postgres://")
		ref := parseDB(url)
		create, q := `CREATE TABLE docs (id TEXT COLLATE NOCASE PRIMARY KEY, body TEXT NOT NULL)`, `SELECT id, body FROM docs`
		keys := []string{"a", "B", "c", "D"}
		if pg {
			create, q = `CREATE TABLE docs (at TIMESTAMPTZ PRIMARY KEY, body TEXT NOT NULL)`, `SELECT at AS id, body FROM docs`
			keys = []string{"2026-01-01 10:00:00+00", "2026-01-02 10:00:00+00", "2026-01-03 10:00:00+00"}
		}
		execDB(t, url, create)
		db, err := ref.open(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		for _, k := range keys {
			if _, err := db.Exec(`INSERT INTO docs VALUES ($1, $2)`, k, "body of "+k); err != nil {
				t.Fatal(err)
			}
		}
		s := source{q: q, key: "id", postgres: pg}
		var listed []string
		for after := ""; ; {
			page, err := s.pending(context.Background(), db, after, 2)
			if err != nil {
				t.Fatal(err)
			}
			listed = append(listed, page...)
			if len(page) < 2 {
				break
			}
			after = page[len(page)-1]
		}
		if len(listed) != len(keys) || !sort.StringsAreSorted(listed) {
			t.Fatalf("pages listed %q: want all %d keys, in byte order", listed, len(keys))
		}
		got, err := s.load(context.Background(), db, listed)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range listed {
			if _, ok := got[k]; !ok {
				t.Errorf("key %q listed but not loaded (loaded %v)", k, slices.Collect(maps.Keys(got)))
			}
		}
	})
}
