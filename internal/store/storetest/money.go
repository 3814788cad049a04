package storetest

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/store"
)

// exerciseSampleMoney checks the money in the flows' samples: what the
// calls cost in the interval, whether the key had a price, and the budgets
// that applied with what they had counted.
func exerciseSampleMoney(t *testing.T, newDB NewDatabase) {
	ctx := context.Background()
	open := func(t *testing.T) store.Store {
		t.Helper()
		return openOn(t, newDB(t))
	}
	day := func(max, spent int64) store.SampleBudget {
		return store.SampleBudget{Limit: "mpd", Max: max, Spent: spent}
	}
	keyMonth := func(max, spent int64) store.SampleBudget {
		return store.SampleBudget{Limit: "mpm", Key: true, Max: max, Spent: spent}
	}

	t.Run("SampleMoneyRecordThenRead", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		// 1.84 spent in the interval against the flow's 2.00 a day and the
		// key's 100.00 a month; an unpriced flow's sample beside it.
		priced := sample("titles", "app", base, 3)
		priced.Tokens, priced.Money, priced.Priced = 9000, 1_840_000_000, true
		priced.Budgets = []store.SampleBudget{day(2_000_000_000, 1_840_000_000), keyMonth(100_000_000_000, 40_000_000_000)}
		// A key priced so low that nothing was spent yet, and the largest
		// amounts a sample holds.
		free := sample("titles", "app", base.Add(time.Minute), 1)
		free.Priced = true
		big := sample("Äpfel", "app", base, 1)
		big.Money, big.Priced = math.MaxInt64, true
		big.Budgets = []store.SampleBudget{{Limit: `m'"; --`, Key: true, Max: math.MaxInt64, Spent: math.MaxInt64}}
		plain := sample("summaries", "app", base, 2)
		mustRecordSamples(t, s, priced, free, big, plain)
		got := mustSamples(t, s, base, base.Add(time.Hour), "")
		assertSamples(t, got, plain, priced, big, free)
		if got[0].Budgets != nil || got[0].Priced || got[0].Money != 0 {
			t.Fatalf("an unpriced sample came back as %+v, want no money, not priced, nil budgets", got[0])
		}
		// An empty list of budgets is none, as nil is.
		empty := sample("empty", "app", base, 1)
		empty.Budgets = []store.SampleBudget{}
		mustRecordSamples(t, s, empty)
		if got := mustSamples(t, s, base, base.Add(time.Second), "empty"); len(got) != 1 || got[0].Budgets != nil {
			t.Fatalf("a sample with an empty list of budgets came back as %#v, want nil budgets", got)
		}
	})

	t.Run("SampleMoneyAddsUpOnTheSameKey", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		// Two processes of one source sample a flow in one millisecond:
		// their money adds up, priced is either's, and the budgets are
		// the later one's, as the state is.
		first := sample("titles", "app", base, 1)
		first.Money, first.Priced = 300_000_000, true
		first.Budgets = []store.SampleBudget{day(2_000_000_000, 1_500_000_000)}
		second := sample("titles", "app", base, 2)
		second.Money = 200_000_000
		second.Budgets = []store.SampleBudget{day(2_000_000_000, 1_700_000_000), keyMonth(50_000_000_000, 9_000_000_000)}
		mustRecordSamples(t, s, first)
		mustRecordSamples(t, s, second)
		both := second
		both.Done, both.Money, both.Priced = 3, 500_000_000, true
		assertSamples(t, mustSamples(t, s, base, base.Add(time.Second), "titles"), both)
		// Within one call too, in the order given; the sum saturates.
		x, y := sample("other", "app", base, 1), sample("other", "app", base, 1)
		x.Money, x.Budgets = 1<<62, []store.SampleBudget{day(5, 4)}
		y.Money, y.Priced = 1<<62, true
		mustRecordSamples(t, s, x, y)
		xy := y
		xy.Done, xy.Money = 2, math.MaxInt64
		assertSamples(t, mustSamples(t, s, base, base.Add(time.Second), "other"), xy)
	})

	t.Run("SampleMoneyRefusesBadInput", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		long := strings.Repeat("n", store.MaxKeyBytes+1)
		good := sample("titles", "app", base, 1)
		bad := func(change func(*store.Sample)) store.Sample {
			smp := sample("titles", "app", base.Add(time.Minute), 1)
			smp.Priced = true
			change(&smp)
			return smp
		}
		// The words are part of the contract: both drivers say the same.
		for _, tc := range []struct {
			call string
			smp  store.Sample
			want string
		}{
			{"with negative money", bad(func(smp *store.Sample) { smp.Money = -5 }), "record samples: sample 1: Money -5 is negative"},
			{"with a budget without a limit", bad(func(smp *store.Sample) { smp.Budgets = []store.SampleBudget{day(1, 0), {Max: 1}} }),
				"record samples: sample 1: empty limit of budget 1"},
			{"with a budget's limit not UTF-8", bad(func(smp *store.Sample) { smp.Budgets = []store.SampleBudget{{Limit: "m\xffd", Max: 1}} }),
				`record samples: sample 1: limit of budget 0 "m\xffd" is not UTF-8 without NUL`},
			{"with a budget's long limit", bad(func(smp *store.Sample) { smp.Budgets = []store.SampleBudget{{Limit: long, Key: true, Max: 1}} }),
				`record samples: sample 1: limit of budget 0 of 257 bytes is over the limit of 256: "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn"…`},
			{"with a negative budget", bad(func(smp *store.Sample) { smp.Budgets = []store.SampleBudget{day(-1, 0)} }),
				`record samples: sample 1: Max -1 of budget 0 ("mpd") is negative`},
			{"with a negative spend of a budget", bad(func(smp *store.Sample) { smp.Budgets = []store.SampleBudget{keyMonth(10, -2)} }),
				`record samples: sample 1: Spent -2 of budget 0 ("mpm") is negative`},
		} {
			// A good sample first: a refused batch writes none of it.
			if err := s.RecordSamples(ctx, []store.Sample{good, tc.smp}); err == nil || err.Error() != tc.want {
				t.Errorf("RecordSamples %s: error = %v, want %q", tc.call, err, tc.want)
			}
		}
		assertSamples(t, mustSamples(t, s, time.Time{}, base.Add(time.Hour), ""))
	})

	t.Run("SamplesRecordedBeforeMoney", func(t *testing.T) {
		t.Parallel()
		openDB := newDB(t)
		s := openOn(t, openDB)
		old := sample("titles", "app", base, 4)
		old.Tokens = 1200
		mustRecordSamples(t, s, old)
		// Back to the schema before samples kept money.
		mustExec(t, mustHandle(t, s),
			"ALTER TABLE sluice_flow_samples DROP COLUMN money",
			"ALTER TABLE sluice_flow_samples DROP COLUMN priced",
			"ALTER TABLE sluice_flow_samples DROP COLUMN budgets",
			"DELETE FROM sluice_migrations WHERE name = 'sample_money'")
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		// Migrated again, the sample recorded before says no money is
		// known: none spent, not priced, no budget.
		s = openOn(t, openDB)
		assertSamples(t, mustSamples(t, s, base, base.Add(time.Hour), "titles"), old)
		// From then on a sample keeps its money, and adds to the old one.
		again := sample("titles", "app", base, 1)
		again.Money, again.Priced, again.Budgets = 7, true, []store.SampleBudget{day(10, 7)}
		mustRecordSamples(t, s, again)
		both := again
		both.Done, both.Tokens = 5, 1200
		assertSamples(t, mustSamples(t, s, base, base.Add(time.Hour), "titles"), both)
	})
}
