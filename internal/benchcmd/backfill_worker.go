package benchcmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/llm"
	"github.com/sluice-dev/sluice/run"
)

// backfillWorker is the child: it runs one side and writes what it
// measured to the job's result file.
func backfillWorker(ctx context.Context, raw string) error {
	var job backfillJob
	if err := json.Unmarshal([]byte(raw), &job); err != nil {
		return fmt.Errorf("%s: %w", backfillWorkerEnv, err)
	}
	var res backfillResult
	var err error
	if job.MemProfile != "" || job.PeakProfile != "" {
		runtime.MemProfileRate = 4 << 10 // finer than the default 512 KiB: the heap is small
	}
	peak := watchHeap(job.PeakProfile)
	switch job.Side {
	case "sluice":
		res, err = backfillSluice(ctx, job)
	case "dbos":
		res, err = backfillDBOS(ctx, job)
	default:
		err = fmt.Errorf("%s: unknown side %q", backfillWorkerEnv, job.Side)
	}
	if err != nil {
		return err
	}
	objects, live := peak()
	res.PeakHeapMB, res.PeakLiveMB = float64(objects)/(1<<20), float64(live)/(1<<20)
	out, err := json.Marshal(res)
	if err != nil {
		return err
	}
	return os.WriteFile(job.Result, out, 0o600)
}

// watchHeap samples the heap every 10 ms until the returned function is
// called, which returns the most its objects took at once and the most a
// collection found live. With a path, every time a collection finds more
// live than any before it writes a heap profile there, replacing the last:
// a heap profile's in-use figures are those of the latest collection, so
// the one left is what was live at the peak.
func watchHeap(path string) func() (objects, live uint64) {
	done := make(chan struct{})
	type peaks struct{ objects, live uint64 }
	last := make(chan peaks)
	go func() {
		sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/live:bytes"}}
		var most peaks
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(sample)
			most.objects = max(most.objects, sample[0].Value.Uint64())
			if l := sample[1].Value.Uint64(); l > most.live {
				most.live = l
				if path != "" {
					writeHeapProfile(path)
				}
			}
			select {
			case <-done:
				last <- most
				return
			case <-t.C:
			}
		}
	}()
	return func() (uint64, uint64) { close(done); p := <-last; return p.objects, p.live }
}

// writeHeapProfile writes the heap profile to path; a profile that cannot
// be written is left out, as the profiles of startProfile are.
func writeHeapProfile(path string) {
	f, err := os.Create(path)
	if err != nil {
		return
	}
	defer f.Close()
	_ = pprof.Lookup("heap").WriteTo(f, 0)
}

// profiles names the files a worker writes its profiles to; empty: none.
type profiles struct{ cpu, mem, peak string }

// suffixed is path.side, or empty when path is.
func suffixed(path, side string) string {
	if path == "" {
		return ""
	}
	return path + "." + side
}

// startProfile starts the job's CPU profile, if it asks for one, and returns
// what stops it and writes the heap profile it asks for.
func startProfile(job backfillJob) (func(), error) {
	stopCPU := func() {}
	if job.CPUProfile != "" {
		f, err := os.Create(job.CPUProfile)
		if err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, err
		}
		stopCPU = func() { pprof.StopCPUProfile(); f.Close() }
	}
	return func() {
		stopCPU()
		if job.MemProfile != "" {
			writeHeapProfile(job.MemProfile)
		}
	}, nil
}

// backfillRequest is the one call for a batch: every item's text, one per
// line, and max_tokens for a short answer per item.
func backfillRequest(bodies []string) *llm.ChatRequest {
	var b strings.Builder
	for i, body := range bodies {
		fmt.Fprintf(&b, "%d. %s\n", i+1, body)
	}
	return &llm.ChatRequest{Model: "sim-model", MaxTokens: backfillTokensPerItem * len(bodies), Messages: []llm.Message{
		{Role: "system", Content: "Translate each numbered line into English; answer one line per item."},
		{Role: "user", Content: b.String()}}}
}

// splitReply gives each of n items its share of the reply's words.
func splitReply(resp *llm.ChatResponse, n int) ([]string, error) {
	if len(resp.Choices) == 0 {
		return nil, errors.New("the reply has no choices")
	}
	words := strings.Fields(resp.Choices[0].Message.Content)
	if len(words) < n {
		return nil, fmt.Errorf("the reply has %d words for %d items", len(words), n)
	}
	out := make([]string, n)
	for i := range out {
		out[i] = strings.Join(words[i*len(words)/n:(i+1)*len(words)/n], " ")
	}
	return out, nil
}

