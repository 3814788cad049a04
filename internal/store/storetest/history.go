package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/store"
)

// exerciseHistory checks the config versions and the flows' samples.
func exerciseHistory(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	hour := func(h float64) time.Time { return base.Add(time.Duration(h * float64(time.Hour))) }

	t.Run("RecordConfigOncePerChange", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		if got := mustConfigVersions(t, s, time.Time{}); got == nil || len(got) != 0 {
			t.Fatalf("ConfigVersions of a new database = %#v, want an empty list", got)
		}
		app1 := version("app", "h1", hour(0))
		for i, step := range []struct {
			v    store.ConfigVersion
			want bool
		}{
			{app1, true},
			{version("app", "h1", hour(1)), false},    // a restart, unchanged
			{version("gateway", "h1", hour(1)), true}, // another source's latest is its own
			{version("app", "h2", hour(2)), true},     // changed
			{version("app", "h1", hour(3)), true},     // changed back
			{version("app", "h1", hour(4)), false},    // unchanged again
			// Two in one millisecond: the later recorded is the latest.
			{version("gateway", "hA", hour(5)), true},
			{version("gateway", "hB", hour(5)), true},
			{version("gateway", "hB", hour(5)), false},
			{version("gateway", "hA", hour(5)), true},
			// Recorded late with an earlier time: the latest by time is
			// still app's h1 of hour 3, which decides what follows.
			{version("app", "h9", hour(-1)), true},
			{version("app", "h1", hour(6)), false},
		} {
			got, err := s.RecordConfig(ctx, step.v)
			if err != nil || got != step.want {
				t.Fatalf("step %d: RecordConfig(%s, %s at %s) = %v, %v; want %v", i, step.v.Source, step.v.Hash, showTime(step.v.At), got, err, step.want)
			}
		}
		all := []store.ConfigVersion{
			version("app", "h9", hour(-1)), app1, version("gateway", "h1", hour(1)), version("app", "h2", hour(2)), version("app", "h1", hour(3)),
			version("gateway", "hA", hour(5)), version("gateway", "hB", hour(5)), version("gateway", "hA", hour(5)),
		}
		for _, tc := range []struct {
			since time.Time
			want  []store.ConfigVersion
		}{
			{time.Time{}, all},
			{hour(-2), all},
			// Each source's last before since comes first: app's h2 of
			// hour 2, gateway's h1 of hour 1.
			{hour(2.5), all[2:]},
			// since is inclusive: app's h1 of hour 3 is in the window,
			// and the one before it is in effect at its start.
			{hour(3), all[2:]},
			{hour(3).Add(time.Millisecond), []store.ConfigVersion{all[2], all[4], all[5], all[6], all[7]}},
			// After every version: the one in effect of each source.
			{hour(24), []store.ConfigVersion{all[4], all[7]}},
		} {
			assertVersions(t, tc.since, mustConfigVersions(t, s, tc.since), tc.want)
		}
	})

	t.Run("ConfigVersionValuesRoundTrip", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		tokyo := time.FixedZone("JST", 9*3600)
		// Spaces, key order and escapes stay as written: the Config comes
		// back byte for byte.
		config := `{ "limits": {"tpm": 6000, "rpm":30},
  "flows": ["titles", "summaries"], "note": "\u00e9 \"quoted\" ✓", "weights": {"b": 1, "a": 2.5e0} }`
		v := store.ConfigVersion{At: time.Date(2026, 10, 19, 8, 1, 0, 999_999_999, tokyo), Source: "app", Hash: "9f86d081884c7d65",
			Code: "v1.4.0 (8184a51, modified)", Config: json.RawMessage(config)}
		mustRecordConfig(t, s, v, true)
		// The largest Config, a JSON string of MaxConfigBytes.
		big := store.ConfigVersion{At: base, Source: "gateway", Hash: "big", Config: json.RawMessage(`"` + strings.Repeat("x", store.MaxConfigBytes-2) + `"`)}
		mustRecordConfig(t, s, big, true)
		// Code is cut like a reason: 1 + 2×600 bytes, cut inside an "é";
		// a NUL and invalid UTF-8 become U+FFFD.
		long := store.ConfigVersion{At: base.Add(time.Second), Source: "app", Hash: "long", Code: "a" + strings.Repeat("é", 600), Config: json.RawMessage(`null`)}
		mustRecordConfig(t, s, long, true)
		odd := store.ConfigVersion{At: base.Add(2 * time.Second), Source: `app'"; --`, Hash: "odd", Code: "dev\x00\xff", Config: json.RawMessage(`[]`)}
		mustRecordConfig(t, s, odd, true)
		long.Code = "a" + strings.Repeat("é", 511)
		odd.Code = "dev\uFFFD\uFFFD"
		v.At = utcMillis(v.At)
		assertVersions(t, time.Time{}, mustConfigVersions(t, s, time.Time{}), []store.ConfigVersion{big, long, odd, v})
	})

	t.Run("RecordConfigConcurrentRecordsOnce", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		// Round after round, every process restarts with the same new
		// version: one of them records it.
		const workers, rounds = 8, 20
		for r := range rounds {
			hash := fmt.Sprintf("v%d", r)
			var recorded atomic.Int32
			together(t, workers, func(w int) error {
				ok, err := s.RecordConfig(ctx, version("app", hash, base.Add(time.Duration(r)*time.Minute+time.Duration(w)*time.Millisecond)))
				if ok {
					recorded.Add(1)
				}
				return err
			})
			if n := recorded.Load(); n != 1 {
				t.Fatalf("round %d: %d of %d processes recorded the same version, want exactly 1", r, n, workers)
			}
		}
		if got := mustConfigVersions(t, s, time.Time{}); len(got) != rounds {
			t.Fatalf("%d versions after %d rounds of concurrent records, want %d", len(got), rounds, rounds)
		}
	})

	t.Run("RecordConfigRefusesBadInput", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		long := strings.Repeat("n", store.MaxKeyBytes+1)
		bad := func(change func(*store.ConfigVersion)) store.ConfigVersion {
			v := version("app", "h1", base)
			change(&v)
			return v
		}
		// The words are part of the contract: both drivers say the same.
		for _, tc := range []struct {
			call string
			v    store.ConfigVersion
			want string
		}{
			{"without source", bad(func(v *store.ConfigVersion) { v.Source = "" }), "record config version: empty source"},
			{"with a long source", bad(func(v *store.ConfigVersion) { v.Source = long }),
				`record config version: source of 257 bytes is over the limit of 256: "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn"…`},
			{"with a NUL in the source", bad(func(v *store.ConfigVersion) { v.Source = "a\x00p" }), `record config version: source "a\x00p" is not UTF-8 without NUL`},
			{"without hash", bad(func(v *store.ConfigVersion) { v.Hash = "" }), "record config version of app: empty hash"},
			{"with a long hash", bad(func(v *store.ConfigVersion) { v.Hash = long }),
				`record config version of app: hash of 257 bytes is over the limit of 256: "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn"…`},
			{"with a hash not UTF-8", bad(func(v *store.ConfigVersion) { v.Hash = "\xff" }), `record config version of app: hash "\xff" is not UTF-8 without NUL`},
			{"at the zero time", bad(func(v *store.ConfigVersion) { v.At = time.Time{} }), "record config version of app: zero time"},
			{"without Config", bad(func(v *store.ConfigVersion) { v.Config = nil }), "record config version of app: empty config"},
			{"with a Config not JSON", bad(func(v *store.ConfigVersion) { v.Config = json.RawMessage(`{"tpm": 6000`) }),
				`record config version of app: config is not valid JSON: "{\"tpm\": 6000"`},
			{"with two JSON values", bad(func(v *store.ConfigVersion) { v.Config = json.RawMessage(`{} {}`) }),
				`record config version of app: config is not valid JSON: "{} {}"`},
			{"with a Config not UTF-8", bad(func(v *store.ConfigVersion) { v.Config = json.RawMessage("\"\xff\"") }), "record config version of app: config is not UTF-8"},
			{"with a Config over the limit", bad(func(v *store.ConfigVersion) {
				v.Config = json.RawMessage(`"` + strings.Repeat("x", store.MaxConfigBytes-1) + `"`)
			}), "record config version of app: config of 1048577 bytes is over the limit of 1048576"},
		} {
			got, err := s.RecordConfig(ctx, tc.v)
			if got || err == nil || err.Error() != tc.want {
				t.Errorf("RecordConfig %s = %v, %v; want false, %q", tc.call, got, err, tc.want)
			}
		}
		// Nothing refused was written.
		if got := mustConfigVersions(t, s, time.Time{}); len(got) != 0 {
			t.Fatalf("versions after refused records: %+v", got)
		}
	})

	t.Run("SamplesRecordThenRead", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		if got := mustSamples(t, s, time.Time{}, hour(1000), ""); got == nil || len(got) != 0 {
			t.Fatalf("Samples of a new database = %#v, want an empty list", got)
		}
		minute := func(m int) time.Time { return base.Add(time.Duration(m) * time.Minute) }
		// Byte order: upper case before lower, "Ä" (0xC3 0x84) after every
		// ASCII letter, whatever the database's collation.
		a1 := sample("alpha", "app", minute(1), 10)
		a1.State, a1.Remaining, a1.Admitted, a1.Tokens = "progressing", 90, 3, 4096
		a2 := sample("alpha", "app", minute(2), 0)
		a2.State, a2.Reason = "waiting-for-quota", "waiting on tpm until 08:01:40Z"
		a2.Rejections, a2.Refusals = map[string]int64{"tpm": 2, "otpm": 1}, map[string]int64{"tpd": 1}
		ag := sample("alpha", "gateway", minute(1), 5)
		z1 := sample("Zeta", "app", minute(1), 1)
		u1 := sample("Äpfel", "app", minute(1), 1)
		u2 := sample("Äpfel", "app", minute(3), 1<<62+7)
		u2.Remaining, u2.Admitted, u2.Tokens = 1<<62+9, 1<<40, 1<<62
		u2.Rejections = map[string]int64{"tpm": 0, "rpm": 1 << 50} // a zero count is kept
		mustRecordSamples(t, s, u2, a2, ag, u1, z1, a1)
		all := []store.Sample{z1, a1, ag, u1, a2, u2}
		assertSamples(t, mustSamples(t, s, minute(0), minute(10), ""), all...)
		assertSamples(t, mustSamples(t, s, minute(0), minute(10), "alpha"), a1, ag, a2)
		assertSamples(t, mustSamples(t, s, minute(0), minute(10), "Äpfel"), u1, u2)
		if got := mustSamples(t, s, minute(0), minute(10), "nobody"); got == nil || len(got) != 0 {
			t.Fatalf("Samples of an unknown flow = %#v, want an empty list", got)
		}
		// since is inclusive, until exclusive.
		assertSamples(t, mustSamples(t, s, minute(1), minute(2), ""), z1, a1, ag, u1)
		assertSamples(t, mustSamples(t, s, minute(2), minute(3), ""), a2)
		assertSamples(t, mustSamples(t, s, minute(2), minute(3).Add(time.Millisecond), "Äpfel"), u2)
		assertSamples(t, mustSamples(t, s, minute(1).Add(time.Millisecond), minute(2), ""))
		assertSamples(t, mustSamples(t, s, minute(3), minute(1), "")) // an empty window
	})

	t.Run("SamplesAddUpOnTheSameKey", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		first := sample("titles", "app", base, 10)
		first.State, first.Reason, first.Remaining, first.Admitted = "failing", "provider down", 9, 1
		first.Rejections, first.Refusals = map[string]int64{"tpm": 1, "rpm": 0}, map[string]int64{"tpd": 2}
		other := sample("titles", "gateway", base, 7)
		mustRecordSamples(t, s, first, other)
		// Another process's sample of the same (flow, source, at): the
		// counts add up, limit by limit; the state, its reason and what
		// remains are the later one's. Another source's stays its own.
		again := sample("titles", "app", base, 12)
		again.State, again.Remaining, again.Admitted, again.Tokens = "progressing", 3, 4, 5
		again.Rejections = map[string]int64{"tpm": 2, "otpm": 1}
		mustRecordSamples(t, s, again)
		both := again
		both.Done, both.Admitted = 22, 5
		both.Rejections, both.Refusals = map[string]int64{"tpm": 3, "otpm": 1, "rpm": 0}, map[string]int64{"tpd": 2}
		assertSamples(t, mustSamples(t, s, base, base.Add(time.Minute), ""), both, other)
		// Within one call, the samples of a key add up in the order given.
		x, y := sample("titles", "app", base, 1), sample("titles", "app", base, 2)
		y.State, y.Tokens = "idle", 1<<62
		z := sample("titles", "app", base, 0)
		z.State, z.Tokens = "done", 1<<62 // the sum saturates
		mustRecordSamples(t, s, x, sample("a", "app", base, 3), y, z)
		all := both
		all.Done, all.State, all.Remaining, all.Tokens = 25, "done", 0, math.MaxInt64
		assertSamples(t, mustSamples(t, s, base, base.Add(time.Minute), ""), sample("a", "app", base, 3), all, other)
		// No samples is nothing to do.
		for _, none := range [][]store.Sample{nil, {}} {
			if err := s.RecordSamples(ctx, none); err != nil {
				t.Fatalf("RecordSamples(%#v): %v", none, err)
			}
		}
	})

	t.Run("SamplesCountASharedJobsProgressOnce", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		mustStartJob(t, s, "titles", base)
		minute := func(m int, ms int) time.Time {
			return base.Add(time.Duration(m)*time.Minute + time.Duration(ms)*time.Millisecond)
		}
		// Two processes sample the job's progress, each from its own
		// readings of the items done: a from 100 to 150, b from 120 (read
		// before a's sample) to 160, then a to 200 and b to 190 (read just
		// before a's second). Each records what lies above the job's mark.
		shared := func(at time.Time, from, to int64) store.Sample {
			smp := sample("titles", "app", at, to-from)
			smp.DoneFrom, smp.DoneTo = from, to
			return smp
		}
		recorded := func(smp store.Sample, done int64) store.Sample {
			smp.Done, smp.DoneFrom, smp.DoneTo = done, 0, 0
			return smp
		}
		a1, b1, a2, b2 := shared(minute(1, 0), 100, 150), shared(minute(1, 1), 120, 160), shared(minute(2, 0), 150, 200), shared(minute(2, 1), 160, 190)
		// A flow that is no job, and a sample that gives no readings, keep
		// their Done.
		other := sample("other", "app", minute(1, 0), 5)
		other.DoneFrom, other.DoneTo = 1, 6
		gw := sample("titles", "gateway", minute(1, 0), 7)
		for _, smp := range []store.Sample{a1, b1, a2, b2} {
			mustRecordSamples(t, s, smp)
		}
		mustRecordSamples(t, s, other, gw)
		assertSamples(t, mustSamples(t, s, base, minute(10, 0), "titles"),
			recorded(a1, 50), recorded(gw, 7), recorded(b1, 10), recorded(a2, 40), recorded(b2, 0))
		assertSamples(t, mustSamples(t, s, base, minute(10, 0), "other"), recorded(other, 5))
		// A second sample of a's key, as another process of the same
		// source records in the same millisecond, claims only above the
		// mark and adds to the first: the samples count the job's
		// progress from 100 to 210 once, 110 in all.
		mustRecordSamples(t, s, shared(minute(2, 0), 150, 210))
		assertSamples(t, mustSamples(t, s, minute(2, 0), minute(2, 1), "titles"), recorded(a2, 50))
		var done int64
		for _, smp := range mustSamples(t, s, base, minute(10, 0), "titles") {
			if smp.Source == "app" {
				done += smp.Done
			}
		}
		if done != 110 {
			t.Fatalf("the samples of the job count %d items done, want 110: from 100 to 210, once", done)
		}
	})

	t.Run("SamplesNilAndEmptyMapsAreTheSame", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		empty := sample("titles", "app", base, 1)
		empty.Rejections, empty.Refusals = map[string]int64{}, nil
		mustRecordSamples(t, s, empty)
		got := mustSamples(t, s, base, base.Add(time.Second), "titles")
		if len(got) != 1 || got[0].Rejections != nil || got[0].Refusals != nil {
			t.Fatalf("a sample with an empty and a nil map came back as %#v, want both nil", got)
		}
	})

	t.Run("SampleTimesAndReasons", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		tokyo := time.FixedZone("JST", 9*3600)
		at := time.Date(2026, 10, 19, 8, 1, 0, 123_999_999, tokyo) // stored as .123 UTC
		var in []store.Sample
		for i, reason := range []string{
			"a" + strings.Repeat("é", 600), // 1 + 2×600 bytes: the cut falls inside an "é"
			strings.Repeat("x", store.MaxReasonBytes),
			"bad\x00utf\xff8",
		} {
			smp := sample(fmt.Sprintf("f%d", i), "app", at, 1)
			smp.State, smp.Reason = "failing", reason
			in = append(in, smp)
		}
		mustRecordSamples(t, s, in...)
		in[0].Reason = "a" + strings.Repeat("é", 511)
		in[2].Reason = "bad\uFFFDutf\uFFFD8"
		for i := range in {
			in[i].At = utcMillis(at)
		}
		// since and until compare at the stored precision: .123999999 is
		// .123, so the samples are at or after it, and not before it.
		assertSamples(t, mustSamples(t, s, at, at.Add(time.Millisecond), ""), in...)
		assertSamples(t, mustSamples(t, s, at.Add(-time.Hour), at, ""))
	})

	t.Run("PruneHistory", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		var all []store.Sample
		for i := range 5 {
			for _, flow := range []string{"summaries", "titles"} {
				all = append(all, sample(flow, "app", hour(float64(i)), int64(i)))
			}
		}
		mustRecordSamples(t, s, all...)
		mustRecordConfig(t, s, version("app", "h1", hour(-10)), true)
		mustRecordConfig(t, s, version("app", "h2", hour(1)), true)
		// before is exclusive: the samples at exactly hour 2 stay.
		if n, err := s.PruneHistory(ctx, hour(2)); err != nil || n != 4 {
			t.Fatalf("PruneHistory = %d, %v; want 4, nil", n, err)
		}
		assertSamples(t, mustSamples(t, s, time.Time{}, hour(100), ""), all[4:]...)
		if n, err := s.PruneHistory(ctx, hour(2)); err != nil || n != 0 {
			t.Fatalf("second PruneHistory = %d, %v; want 0, nil", n, err)
		}
		// More than one transaction's batch: every one before goes,
		// none after.
		var many []store.Sample
		for i := range 2_345 {
			many = append(many, sample("titles", "app", hour(10).Add(time.Duration(i)*time.Second), int64(i)))
		}
		mustRecordSamples(t, s, many...)
		if n, err := s.PruneHistory(ctx, hour(10).Add(2_000*time.Second)); err != nil || n != 2_000+int64(len(all)-4) {
			t.Fatalf("PruneHistory of 2,006 = %d, %v; want 2,006, nil", n, err)
		}
		if left := mustSamples(t, s, time.Time{}, hour(1000), ""); len(left) != 345 || !left[0].At.Equal(hour(10).Add(2_000*time.Second)) {
			t.Fatalf("%d samples left: want 345, from %v", len(left), hour(10).Add(2_000*time.Second))
		}
		// Config versions are kept, however old.
		assertVersions(t, hour(2), mustConfigVersions(t, s, hour(2)), []store.ConfigVersion{version("app", "h2", hour(1))})
		assertVersions(t, time.Time{}, mustConfigVersions(t, s, time.Time{}),
			[]store.ConfigVersion{version("app", "h1", hour(-10)), version("app", "h2", hour(1))})
	})

	t.Run("RecordSamplesRefusesBadInput", func(t *testing.T) {
		t.Parallel()
		s := open(t)
		long := strings.Repeat("n", store.MaxKeyBytes+1)
		good := sample("titles", "app", base, 1)
		bad := func(change func(*store.Sample)) store.Sample {
			smp := sample("titles", "app", base.Add(time.Minute), 1)
			change(&smp)
			return smp
		}
		// The words are part of the contract: both drivers say the same.
		for _, tc := range []struct {
			call string
			smp  store.Sample
			want string
		}{
			{"without flow", bad(func(smp *store.Sample) { smp.Flow = "" }), "record samples: sample 1: empty flow"},
			{"with a long flow", bad(func(smp *store.Sample) { smp.Flow = long }),
				`record samples: sample 1: flow of 257 bytes is over the limit of 256: "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn"…`},
			{"with a flow not UTF-8", bad(func(smp *store.Sample) { smp.Flow = "\xff" }), `record samples: sample 1: flow "\xff" is not UTF-8 without NUL`},
			{"without source", bad(func(smp *store.Sample) { smp.Source = "" }), "record samples: sample 1: empty source"},
			{"with a NUL in the source", bad(func(smp *store.Sample) { smp.Source = "a\x00" }), `record samples: sample 1: source "a\x00" is not UTF-8 without NUL`},
			{"with a long state", bad(func(smp *store.Sample) { smp.State = long }),
				`record samples: sample 1: state of 257 bytes is over the limit of 256: "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn"…`},
			{"at the zero time", bad(func(smp *store.Sample) { smp.At = time.Time{} }), "record samples: sample 1: zero time"},
			{"with a negative Done", bad(func(smp *store.Sample) { smp.Done = -1 }), "record samples: sample 1: Done -1 is negative"},
			{"with a negative Remaining", bad(func(smp *store.Sample) { smp.Remaining = -2 }), "record samples: sample 1: Remaining -2 is negative"},
			{"with a negative Admitted", bad(func(smp *store.Sample) { smp.Admitted = -3 }), "record samples: sample 1: Admitted -3 is negative"},
			{"with a negative Tokens", bad(func(smp *store.Sample) { smp.Tokens = -4 }), "record samples: sample 1: Tokens -4 is negative"},
			{"with an empty limit name", bad(func(smp *store.Sample) { smp.Rejections = map[string]int64{"tpm": 1, "": 1} }),
				"record samples: sample 1: empty limit name in Rejections"},
			{"with a long limit name", bad(func(smp *store.Sample) { smp.Refusals = map[string]int64{long: 1} }),
				`record samples: sample 1: limit name in Refusals of 257 bytes is over the limit of 256: "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn"…`},
			{"with a negative rejection count", bad(func(smp *store.Sample) { smp.Rejections = map[string]int64{"tpm": -1} }),
				`record samples: sample 1: count -1 of Rejections["tpm"] is negative`},
			{"with a negative refusal count", bad(func(smp *store.Sample) { smp.Refusals = map[string]int64{"tpd": -2} }),
				`record samples: sample 1: count -2 of Refusals["tpd"] is negative`},
		} {
			// A good sample first: a refused batch writes none of it.
			if err := s.RecordSamples(ctx, []store.Sample{good, tc.smp}); err == nil || err.Error() != tc.want {
				t.Errorf("RecordSamples %s: error = %v, want %q", tc.call, err, tc.want)
			}
		}
		if _, err := s.Samples(ctx, base, base, "\xff"); err == nil || err.Error() != `list samples: flow "\xff" is not UTF-8 without NUL` {
			t.Errorf("Samples of a flow not UTF-8: error = %v", err)
		}
		if _, err := s.Samples(ctx, base, base, long); err == nil || !strings.HasPrefix(err.Error(), "list samples: flow of 257 bytes is over the limit of 256") {
			t.Errorf("Samples of a long flow: error = %v", err)
		}
		assertSamples(t, mustSamples(t, s, time.Time{}, hour(100), ""))
	})
}

