package quota_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/quota"
	"github.com/sluice-dev/sluice/internal/store"
	_ "github.com/sluice-dev/sluice/internal/store/postgres"
	"github.com/sluice-dev/sluice/internal/store/sqlite"
	"github.com/sluice-dev/sluice/internal/testenv"
)

// TestRestartRemembersTheDay spends most of a day's TPD budget, "restarts"
// (a new governor on the same database), and checks the new one does not
// spend it again — on both databases.
func TestRestartRemembersTheDay(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		ctx := context.Background()
		open := func() store.Store {
			st, err := store.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			return st
		}
		now := time.Now().Add(-10 * time.Hour).Truncate(time.Millisecond)
		clock := func() time.Time { return now }
		cfg := governor.Config{Key: "groq/test", Limits: governor.Limits{governor.TPD: 10000}, DayBurst: -1}

		st := open()
		q, err := quota.Open(ctx, st, cfg, quota.Config{Now: clock})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 8 {
			at := now.Add(time.Duration(i) * time.Hour)
			r, err := q.Reserve(at, "backfill", governor.Cost{Requests: 1, Input: 1200, Output: 300})
			if err != nil {
				t.Fatal(err)
			}
			q.Advance(at)
			if !r.Admitted() {
				t.Fatalf("call %d not admitted", i)
			}
			// The provider counted 700 input tokens, not 1,200: the settled charge is what is kept.
			r.Settle(at.Add(time.Second), governor.Cost{Input: 700, Output: 100})
		}
		if err := q.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		st.Close()

		// Restart two hours after the last call: 8 × 1,000 of 10,000 are spent.
		now = now.Add(9 * time.Hour)
		st2 := open()
		defer st2.Close()
		q2, err := quota.Open(ctx, st2, cfg, quota.Config{Now: clock})
		if err != nil {
			t.Fatal(err)
		}
		used := q2.Stats(now).Limits[governor.TPD].Used
		if used != 8000 {
			t.Fatalf("restored TPD used = %d, want 8000 (the settled charges of the day)", used)
		}
		big, err := q2.Reserve(now, "backfill", governor.Cost{Requests: 1, Input: 2500, Output: 500})
		if err != nil {
			t.Fatal(err)
		}
		q2.Advance(now)
		if big.Admitted() {
			t.Fatal("after a restart the governor spent the day's budget again")
		}
		fits, err := q2.Reserve(now, "other", governor.Cost{Requests: 1, Input: 1500, Output: 400})
		if err != nil {
			t.Fatal(err)
		}
		big.Cancel(now)
		q2.Advance(now)
		if !fits.Admitted() {
			t.Fatal("what is left of the day (2,000) was not admitted after the restart")
		}
		if err := q2.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func TestOpenNeedsKey(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "x.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := quota.Open(context.Background(), st, governor.Config{}, quota.Config{}); err == nil {
		t.Fatal("Open without a key succeeded")
	}
}