// waitBackfilled polls the app table every benchPoll until no item lacks an
// output; every second it asks failed whether the side has failed.
func waitBackfilled(ctx context.Context, db *benchDB, failed func(context.Context) error) error {
	t := time.NewTicker(benchPoll)
	defer t.Stop()
	for i := 1; ; i++ {
		var left int64
		if err := db.each(ctx, backfillLeft, nil, func(scan func(...any) error) error { return scan(&left) }); err != nil {
			return fmt.Errorf("count the items left: %w", err)
		}
		if left == 0 {
			return nil
		}
		if i%int(time.Second/benchPoll) == 0 {
			if err := failed(ctx); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// backfillSluice runs the backfill through the sluice SDK: PendingSQL lists
// the items without an output, Load reads their text with the app's own
// handle, and Save writes each output in the transaction that records it.
func backfillSluice(ctx context.Context, job backfillJob) (backfillResult, error) {
	var res backfillResult
	src, err := openBenchPool(ctx, job.DB, 4)
	if err != nil {
		return res, err
	}
	defer src.close()
	app, err := sluice.New(ctx, sluice.Config{
		DatabaseURL: job.DB, PollInterval: benchPoll, HealthEvery: time.Second, Logger: quietLogger(), AppVersion: "bench",
		Providers: []sluice.Provider{{Name: "sim", LLM: llm.Config{BaseURL: job.Provider}}},
	})
	if err != nil {
		return res, err
	}
	defer app.Stop(context.Background())
	err = sluice.RegisterBackfill(app, itemsBackfill(run.Backfill{ID: backfillID, MaxBatch: job.Batch, InFlight: job.Concurrency, PendingSQL: backfillPending}, src, nil))
	if err != nil {
		return res, err
	}
	// The store as the app's monitor reads it: for the stall check, and to
	// stop at a backfill that keeps failing.
	st, err := store.Open(ctx, job.DB)
	if err != nil {
		return res, err
	}
	defer st.Close()
	stop, err := startProfile(job)
	if err != nil {
		return res, err
	}
	start := time.Now()
	if err := app.Start(ctx); err != nil {
		stop()
		return res, err
	}
	err = waitBackfilled(ctx, src, func(ctx context.Context) error {
		j, err := st.Job(ctx, backfillID)
		if err == nil && j.ConsecutiveFailures >= 3 {
			return fmt.Errorf("the backfill failed %d runs in a row: %s", j.ConsecutiveFailures, j.LastError)
		}
		return nil
	})
	res.Seconds = time.Since(start).Seconds()
	stop()
	if err != nil {
		return res, err
	}
	if res.StallCheck, err = timeStallCheck(ctx, st); err != nil {
		return res, err
	}
	res.Flows, err = timeFlows(ctx, app, int64(job.Items))
	return res, err
}

// loadBodies reads the text of the items keys names.
func loadBodies(ctx context.Context, db *benchDB, keys []string) (map[string]string, error) {
	marks := make([]string, len(keys))
	args := make([]any, len(keys))
	for i, k := range keys {
		marks[i], args[i] = "$"+strconv.Itoa(i+1), k
	}
	out := make(map[string]string, len(keys))
	err := db.each(ctx, `SELECT id, body FROM bench_items WHERE id IN (`+strings.Join(marks, ", ")+`)`, args,
		func(scan func(...any) error) error {
			var k, body string
			if err := scan(&k, &body); err != nil {
				return err
			}
			out[k] = body
			return nil
		})
	return out, err
}

// timeStallCheck times the health evaluation the app's monitor runs every
// HealthEvery: read every job's record from the store and judge it.
func timeStallCheck(ctx context.Context, st store.Store) ([]time.Duration, error) {
	m, err := health.New(health.Config{Source: st, Thresholds: map[string]time.Duration{backfillID: health.DefaultThreshold}, Logger: quietLogger()})
	if err != nil {
		return nil, err
	}
	out := make([]time.Duration, backfillSamples)
	for i := range out {
		t := time.Now()
		if err := m.Poll(ctx); err != nil {
			return nil, err
		}
		out[i] = time.Since(t)
	}
	if v := m.Views(); len(v) != 1 || v[0].State != health.Done {
		return nil, fmt.Errorf("the stall check judged %+v, want the backfill done", v)
	}
	return out, nil
}

// timeFlows serves the app's HTTP API on loopback, waits until GET
// /v1/flows says the backfill is done with every item, then times it.
func timeFlows(ctx context.Context, app *sluice.App, items int64) ([]time.Duration, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: app.Handler(sluice.HandlerConfig{}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	u := "http://" + ln.Addr().String() + "/v1/flows"
	get := func() (health.Flow, error) {
		resp, err := http.Get(u) // #nosec G107 -- the app's own API on loopback
		if err != nil {
			return health.Flow{}, err
		}
		defer resp.Body.Close()
		var body struct{ Flows []health.Flow }
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			return health.Flow{}, fmt.Errorf("GET /v1/flows: %w", err)
		}
		if len(body.Flows) != 1 {
			return health.Flow{}, fmt.Errorf("GET /v1/flows: %d flows, want the backfill's", len(body.Flows))
		}
		return body.Flows[0], nil
	}
	// The monitor judges every second (HealthEvery).
	for deadline := time.Now().Add(30 * time.Second); ; {
		f, err := get()
		if err != nil {
			return nil, err
		}
		if f.State == health.Done && f.Done == items {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("GET /v1/flows still says %+v, want done with %d items", f, items)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	out := make([]time.Duration, backfillSamples)
	for i := range out {
		t := time.Now()
		if _, err := get(); err != nil {
			return nil, err
		}
		out[i] = time.Since(t)
	}
	return out, nil
}