// BenchmarkHistory measures Samples over a 48-hour window of an app of
// 100 flows sampled every minute (288,000 samples), with a week of them
// stored: every flow's window, and one flow's. Fill records the week
// once, by RecordSamples of an hour's 6,000 samples a call (the health
// monitor records a minute's at a time; the fill only sets the stage),
// and reports the time it took.
func BenchmarkHistory(b *testing.B, s store.Store) {
	ctx := context.Background()
	const flows, minutes, window = 100, 7 * 24 * 60, 48 * 60
	start := base.Truncate(time.Minute)
	at := func(m int) time.Time { return start.Add(time.Duration(m) * time.Minute) }
	var fill time.Duration
	b.Run("FillWeek", func(b *testing.B) {
		if fill == 0 {
			began := time.Now()
			batch := make([]store.Sample, 0, 60*flows)
			for m := range minutes {
				for f := range flows {
					batch = append(batch, store.Sample{At: at(m), Flow: fmt.Sprintf("flow-%03d", f), Source: "app", State: "progressing",
						Done: int64(m % 50), Remaining: 1000, Admitted: 5, Tokens: 4096, Rejections: map[string]int64{"tpm": int64(m % 3)}})
				}
				if len(batch) == cap(batch) || m == minutes-1 {
					if err := s.RecordSamples(ctx, batch); err != nil {
						b.Fatal(err)
					}
					batch = batch[:0]
				}
			}
			fill = time.Since(began)
		}
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(fill.Seconds(), "s/fill")
	})
	since, until := at(minutes-window), at(minutes)
	b.Run("Samples48hAllFlows", func(b *testing.B) {
		for b.Loop() {
			got, err := s.Samples(ctx, since, until, "")
			if err != nil || len(got) != flows*window {
				b.Fatalf("Samples = %d samples, %v; want %d", len(got), err, flows*window)
			}
		}
	})
	b.Run("Samples48hOneFlow", func(b *testing.B) {
		for b.Loop() {
			got, err := s.Samples(ctx, since, until, "flow-042")
			if err != nil || len(got) != window {
				b.Fatalf("Samples = %d samples, %v; want %d", len(got), err, window)
			}
		}
	})
}

