package governor_test

import (
	"container/heap"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/govtext"
)

// TestLagCoversTransit: calls reach the provider up to a second after the
// governor admits them, as over a network. Without Lag the provider, whose
// windows count from arrival, refuses some; with Lag covering the transit it
// refuses none — under rolling and under fixed windows.
func TestLagCoversTransit(t *testing.T) {
	t.Parallel()
	for _, fixed := range []bool{false, true} {
		t.Run(govtext.WindowWord(fixed), func(t *testing.T) {
			t.Parallel()
			if n := transitRejections(t, fixed, 0); n == 0 {
				t.Fatal("with no lag and calls arriving late the provider refused nothing: the test shows nothing")
			}
			if n := transitRejections(t, fixed, time.Second); n != 0 {
				t.Fatalf("with Lag covering the transit the provider refused %d calls", n)
			}
		})
	}
}

type arrival struct {
	at  time.Time
	req forecast.Request
}

type arrivals []arrival

func (a arrivals) Len() int           { return len(a) }
func (a arrivals) Less(i, j int) bool { return a[i].at.Before(a[j].at) }
func (a arrivals) Swap(i, j int)      { a[i], a[j] = a[j], a[i] }
func (a *arrivals) Push(x any)        { *a = append(*a, x.(arrival)) }
func (a *arrivals) Pop() any {
	old := *a
	x := old[len(old)-1]
	*a = old[:len(old)-1]
	return x
}

func transitRejections(t *testing.T, fixed bool, lag time.Duration) int64 {
	limits := governor.Limits{governor.RPM: 40, governor.TPM: 20000}
	prov, err := forecast.NewModel(forecast.ModelConfig{FixedWindows: fixed, Limits: limits, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	cfg := governor.Config{Limits: limits, Lag: lag, FixedWindows: fixed}
	g, err := governor.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	start := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	var line []*governor.Reservation
	var inbound arrivals
	// Rolling: a flow always has calls waiting. Fixed: bursts of 40 calls
	// just before and just after every other minute's boundary — the
	// provider sees the first burst's late arrivals in the next window.
	want := func(since time.Duration, waiting int) int {
		if !fixed {
			return 10 - waiting
		}
		in := since % (2 * time.Minute)
		if in == 59700*time.Millisecond || in == 60100*time.Millisecond {
			return 40
		}
		return 0
	}
	for now := start; now.Before(start.Add(30 * time.Minute)); now = now.Add(100 * time.Millisecond) {
		for len(inbound) > 0 && !inbound[0].at.After(now) {
			a := heap.Pop(&inbound).(arrival)
			prov.Submit(a.at, a.req)
		}
		for range want(now.Sub(start), len(line)) {
			r, err := g.Reserve(now, "f", governor.Cost{Requests: 1, Input: int64(100 + rng.IntN(400)), Output: 100})
			if err != nil {
				t.Fatal(err)
			}
			line = append(line, r)
		}
		g.Advance(now)
		for len(line) > 0 && line[0].Admitted() {
			c := line[0].Cost()
			line = line[1:]
			transit := time.Duration(rng.Float64() * float64(time.Second))
			heap.Push(&inbound, arrival{at: now.Add(transit), req: forecast.Request{Input: c.Input, MaxTokens: c.Output, Output: 50}})
		}
	}
	return prov.Stats().Rejected
}
