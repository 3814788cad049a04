package governor

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"
	"time"
)

// FuzzParseLimits: what parses has no negative value, prints as it parsed,
// and parses back to the same Limits.
func FuzzParseLimits(f *testing.F) {
	for _, s := range []string{"rpm=30,tpm=8000,tpd=200000", " RPM = 1_000 , otpm=1", "", "tpm=-1", "tpm=+5",
		"itpm=9223372036854775807", "tpm=9223372036854775808", "rpd=1,rpd=2", "x=1", "tpm=0x10", "tpm=1,,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ls, err := parseLimits(s)
		if err != nil {
			return
		}
		for l := range NumLimits {
			if ls[l] < 0 {
				t.Fatalf("parseLimits(%q) accepted %s=%d", s, l, ls[l])
			}
		}
		again, err := parseLimits(ls.String())
		if err != nil {
			t.Fatalf("parseLimits(%q).String() = %q does not parse: %v", s, ls.String(), err)
		}
		if again != ls {
			t.Fatalf("round trip of %q: %v, then %v", s, ls, again)
		}
		if again.String() != ls.String() {
			t.Fatalf("String not stable: %q, %q", ls.String(), again.String())
		}
	})
}

// FuzzReserve feeds arbitrary cost vectors (negative, huge, wrapping) and
// clock steps to Check, Reserve and Advance. Whatever comes, nothing panics,
// Check and Reserve agree, a cost with a part outside [0, MaxCost] is refused
// with errInvalidCost, and no rolling window of any limit ever holds more
// than the limit. Steps 240 to 254 park the oldest waiting call with its
// place kept (Await) or put the oldest parked one back (Rejoin): a parked
// call is never admitted.
func FuzzReserve(f *testing.F) {
	rec := func(req, in, out int64, step uint8) []byte {
		var b [25]byte
		binary.BigEndian.PutUint64(b[0:], uint64(req))
		binary.BigEndian.PutUint64(b[8:], uint64(in))
		binary.BigEndian.PutUint64(b[16:], uint64(out))
		b[24] = step
		return b[:]
	}
	var probe []byte
	probe = append(probe, rec(1, 10, math.MaxInt64, 0)...)
	for range 20 {
		probe = append(probe, rec(1, 300, 300, 0)...)
	}
	f.Add(uint16(600), uint16(1000), uint16(0), probe)
	f.Add(uint16(5), uint16(0), uint16(500), append(rec(1, 0, math.MinInt64, 1), rec(1, math.MaxInt64, math.MaxInt64, 3)...))
	f.Add(uint16(0), uint16(4000), uint16(1000), append(rec(1, 100, 900, 10), rec(2, 1<<40, 0, 200)...))
	f.Add(uint16(30), uint16(8000), uint16(1000), append(rec(-1, 5, 5, 7), rec(1, 4000, 1000, 61)...))
	f.Add(uint16(2), uint16(0), uint16(0), append(append(append(rec(1, 0, 0, 0), rec(1, 0, 0, 0)...), rec(1, 0, 0, 250)...),
		append(rec(1, 0, 0, 100), rec(1, 0, 0, 245)...)...))

	f.Fuzz(func(t *testing.T, rpm, tpm, otpm uint16, ops []byte) {
		limits := Limits{RPM: int64(rpm), TPM: int64(tpm), OTPM: int64(otpm)}
		now := t0
		g, err := New(Config{Limits: limits, Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		type admission struct {
			at   int64
			cost Cost
		}
		var (
			waiting  []*Reservation
			parked   []*Reservation
			admitted []admission
		)
		flows := []string{"a", "b", "c"}
		for i := 0; len(ops) >= 25; i++ {
			c := Cost{
				Requests: int64(binary.BigEndian.Uint64(ops[0:])),
				Input:    int64(binary.BigEndian.Uint64(ops[8:])),
				Output:   int64(binary.BigEndian.Uint64(ops[16:])),
			}
			step := ops[24]
			ops = ops[25:]

			checkErr := g.Check(c)
			r, err := g.Reserve(now, flows[i%len(flows)], c)
			if (checkErr == nil) != (err == nil) {
				t.Fatalf("Check(%+v) = %v but Reserve = %v", c, checkErr, err)
			}
			invalid := false
			for _, v := range []int64{c.Requests, c.Input, c.Output} {
				invalid = invalid || v < 0 || v > MaxCost
			}
			if invalid != errors.Is(err, errInvalidCost) {
				t.Fatalf("Reserve(%+v) = %v", c, err)
			}
			if err == nil {
				waiting = append(waiting, r)
			}
			// Steps of up to about 25 s; step 255 cancels the oldest waiting call.
			switch {
			case step == 255 && len(waiting) > 0:
				waiting[0].Cancel(now)
				waiting = waiting[1:]
			case step >= 250 && len(waiting) > 0:
				if err := g.Await(doneCtx(), waiting[0], time.Duration(step-249)*10*time.Second); err == nil {
					break // admitted meanwhile: the loop below sees it
				} else if we, ok := errors.AsType[*WaitError](err); !ok || we.KeptUntil.IsZero() {
					t.Fatalf("Await with a done context and a keep: %v", err)
				}
				parked = append(parked, waiting[0])
				waiting = waiting[1:]
			case step >= 240 && len(parked) > 0:
				if parked[0].Rejoin(now) {
					waiting = append(waiting, parked[0])
				}
				parked = parked[1:]
			default:
				now = now.Add(time.Duration(step) * 100 * time.Millisecond)
			}
			g.Advance(now)
			for _, r := range parked {
				if r.Admitted() {
					t.Fatalf("a parked call was admitted")
				}
			}
			kept := waiting[:0]
			for _, r := range waiting {
				if r.Admitted() {
					admitted = append(admitted, admission{r.AdmittedAt().UnixNano(), r.Cost()})
				} else {
					kept = append(kept, r)
				}
			}
			waiting = kept
		}
		// Every rolling minute ending at an admission holds no more than
		// each limit, summed here in float64, not with the governor's sums.
		for i, a := range admitted {
			var sum [NumLimits]float64
			for _, b := range admitted[:i+1] {
				if b.at > a.at-int64(time.Minute) {
					for l := range NumLimits {
						sum[l] += float64(b.cost.On(l))
					}
				}
			}
			for l := range NumLimits {
				if limits[l] > 0 && sum[l] > float64(limits[l]) {
					t.Fatalf("the minute to %v holds %.0f on %s, limit %d", time.Unix(0, a.at).Sub(t0), sum[l], l, limits[l])
				}
			}
		}
		for _, st := range g.Stats(now).Limits {
			if st.Used < 0 || st.Capacity < 0 {
				t.Fatalf("stats: %+v", st)
			}
		}
	})
}