// historyCalls calls every method on the history once, with good input,
// and yields what each call does, as its error names it, with the error.
func historyCalls(ctx context.Context, s store.Store) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		for _, c := range []struct {
			op  string
			err error
		}{
			{"record config version of app", second(s.RecordConfig(ctx, version("app", "h1", base)))},
			{"list config versions", second(s.ConfigVersions(ctx, base))},
			{"record samples", s.RecordSamples(ctx, []store.Sample{sample("titles", "app", base, 1)})},
			{"list samples", second(s.Samples(ctx, base, base.Add(time.Hour), ""))},
			{"list samples of titles", second(s.Samples(ctx, base, base.Add(time.Hour), "titles"))},
			{"prune history", second(s.PruneHistory(ctx, base))},
		} {
			if !yield(c.op, c.err) {
				return
			}
		}
	}
}

// version is source's version hash at at, with a Code and Config of its
// own.
func version(source, hash string, at time.Time) store.ConfigVersion {
	return store.ConfigVersion{At: at, Source: source, Hash: hash, Code: "v1.0.0-" + hash,
		Config: json.RawMessage(fmt.Sprintf(`{"source":%q,"hash":%q}`, source, hash))}
}

// sample is flow's sample of source at at that processed done items.
func sample(flow, source string, at time.Time, done int64) store.Sample {
	return store.Sample{At: at, Flow: flow, Source: source, Done: done}
}

