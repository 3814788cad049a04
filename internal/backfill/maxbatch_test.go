package backfill

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/sim"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/llm"
)

// itemText is how the bench's items appear in a request.
var itemText = regexp.MustCompile(`text of (k\d+)`)

// batchSizes passes calls to a simulated provider and records how many
// items each call carried.
type batchSizes struct {
	sim *sim.Server

	mu    sync.Mutex
	sizes []int // each call's items, in the order calls came
}

// around makes p the handler in front of s.
func (p *batchSizes) around(s *sim.Server) http.Handler {
	p.sim = s
	return p
}

func (p *batchSizes) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	p.sizes = append(p.sizes, len(itemText.FindAllString(string(body), -1)))
	p.mu.Unlock()
	r.Body = io.NopCloser(bytes.NewReader(body))
	p.sim.ServeHTTP(w, r)
}

// A batch never carries more than MaxBatch items — not a lane's later
// batches, nor those with rejected items due again — and a Parse that
// gives exactly one output per item of so many is never refused a batch:
// every item is saved once.
func TestBackfillKeepsToMaxBatch(t *testing.T) {
	t.Parallel()
	for _, maxBatch := range []int{1, 3} {
		t.Run(fmt.Sprintf("max%d", maxBatch), func(t *testing.T) {
			t.Parallel()
			testenv.Databases(t, func(t *testing.T, url string) {
				testMaxBatch(t, url, maxBatch)
			})
		})
	}
}

// testMaxBatch runs a backfill of 60 items in 4 lanes, at most maxBatch
// items a call, and checks that no call carried more.
func testMaxBatch(t *testing.T, url string, maxBatch int) {
	const n, inFlight = 60, 4
	b := setup(t, url, governor.Limits{})
	p := &batchSizes{}
	b.throughProxy(t, forecast.ModelConfig{Profile: "groq", Latency: 5 * time.Millisecond, Wire: true, Seed: 1}, p.around)
	b.add(keys(n)...)
	var mu sync.Mutex
	rejected := map[string]bool{}
	var refused []string // the batches Parse refused
	c := b.config("titles", func(k string) string {
		mu.Lock()
		defer mu.Unlock()
		// Every seventh item's first output is refused: it comes back due
		// again among the lane's later batches.
		if k[len(k)-1]%7 == 0 && !rejected[k] {
			rejected[k] = true
			return "not English"
		}
		return ""
	})
	parse := c.Parse
	c.Parse = func(resp *llm.ChatResponse, items []Item) ([]string, error) {
		// One output for one item, as a Parse written for MaxBatch 1 gives;
		// at most maxBatch outputs for a larger one.
		if maxBatch == 1 && len(items) != 1 || len(items) > maxBatch {
			mu.Lock()
			refused = append(refused, fmt.Sprintf("%d items", len(items)))
			mu.Unlock()
			return nil, fmt.Errorf("a batch of %d items: want at most %d", len(items), maxBatch)
		}
		return parse(resp, items)
	}
	c.MaxBatch, c.InFlight, c.MaxRejects, c.BatchesPerRun = maxBatch, inFlight, 3, 100
	if err := b.set.Add(c, b.p); err != nil {
		t.Fatal(err)
	}
	b.start(t)
	j := b.waitJob(t, "titles", func(j store.Job) bool { return j.Saved == n || j.ConsecutiveFailures > 0 })
	mu.Lock()
	if len(refused) > 0 {
		t.Errorf("Parse refused %d batches (%v): want none", len(refused), refused)
	}
	retried := len(rejected)
	mu.Unlock()
	if j.Saved != n || j.ConsecutiveFailures != 0 {
		t.Errorf("job %+v: want all %d saved, no failure", j, n)
	}
	for k, w := range b.writes(t, "titles") {
		if w != 1 {
			t.Errorf("item %s written %d times, want once", k, w)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	carried := 0
	for i, size := range p.sizes {
		if size < 1 || size > maxBatch {
			t.Errorf("call %d carried %d items: want 1 to %d", i, size, maxBatch)
		}
		carried += size
	}
	// Each item once, and the rejected ones once more.
	if want := n + retried; carried != want {
		t.Errorf("the calls carried %d items, want %d", carried, want)
	}
	if len(p.sizes) < 2*inFlight {
		t.Errorf("%d calls: want the lanes to make several each", len(p.sizes))
	}
}

// On a key whose day limit binds, batches still carry MaxBatch items when
// they fit: by default a batch may take governor.DefaultWithin (15 minutes) of the
// flow's share, and at the day's even pace one minute of TPD 200,000 is
// 139 tokens — less than one of these items with its output — so a batch
// cut to a minute would carry one item and repeat the prompt for each.
func TestBackfillBatchesUnderADayLimit(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		const n, maxBatch = 30, 10
		limits := governor.Limits{governor.RPM: 30, governor.TPM: 8000, governor.TPD: 200_000}
		b := setup(t, url, limits)
		p := &batchSizes{}
		b.throughProxy(t, forecast.ModelConfig{Profile: "groq", Limits: limits, Wire: true, Seed: 1}, p.around)
		b.add(keys(n)...)
		c := b.config("titles", func(string) string { return "" })
		// Each item: its text, forty words of context, and 60 output
		// tokens: about 110 tokens, 48 s of TPD 200,000 at its even pace.
		c.Request = func(items []Item) (*llm.ChatRequest, error) {
			var text strings.Builder
			for _, it := range items {
				text.Write(it.Data)
				text.WriteString(strings.Repeat(" context", 40))
				text.WriteByte('\n')
			}
			return &llm.ChatRequest{Model: "sim-model", MaxTokens: 60 * len(items),
				Messages: []llm.Message{{Role: "user", Content: "Translate each line:\n" + text.String()}}}, nil
		}
		c.MaxBatch, c.InFlight, c.BatchesPerRun = maxBatch, 1, 100
		if err := b.set.Add(c, b.p); err != nil {
			t.Fatal(err)
		}
		b.start(t)
		if j := b.waitJob(t, "titles", func(j store.Job) bool { return j.Saved == n || j.ConsecutiveFailures > 0 }); j.Saved != n {
			t.Fatalf("job %+v: want all %d saved", j, n)
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if want := []int{maxBatch, maxBatch, maxBatch}; !slices.Equal(p.sizes, want) {
			t.Errorf("the calls carried %v items: want %v, MaxBatch each", p.sizes, want)
		}
	})
}

// A batch's time at the flow's share: 15 minutes by default, a quarter of
// a shorter stall threshold, and what the backfill sets, as it is.
func TestBackfillWithinDefaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		within, stall, want time.Duration
	}{
		{0, 0, 15 * time.Minute},
		{0, 10 * time.Minute, 150 * time.Second},
		{0, 3 * time.Hour, 15 * time.Minute},
		{time.Minute, 10 * time.Minute, time.Minute},
		{time.Hour, 0, time.Hour},
	} {
		c := Config{}
		c.Within, c.StallAfter = tc.within, tc.stall
		if got := c.withDefaults().Within; got != tc.want {
			t.Errorf("Within %v, StallAfter %v: a batch's time is %v, want %v", tc.within, tc.stall, got, tc.want)
		}
	}
}
