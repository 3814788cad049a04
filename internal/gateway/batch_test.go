package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/clock"
	"github.com/sluice-dev/sluice/internal/gateway"
	"github.com/sluice-dev/sluice/internal/sim"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/internal/testenv/cookbook"
	"github.com/sluice-dev/sluice/llm"
)

// The key of the batch tests: a Groq key with rpm 30, tpm 8,000 and otpm
// 1,000. A request of about 400 prompt tokens and max_tokens 200 costs about
// 600 tokens, so TPM allows 13 a minute, but OTPM (which counts max_tokens)
// allows 5: 200 requests take 40 minutes at least.
const (
	batchLimits    = "rpm=30,tpm=8000,otpm=1000"
	batchRPM       = 30   // the key's documented limits a client is told of
	batchTPM       = 8000 // (the cookbook script has no OTPM setting)
	batchItems     = 200
	batchPrompt    = 400 // prompt tokens of each request, as the provider counts them
	batchMaxTokens = 200
	batchModel     = "llama-3.1-8b-instant"
	// batchSpeed compresses the key's 40-odd minutes into about two: the
	// simulator, the gateway and its governor run on a clock this many
	// times as fast as the wall clock, and the clients' durations are the
	// real ones divided by it.
	batchSpeed = 20.0
	// The simulated provider answers in 1.5 s ± 50 %, simulated time.
	batchLatency = 1500 * time.Millisecond
	// batchLag is the gateway's Lag, simulated time. At 20 times the wall
	// clock, the milliseconds a call spends between leaving the gateway and
	// being counted by the simulator are tenths of a simulated second, and
	// at a run's start, while its client's first requests are read and
	// priced under the race detector, up to a second (see batchStagger); a
	// machine busy with other tests adds hiccups of tens of milliseconds.
	// With the default 1 s the simulator would count such a call inside a
	// minute the governor saw as ended, and refuse the call admitted next.
	// 6 s covers 300 ms of wall time: a machine running the whole test
	// suite on two cores has stalled this process for up to 280 ms.
	batchLag = 6 * time.Second
	// batchStagger spaces the starts of the four runs, in wall time: the
	// npm client's run through the gateway, then its run direct, then the
	// cookbook client's, in the same order. A run's first moment is its
	// busiest (its client sends 13 or 20 requests at once, which the gateway
	// and the simulator read and price under the race detector); four of
	// them at once on two cores kept the first calls 150 to 300 ms from the
	// gateway to the simulator, 3 to 6 simulated seconds, more than the lag
	// covers. Apart, a run's first calls are counted within some 40 ms.
	// The runs still overlap for all but the first second or two.
	batchStagger = 400 * time.Millisecond
	// batchKey is the provider key the simulators require; batchClientKey
	// is what the clients present to the gateways.
	batchKey       = "sk-batch-upstream-8d1f3a6c2e"
	batchClientKey = "gw-batch-client-key"
)

// TestBatchClients proves that batch clients finish at least as much work
// through the gateway as going direct to the provider, on a key whose OTPM
// the clients do not know: 200 requests, each client once direct to a
// simulator and once through a gateway in front of another, all four runs
// side by side on fresh simulators and clocks. Through the gateway: as many
// items done or more, no 429 from the provider, the work done no later, and,
// for the npm client's two flows, token shares that follow their weights
// while both flows have requests waiting.
func TestBatchClients(t *testing.T) {
	warmUp(t)
	prompts := batchPrompts(batchItems)
	// The four runs start one after the other, batchStagger apart: the
	// cookbook's wait until the npm client's node processes have loaded and
	// started (or the npm part is skipped).
	nodeReady := make(chan struct{})
	release := sync.OnceFunc(func() { close(nodeReady) })
	t.Run("cookbook", func(t *testing.T) {
		t.Parallel()
		batchAttempts(t, func(t *testing.T, r *batchReport) { runBatchCookbook(t, r, prompts, nodeReady) })
	})
	t.Run("openai-npm", func(t *testing.T) {
		t.Parallel()
		defer release()
		node, modules := testenv.NodeModules(t)
		batchAttempts(t, func(t *testing.T, r *batchReport) { runBatchNode(t, r, node, modules, prompts, release) })
	})
}