func mustRecordConfig(t *testing.T, s store.Store, v store.ConfigVersion, want bool) {
	t.Helper()
	got, err := s.RecordConfig(context.Background(), v)
	if err != nil || got != want {
		t.Fatalf("RecordConfig(%s, %s) = %v, %v; want %v", v.Source, v.Hash, got, err, want)
	}
}

func mustConfigVersions(t *testing.T, s store.Store, since time.Time) []store.ConfigVersion {
	t.Helper()
	vs, err := s.ConfigVersions(context.Background(), since)
	if err != nil {
		t.Fatalf("ConfigVersions(%s): %v", showTime(since), err)
	}
	return vs
}

func mustRecordSamples(t *testing.T, s store.Store, samples ...store.Sample) {
	t.Helper()
	if err := s.RecordSamples(context.Background(), samples); err != nil {
		t.Fatalf("RecordSamples(%d samples): %v", len(samples), err)
	}
}

func mustSamples(t *testing.T, s store.Store, since, until time.Time, flow string) []store.Sample {
	t.Helper()
	got, err := s.Samples(context.Background(), since, until, flow)
	if err != nil {
		t.Fatalf("Samples(%s, %s, %q): %v", showTime(since), showTime(until), flow, err)
	}
	return got
}

// assertVersions checks got, the versions since since, against want,
// times compared as instants and required in UTC, Configs byte for byte.
func assertVersions(t *testing.T, since time.Time, got, want []store.ConfigVersion) {
	t.Helper()
	show := func(vs []store.ConfigVersion) string {
		var b strings.Builder
		for _, v := range vs {
			fmt.Fprintf(&b, "\n  %s %s %s code %.40q (%d bytes) config %.60q (%d bytes)", showTime(v.At), v.Source, v.Hash, v.Code, len(v.Code), v.Config, len(v.Config))
		}
		return b.String()
	}
	want = slices.Clone(want)
	for i := range want {
		want[i].At = utcMillis(want[i].At)
	}
	if g, w := show(got), show(want); g != w {
		t.Fatalf("versions since %s:%s\nwant:%s", showTime(since), g, w)
	}
	for i := range want {
		if string(got[i].Config) != string(want[i].Config) || got[i].Code != want[i].Code {
			t.Fatalf("version %d since %s: code %q config %q, want %q %q", i, showTime(since), got[i].Code, got[i].Config, want[i].Code, want[i].Config)
		}
	}
}

