package driver

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/store"
)

func TestSettled(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 10, 18, 7, 1, 49, 123_000_000, time.UTC)
	s := store.Settlement{RunID: "r2", RequestID: "q2", At: at, MaxRejects: 2, RetryAfter: time.Minute}
	pending := store.Item{Key: "k", State: store.ItemPending, EligibleAt: at.Add(-time.Hour)}
	rejectedOnce := store.Item{Key: "k", State: store.ItemRejected, EligibleAt: at.Add(-time.Hour), RunID: "r1", RequestID: "q1",
		Rejects: 1, Reason: "too long", RetryAt: at.Add(-time.Second)}
	saved, rejected := store.Outcome{Key: "k", Saved: true}, store.Outcome{Key: "k", Reason: "wrong language"}
	for _, tc := range []struct {
		name    string
		item    store.Item
		outcome store.Outcome
		want    store.Item
		changed bool
	}{{
		name: "pending, saved", item: pending, outcome: saved, changed: true,
		want: store.Item{Key: "k", State: store.ItemSaved, EligibleAt: pending.EligibleAt, ProcessedAt: at, RunID: "r2", RequestID: "q2"},
	}, {
		name: "pending, rejected: waits RetryAfter", item: pending, outcome: rejected, changed: true,
		want: store.Item{Key: "k", State: store.ItemRejected, EligibleAt: pending.EligibleAt, RunID: "r2", RequestID: "q2",
			Rejects: 1, Reason: "wrong language", RetryAt: at.Add(time.Minute)},
	}, {
		name: "rejected once, rejected again: parked at MaxRejects", item: rejectedOnce, outcome: rejected, changed: true,
		want: store.Item{Key: "k", State: store.ItemParked, EligibleAt: pending.EligibleAt, ProcessedAt: at, RunID: "r2", RequestID: "q2",
			Rejects: 2, Reason: "wrong language"},
	}, {
		name: "rejected once, saved: keeps why it was rejected", item: rejectedOnce, outcome: saved, changed: true,
		want: store.Item{Key: "k", State: store.ItemSaved, EligibleAt: pending.EligibleAt, ProcessedAt: at, RunID: "r2", RequestID: "q2",
			Rejects: 1, Reason: "too long"},
	}, {
		name: "settled by this batch already", outcome: rejected,
		item: func() store.Item { it := rejectedOnce; it.RunID, it.RequestID = "r2", "q2"; return it }(),
		want: func() store.Item { it := rejectedOnce; it.RunID, it.RequestID = "r2", "q2"; return it }(),
	}, {
		name: "saved is final", outcome: rejected,
		item: store.Item{Key: "k", State: store.ItemSaved, ProcessedAt: at.Add(-time.Minute), RunID: "r1", RequestID: "q1"},
		want: store.Item{Key: "k", State: store.ItemSaved, ProcessedAt: at.Add(-time.Minute), RunID: "r1", RequestID: "q1"},
	}, {
		name: "parked is final", outcome: saved,
		item: store.Item{Key: "k", State: store.ItemParked, ProcessedAt: at.Add(-time.Minute), Rejects: 2, Reason: "x"},
		want: store.Item{Key: "k", State: store.ItemParked, ProcessedAt: at.Add(-time.Minute), Rejects: 2, Reason: "x"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, changed := settled(tc.item, tc.outcome, s)
			if got != tc.want || changed != tc.changed {
				t.Fatalf("settled = %+v, %v\nwant      %+v, %v", got, changed, tc.want, tc.changed)
			}
		})
	}
}

func TestCheckSettlement(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 10, 18, 7, 1, 49, 123_456_789, time.UTC)
	in := store.Settlement{Backfill: "titles", RunID: "r", RequestID: "q", At: at, MaxRejects: 1, Then: []string{"tags", "summaries", "tags"},
		Outcomes: []store.Outcome{{Key: "b", Reason: strings.Repeat("é", 600)}, {Key: "a", Saved: true, Reason: "ignored"}}}
	got, err := checkSettlement(in)
	if err != nil {
		t.Fatal(err)
	}
	if got.Outcomes[0] != (store.Outcome{Key: "a", Saved: true}) || got.Outcomes[1].Key != "b" || got.Outcomes[1].Reason != strings.Repeat("é", 512) {
		t.Errorf("outcomes = %.80v, want a saved without reason, then b with its reason cut to 1,024 bytes", got.Outcomes)
	}
	if strings.Join(got.Then, ",") != "summaries,tags" || !got.At.Equal(at.Truncate(time.Millisecond)) {
		t.Errorf("Then %v, At %s: want sorted once, at the millisecond", got.Then, got.At)
	}
	if in.Outcomes[0].Key != "b" {
		t.Error("checkSettlement sorted its caller's outcomes")
	}
}

func TestText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in    string
		limit int
		want  string
	}{
		{"short", 10, "short"},
		{"abcdef", 3, "abc"},
		{"aé", 2, "a"}, // not half an é
		{"a\x00b", 10, "a\uFFFDb"},
		{"a\xff\xfeb", 10, "a\uFFFDb"},
		{"\x00\x00", 4, "\uFFFD"},
	} {
		if got := text(tc.in, tc.limit); got != tc.want {
			t.Errorf("text(%q, %d) = %q, want %q", tc.in, tc.limit, got, tc.want)
		}
	}
}

func TestCheckName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, want string
	}{
		{"titles", ""},
		{strings.Repeat("é", 128), ""},
		{"", "empty key"},
		{strings.Repeat("é", 129), `key of 258 bytes is over the limit of 256: "` + strings.Repeat("é", 24) + `"…`},
		{"a\x00", `key "a\x00" is not UTF-8 without NUL`},
		{"\xc3", `key "\xc3" is not UTF-8 without NUL`},
	} {
		err := checkName("key", tc.in, 256)
		if (err == nil) != (tc.want == "") || (err != nil && err.Error() != tc.want) {
			t.Errorf("checkName(%.20q) = %v, want %q", tc.in, err, tc.want)
		}
	}
}