// batchReport gathers what a run found wrong, for batchAttempts to judge,
// and watches the test process for stalls from the moment the run starts.
type batchReport struct {
	problems []string
	stop     func() (longest, at time.Duration)
}

func (r *batchReport) errorf(format string, args ...any) {
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
}

// started says the clients start now.
func (r *batchReport) started() { r.stop = watchStalls() }

// batchStallLimit is the longest pause of the test process a compressed
// run survives: the gateway's lag in wall time. A process that does not run
// for longer (a machine starved of CPU) leaves calls admitted before the
// pause in transit while the fast clock runs on; the simulator then counts
// them so late that it refuses the next calls the governor admits, and the
// clients' timeouts fire before answers that were due long before.
var batchStallLimit = clock.Real(batchSpeed, batchLag)

// batchAttempts runs a scenario and fails the test with what it found
// wrong. A run that went wrong while the test process stalled for longer
// than batchStallLimit is run once more, since its figures say more about
// the machine than about the gateway; the second run's findings stand.
func batchAttempts(t *testing.T, run func(t *testing.T, r *batchReport)) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		r := &batchReport{}
		run(t, r)
		stall, at := r.stop()
		t.Logf("run %d: the test process's longest stall was %s (%s simulated), %s into the run", attempt, stall.Round(time.Millisecond), simulated(stall).Round(time.Millisecond), at.Round(time.Millisecond))
		if len(r.problems) == 0 {
			return
		}
		if stall > batchStallLimit && attempt == 1 {
			t.Logf("run %d went wrong while the test process stalled for %s, more than the %s the gateway's lag covers; running it again. What went wrong:\n%s",
				attempt, stall, batchStallLimit, strings.Join(r.problems, "\n"))
			continue
		}
		for _, p := range r.problems {
			t.Error(p)
		}
		if stall > batchStallLimit {
			t.Errorf("both runs went wrong while the test process stalled (this time for %s, more than the %s the gateway's lag covers): the machine may be too busy for a run in compressed time",
				stall, batchStallLimit)
		}
		return
	}
}

// watchStalls measures the longest time the test process went without
// running a goroutine that wants to run every 10 ms, until the returned
// function is called; that function returns it, and when it began.
func watchStalls() (stop func() (longest, at time.Duration)) {
	done := make(chan struct{})
	type stall struct{ longest, at time.Duration }
	result := make(chan stall, 1)
	go func() {
		const every = 10 * time.Millisecond
		tick := time.NewTicker(every)
		defer tick.Stop()
		start := time.Now()
		last, s := start, stall{}
		for {
			select {
			case <-done:
				result <- s
				return
			case <-tick.C:
				now := time.Now()
				if d := now.Sub(last) - every; d > s.longest {
					s = stall{d, last.Sub(start)}
				}
				last = now
			}
		}
	}()
	return func() (time.Duration, time.Duration) {
		close(done)
		s := <-result
		return s.longest, s.at
	}
}

// batchTolerance is how much longer than the direct run the gateway may
// take to finish the same number of items, as a share of the direct run's
// time. The governor holds each charge for a minute plus its lag
// (batchLag), so a key it keeps full serves in 63 s the calls that a client
// retrying the moment each slot frees gets in 60 s — and the npm client
// direct is such a client, waiting exactly the provider's retry-after. And
// each of those minutes starts when the governor's timer fires, which under
// the race detector can be some 20 ms of wall time late: 0.4 simulated
// seconds at batchSpeed, carried into every later minute. On top of both,
// batchLatency: the last call of each run takes 0.75 to 2.25 s.
const batchTolerance = float64(batchLag+batchSpeed*20*time.Millisecond) / float64(time.Minute)

// nth returns the time at which the n-th of the sorted times came, or
// false when there are fewer.
func nth(sorted []time.Duration, n int) (time.Duration, bool) {
	if n < 1 {
		return 0, true
	}
	if len(sorted) < n {
		return 0, false
	}
	return sorted[n-1], true
}

// batchWarm loads, once, what the simulator and the gateway load on their
// first request: the tokenizers that count and price a prompt. Under the
// race detector that takes a few hundred milliseconds, simulated seconds at
// batchSpeed: the first calls of a run would spend them between the
// governor's admission and the simulator's count, and arrive late enough
// for the simulator to count them into the next minute.
var batchWarm sync.Once