// assertSamples checks got against want, times compared as instants and
// required in UTC, and the maps of counts and the budgets nil when empty.
func assertSamples(t *testing.T, got []store.Sample, want ...store.Sample) {
	t.Helper()
	counts := func(m map[string]int64) string {
		if m == nil {
			return "nil"
		}
		return fmt.Sprint(m)
	}
	show := func(samples []store.Sample) string {
		var b strings.Builder
		for _, smp := range samples {
			fmt.Fprintf(&b, "\n  %s %s/%s %q %.40q (%d bytes) done %d remaining %d admitted %d tokens %d rejections %s refusals %s money %d priced %v budgets %+v",
				showTime(smp.At), smp.Flow, smp.Source, smp.State, smp.Reason, len(smp.Reason), smp.Done, smp.Remaining, smp.Admitted, smp.Tokens,
				counts(smp.Rejections), counts(smp.Refusals), smp.Money, smp.Priced, smp.Budgets)
		}
		return b.String()
	}
	want = slices.Clone(want)
	for i := range want {
		want[i].At = utcMillis(want[i].At)
		if len(want[i].Rejections) == 0 {
			want[i].Rejections = nil
		}
		if len(want[i].Refusals) == 0 {
			want[i].Refusals = nil
		}
		if len(want[i].Budgets) == 0 {
			want[i].Budgets = nil
		}
	}
	if g, w := show(got), show(want); g != w {
		t.Fatalf("samples:%s\nwant:%s", g, w)
	}
	for i := range want {
		if got[i].Reason != want[i].Reason {
			t.Fatalf("sample %d reason %q, want %q", i, got[i].Reason, want[i].Reason)
		}
	}
}