func warmUp(t *testing.T) {
	batchWarm.Do(func() {
		m, err := sim.NewModel(sim.Config{Profile: "groq", Model: batchModel, Wire: true})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(sim.NewServer(m, sim.ServerConfig{}))
		defer srv.Close()
		gw, err := gateway.New(context.Background(), gateway.Config{Upstream: srv.URL + "/v1", Profile: llm.Groq})
		if err != nil {
			t.Fatal(err)
		}
		gw.Start(context.Background())
		defer gw.Stop(context.Background())
		front := httptest.NewServer(gw)
		defer front.Close()
		resp, err := http.Post(front.URL+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"`+batchModel+`","messages":[{"role":"user","content":"Warm up."}],"max_tokens":5}`))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("warming up: %s", resp.Status)
		}
	})
}

// batchPrompts returns n distinct prompts, each batchPrompt tokens as the
// provider counts them (its count adds 3 per message and 3 for the reply).
func batchPrompts(n int) []string {
	const want = batchPrompt - 6
	out := make([]string, n)
	for i := range out {
		head := fmt.Sprintf("Item %d of the batch. Summarise this note in two sentences:", i+1)
		h, _ := cookbook.Codec().Count(head)
		words := want - h
		for {
			text := head + " " + sim.Words(int64(words), uint64(i))
			c, _ := cookbook.Codec().Count(text)
			if c == want || words <= 1 {
				out[i] = text
				break
			}
			words += want - c
		}
	}
	return out
}

// batchWorld is a simulator on a fast clock, with a gateway in front of it
// or not: the provider a run sends its requests to.
type batchWorld struct {
	clock *clock.Clock
	model *sim.Model
	sim   *httptest.Server
	gw    *gateway.Gateway // nil for a direct run
	front *httptest.Server // the gateway's server (nil for a direct run)
	log   *testenv.Buffer  // the gateway's log
}

func newBatchWorld(t *testing.T, throughGateway bool, flows []gateway.Flow) *batchWorld {
	t.Helper()
	lim, err := governor.ParseLimits(batchLimits)
	if err != nil {
		t.Fatal(err)
	}
	w := &batchWorld{clock: clock.New(batchSpeed), log: &testenv.Buffer{}}
	w.model, err = sim.NewModel(sim.Config{Profile: "groq", Limits: lim, Latency: batchLatency,
		Model: batchModel, Seed: 7, Wire: true})
	if err != nil {
		t.Fatal(err)
	}
	w.sim = httptest.NewServer(sim.NewServer(w.model, sim.ServerConfig{APIKey: batchKey,
		Now: w.clock.Now, Speed: batchSpeed}))
	t.Cleanup(w.sim.Close)
	if !throughGateway {
		return w
	}
	w.gw, err = gateway.New(context.Background(), gateway.Config{
		Upstream:   w.sim.URL + "/v1",
		APIKey:     batchKey,
		Profile:    llm.Groq,
		Limits:     lim,
		Flows:      flows,
		ClientKeys: []gateway.ClientKey{{Key: batchClientKey}},
		Lag:        batchLag,
		Now:        w.clock.Now,
		Speed:      batchSpeed,
		Logger:     slog.New(slog.NewTextHandler(w.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	w.gw.Start(t.Context())
	t.Cleanup(func() {
		if err := w.gw.Stop(context.Background()); err != nil {
			t.Errorf("stop the gateway: %v", err)
		}
	})
	w.front = httptest.NewServer(w.gw)
	t.Cleanup(w.front.Close)
	return w
}

// baseURL is the API root a client is given, and key the key it sends.
func (w *batchWorld) baseURL() (url, key string) {
	if w.gw == nil {
		return w.sim.URL + "/v1", batchKey
	}
	return w.front.URL + "/v1", batchClientKey
}

func (w *batchWorld) name() string {
	if w.gw == nil {
		return "direct"
	}
	return "gateway"
}

// simulated converts a wall duration into the simulated time it covered.
func simulated(d time.Duration) time.Duration { return time.Duration(float64(d) * batchSpeed) }

// runBatchCookbook runs the cookbook client direct and through the gateway.
func runBatchCookbook(t *testing.T, rep *batchReport, prompts []string, nodeReady <-chan struct{}) {
	bodies := make([][]byte, len(prompts))
	for i, p := range prompts {
		bodies[i], _ = json.Marshal(map[string]any{
			"model":      batchModel,
			"messages":   []map[string]string{{"role": "user", "content": p}},
			"max_tokens": batchMaxTokens,
		})
	}
	t.Logf("cookbook: told rpm %d and tpm %d, it estimates each request at %d tokens (prompt and max_tokens)",
		batchRPM, batchTPM, cookbook.Tokens(bodies[0]))

	select {
	case <-nodeReady:
		time.Sleep(batchStagger) // after the npm runs
	case <-time.After(time.Minute):
		t.Log("the npm client's node processes were not ready after a minute; starting without them")
	}
	worlds := []*batchWorld{newBatchWorld(t, false, nil), newBatchWorld(t, true, nil)}
	runs := make([]*cookbook.Outcome, len(worlds))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep.started()
	var wg sync.WaitGroup
	for _, i := range []int{1, 0} { // the gateway's run first: see batchStagger
		w := worlds[i]
		time.Sleep(batchStagger)
		url, key := w.baseURL()
		c := &cookbook.Client{
			URL: url + "/chat/completions", APIKey: key,
			MaxRequestsPerMinute: batchRPM, MaxTokensPerMinute: batchTPM, MaxAttempts: 5,
			Minute:  clock.Real(batchSpeed, time.Minute),
			Pause:   clock.Real(batchSpeed, 15*time.Second),
			Timeout: clock.Real(batchSpeed, 300*time.Second),
			Tick:    clock.Real(batchSpeed, time.Millisecond),
		}
		wg.Go(func() { runs[i] = c.Run(ctx, bodies) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("the cookbook runs did not end within 5 minutes")
	}

	done := make([][]time.Duration, len(worlds)) // when each item finished, sorted
	for i, w := range worlds {
		r, st := runs[i], w.model.Stats()
		attempts := map[int]int{}
		var spans []time.Duration
		for _, res := range r.Results {
			attempts[res.Attempts]++
			spans = append(spans, res.Span)
			if res.OK {
				done[i] = append(done[i], res.Done)
			}
		}
		slices.Sort(spans)
		slices.Sort(done[i])
		t.Logf("cookbook %s: %d ok, %d failed of %d; wall %s (simulated %s); the client saw %d rate-limit errors, %d other API errors, %d exceptions; attempts per request %v; a request's span median %s, max %s (simulated)",
			w.name(), r.Succeeded, r.Failed, r.Started, r.Wall.Round(time.Millisecond), simulated(r.Wall).Round(time.Second),
			r.RateLimitErrors, r.APIErrors, r.Others, attempts,
			simulated(spans[len(spans)/2]).Round(time.Second), simulated(spans[len(spans)-1]).Round(time.Second))
		t.Logf("cookbook %s: the provider saw %d requests, %d succeeded, %d refused with 429",
			w.name(), st.Requests, st.Succeeded, st.RejectedByStatus[429])
		for j, res := range r.Results {
			for k, e := range res.Errors {
				if !strings.Contains(e, "Rate limit") || (!res.OK && testing.Verbose()) {
					t.Logf("cookbook %s: request %d, attempt %d: %s", w.name(), j, k+1, e)
				}
			}
		}
	}
	direct, gw := runs[0], runs[1]
	if gw.Succeeded < direct.Succeeded || gw.Succeeded < 198 {
		rep.errorf("through the gateway the cookbook client finished %d items, direct %d: want at least as many, and at least 198",
			gw.Succeeded, direct.Succeeded)
	}
	if n := worlds[1].model.Stats().RejectedByStatus[429]; n != 0 {
		rep.errorf("the provider refused %d of the gateway's calls with 429, want 0:\n%s", n, worlds[1].upstreamFailures())
	}
	compareWall(t, rep, "cookbook", direct.Succeeded, direct.Wall, gw.Wall, done[1])
}

// compareWall checks that the gateway run finished as many items as the
// direct run did (n) within the direct run's wall time (and batchTolerance).
// A direct run that gives items up ends sooner for doing less: the time to
// do what both runs did is the fair measure. Both walls are logged.
func compareWall(t *testing.T, rep *batchReport, client string, n int, direct, gw time.Duration, gwDone []time.Duration) {
	t.Helper()
	at, ok := nth(gwDone, n)
	if !ok {
		return // fewer items than direct: reported already
	}
	t.Logf("%s: the direct run finished its %d items in %s (simulated %s); the gateway run had as many done at %s (simulated %s) and all its %d at %s (simulated %s)",
		client, n, direct.Round(time.Millisecond), simulated(direct).Round(time.Second),
		at.Round(time.Millisecond), simulated(at).Round(time.Second),
		len(gwDone), gw.Round(time.Millisecond), simulated(gw).Round(time.Second))
	if limit := time.Duration(float64(direct)*(1+batchTolerance)) + clock.Real(batchSpeed, batchLatency); at > limit {
		rep.errorf("%s: the gateway run had the direct run's %d items done at %s (simulated %s), later than the direct run's %s (simulated %s) plus %.1f %% and a call's latency (batchTolerance)",
			client, n, at.Round(time.Millisecond), simulated(at).Round(time.Second),
			direct.Round(time.Millisecond), simulated(direct).Round(time.Second), 100*batchTolerance)
	}
}

// The npm client's two flows and their weights on the gateway.
var batchFlows = []gateway.Flow{{Name: "digest", Weight: 1}, {Name: "catalog", Weight: 3}}

// nodeBatchOut is what batch-check.mjs prints.
type nodeBatchOut struct {
	OK     int   `json:"ok"`
	Failed int   `json:"failed"`
	WallMS int64 `json:"wall_ms"`
	Flows  map[string]struct {
		Sent           int               `json:"sent"`
		OK             int               `json:"ok"`
		Failed         int               `json:"failed"`
		FailedByStatus map[string]int    `json:"failed_by_status"`
		WallMS         int64             `json:"wall_ms"`
		DoneMS         []int64           `json:"done_ms"`
		Failures       []json.RawMessage `json:"failures"`
	} `json:"flows"`
}

// runBatchNode runs batch-check.mjs direct and through the gateway.
func runBatchNode(t *testing.T, rep *batchReport, node, modules string, prompts []string, ready func()) {
	script, err := filepath.Abs("../../clients/node/batch-check.mjs")
	if err != nil {
		t.Fatal(err)
	}
	type flowPlan struct {
		Name    string   `json:"name"`
		Prompts []string `json:"prompts"`
	}
	// Ten workers a flow, twenty in all.
	plan := struct {
		Model     string     `json:"model"`
		MaxTokens int        `json:"max_tokens"`
		Workers   int        `json:"workers"`
		Speed     float64    `json:"speed"`
		Flows     []flowPlan `json:"flows"`
	}{Model: batchModel, MaxTokens: batchMaxTokens, Workers: 10, Speed: batchSpeed}
	for i, f := range batchFlows {
		per := batchItems / len(batchFlows)
		plan.Flows = append(plan.Flows, flowPlan{Name: f.Name, Prompts: prompts[i*per : (i+1)*per]})
	}
	planFile := filepath.Join(t.TempDir(), "plan.json")
	data, _ := json.Marshal(plan)
	if err := os.WriteFile(planFile, data, 0o600); err != nil {
		t.Fatal(err)
	}

	worlds := []*batchWorld{newBatchWorld(t, false, nil), newBatchWorld(t, true, batchFlows)}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Each node process loads the SDK and reads its plan, says "ready" on
	// stderr, and starts when it reads a line on stdin.
	type nodeProc struct {
		cmd    *exec.Cmd
		start  io.WriteCloser
		stdout bytes.Buffer
		stderr *readyWriter
		err    chan error
	}
	procs := make([]*nodeProc, len(worlds))
	for i, w := range worlds {
		url, key := w.baseURL()
		p := &nodeProc{cmd: exec.CommandContext(ctx, node, script), stderr: newReadyWriter(), err: make(chan error, 1)}
		p.cmd.Dir = filepath.Dir(script)
		p.cmd.Env = append(os.Environ(), "BATCH_BASE_URL="+url, "BATCH_API_KEY="+key, "BATCH_PLAN_FILE="+planFile,
			"BATCH_NODE_MODULES="+modules, "NODE_PATH="+modules, "BATCH_WAIT_FOR_START=1")
		p.cmd.Stdout, p.cmd.Stderr = &p.stdout, p.stderr
		if p.start, err = p.cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		if err := p.cmd.Start(); err != nil {
			t.Fatalf("node batch-check.mjs: %v", err)
		}
		go func() { p.err <- p.cmd.Wait() }()
		procs[i] = p
	}
	for i, p := range procs {
		select {
		case <-p.stderr.ready:
		case err := <-p.err:
			t.Fatalf("node batch-check.mjs (%s) ended before it started: %v\nstderr:\n%s", worlds[i].name(), err, p.stderr)
		case <-time.After(time.Minute):
			t.Fatalf("node batch-check.mjs (%s) was not ready after a minute\nstderr:\n%s", worlds[i].name(), p.stderr)
		}
	}
	ready()
	rep.started()
	samplesDone := make(chan []shareSample, 1)
	sampleCtx, stopSampling := context.WithCancel(ctx)
	go func() { samplesDone <- sampleShares(sampleCtx, worlds[1]) }()
	for k, i := range []int{1, 0} { // the gateway's run first: see batchStagger
		if k > 0 {
			time.Sleep(batchStagger)
		}
		_, _ = io.WriteString(procs[i].start, "start\n")
		_ = procs[i].start.Close()
	}
	outs := make([]nodeBatchOut, len(worlds))
	for i, p := range procs {
		if err := <-p.err; err != nil {
			t.Fatalf("node batch-check.mjs (%s): %v\nstderr:\n%s\nstdout:\n%s", worlds[i].name(), err, p.stderr, p.stdout.String())
		}
		if err := json.Unmarshal(p.stdout.Bytes(), &outs[i]); err != nil {
			t.Fatalf("node batch-check.mjs (%s) printed %q: %v", worlds[i].name(), p.stdout.String(), err)
		}
	}
	stopSampling()
	samples := <-samplesDone

	done := make([][]time.Duration, len(worlds)) // when each item finished, sorted
	for i, w := range worlds {
		o, st := outs[i], w.model.Stats()
		wall := time.Duration(o.WallMS) * time.Millisecond
		t.Logf("openai-npm %s: %d ok, %d failed of %d; wall %s (simulated %s); the provider saw %d requests, %d succeeded, %d refused with 429",
			w.name(), o.OK, o.Failed, o.OK+o.Failed, wall, simulated(wall).Round(time.Second),
			st.Requests, st.Succeeded, st.RejectedByStatus[429])
		for _, f := range batchFlows {
			fo := o.Flows[f.Name]
			fw := time.Duration(fo.WallMS) * time.Millisecond
			t.Logf("openai-npm %s: flow %s: %d ok, %d failed %v, done at %s (simulated %s)",
				w.name(), f.Name, fo.OK, fo.Failed, fo.FailedByStatus, fw, simulated(fw).Round(time.Second))
			if len(fo.Failures) > 0 {
				t.Logf("openai-npm %s: flow %s: first failures %s", w.name(), f.Name, fo.Failures)
			}
			for _, ms := range fo.DoneMS {
				done[i] = append(done[i], time.Duration(ms)*time.Millisecond)
			}
		}
		slices.Sort(done[i])
	}
	direct, gw := outs[0], outs[1]
	if gw.OK < direct.OK {
		rep.errorf("through the gateway the npm client finished %d items, direct %d: want at least as many", gw.OK, direct.OK)
	}
	if n := worlds[1].model.Stats().RejectedByStatus[429]; n != 0 {
		rep.errorf("the provider refused %d of the gateway's calls with 429, want 0:\n%s", n, worlds[1].upstreamFailures())
	}
	compareWall(t, rep, "openai-npm", direct.OK, time.Duration(direct.WallMS)*time.Millisecond,
		time.Duration(gw.WallMS)*time.Millisecond, done[1])

	// The shares while both flows were backlogged.
	tokens, admitted, span := backloggedShares(samples)
	var sum, n int64
	var wsum float64
	for _, f := range batchFlows {
		sum += tokens[f.Name]
		n += admitted[f.Name]
		wsum += f.Weight
	}
	t.Logf("openai-npm gateway: both flows had requests waiting for %s of the run (simulated), in which %d calls were admitted",
		simulated(span).Round(time.Second), n)
	if n < 60 {
		rep.errorf("only %d admissions while both flows were backlogged; the measurement needs more", n)
		return
	}
	for _, f := range batchFlows {
		share, want := float64(tokens[f.Name])/float64(sum), f.Weight/wsum
		t.Logf("openai-npm gateway: flow %s (weight %g): %.3f of the %d tokens admitted while both were backlogged (%d calls); weight share %.3f",
			f.Name, f.Weight, share, sum, admitted[f.Name], want)
		if math.Abs(share-want) > 0.05*want {
			rep.errorf("flow %s took %.3f of the tokens while both flows were backlogged, want %.3f ± 5 %%", f.Name, share, want)
		}
	}
}

// shareSample is the governor's view of the flows at one moment.
type shareSample struct {
	at       time.Time // wall time
	waiting  map[string]int
	admitted map[string]int64
	tokens   map[string]int64
}

// sampleShares reads the gateway governor's Stats every simulated second
// (50 ms) until ctx ends. A test outside the package has no record of each
// admission; the governor's counters, read this often, tell what was
// admitted to each flow between two moments and whether each flow had
// requests waiting at both.
func sampleShares(ctx context.Context, w *batchWorld) []shareSample {
	var out []shareSample
	tick := time.NewTicker(clock.Real(batchSpeed, time.Second))
	defer tick.Stop()
	for {
		st := w.gw.Governor().Stats(w.clock.Now())
		s := shareSample{at: time.Now(), waiting: map[string]int{}, admitted: map[string]int64{}, tokens: map[string]int64{}}
		for _, f := range st.Flows {
			s.waiting[f.Name] = f.Waiting
			s.admitted[f.Name] = f.Admitted
			s.tokens[f.Name] = f.Tokens.Tokens()
		}
		out = append(out, s)
		select {
		case <-ctx.Done():
			return out
		case <-tick.C:
		}
	}
}

// backloggedShares adds up, by flow, the tokens and calls admitted between
// consecutive samples at both of which every flow of batchFlows had a
// request waiting in the governor's line (a request parked after its max
// wait, its client away, is not waiting: nothing can be admitted for it).
// A flow may run dry for a moment between two such samples; a sample a
// simulated second apart makes that rare and, with some 130 calls counted,
// small.
func backloggedShares(samples []shareSample) (tokens, admitted map[string]int64, span time.Duration) {
	tokens, admitted = map[string]int64{}, map[string]int64{}
	busy := func(s shareSample) bool {
		for _, f := range batchFlows {
			if s.waiting[f.Name] == 0 {
				return false
			}
		}
		return true
	}
	for i := 1; i < len(samples); i++ {
		prev, cur := samples[i-1], samples[i]
		if !busy(prev) || !busy(cur) {
			continue
		}
		span += cur.at.Sub(prev.at)
		for _, f := range batchFlows {
			tokens[f.Name] += cur.tokens[f.Name] - prev.tokens[f.Name]
			admitted[f.Name] += cur.admitted[f.Name] - prev.admitted[f.Name]
		}
	}
	return tokens, admitted, span
}

// upstreamFailures returns the gateway's log lines about upstream failures.
func (w *batchWorld) upstreamFailures() string {
	var lines []string
	for _, line := range strings.Split(w.log.String(), "\n") {
		if line != "" && !strings.Contains(line, "msg=chat ") {
			lines = append(lines, line)
		}
	}
	return strings.Join(lines, "\n")
}

// readyWriter keeps what a node process writes on stderr, and closes ready
// when it has written the line "ready".
type readyWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	ready chan struct{}
	once  sync.Once
}

func newReadyWriter() *readyWriter { return &readyWriter{ready: make(chan struct{})} }

func (w *readyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if bytes.HasPrefix(w.buf.Bytes(), []byte("ready\n")) || bytes.Contains(w.buf.Bytes(), []byte("\nready\n")) {
		w.once.Do(func() { close(w.ready) })
	}
	return n, err
}

func (w *readyWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
