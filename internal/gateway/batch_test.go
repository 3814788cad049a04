package gateway

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

	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/govtext"
	"github.com/sluice-dev/sluice/internal/sim"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/internal/testenv/cookbook"
	"github.com/sluice-dev/sluice/llm"
)

// The key of the batch tests, Groq-shaped: rpm 240, tpm 30,000 and otpm
// 8,000. A request has 100 prompt tokens as the provider counts them and
// max_tokens 50, so RPM would admit 240 a minute and TPM 200, but OTPM,
// which counts max_tokens and which the clients are not told of, admits
// 160 (batchPerMinute).
const (
	batchLimits    = "rpm=240,tpm=30000,otpm=8000"
	batchRPM       = 240   // the key's documented limits a client is told of
	batchTPM       = 30000 // (the cookbook script has no OTPM setting)
	batchOTPM      = 8000
	batchPrompt    = 100 // prompt tokens of each request, as the provider counts them
	batchMaxTokens = 50
	batchPerMinute = batchOTPM / batchMaxTokens // calls the key admits in any minute
	batchModel     = "llama-3.1-8b-instant"
	// The simulated provider answers in 500 ms ± 50 %.
	batchLatency = 500 * time.Millisecond
	// batchFillers calls of max_tokens batchOTPM / batchFillers take the
	// key's first minute (see fill).
	batchFillers = 8
	// batchKey is the provider key the simulators require; batchClientKey
	// is what the clients present to the gateways.
	batchKey       = "sk-batch-upstream-8d1f3a6c2e"
	batchClientKey = "gw-batch-client-key"
)

// The cookbook client's work: 160 requests, what the key admits in a
// minute. (The npm client's work is in batchFlows.)
const batchCookbookItems = batchPerMinute

// batchFlow is one of the npm client's flows: its weight on the gateway, and
// its work, done by a pool of workers.
type batchFlow struct {
	Flow
	workers, items int
}

// The npm client's two flows, with a worker for each request, so that every
// request waits in line from the start: 157 requests, all of which the key
// admits in the minute after the fillers'. Taken in fair order, three of
// catalog's for each of digest's, the last admitted is digest's 40th, after
// catalog's line has emptied: the other 156 are admitted while both flows
// have requests waiting, 39 of them digest's, a quarter, which its bounds
// of ± 5 % leave two calls' room on either side.
var batchFlows = []batchFlow{
	{Flow{Name: "digest", Weight: 1}, 40, 40},
	{Flow{Name: "catalog", Weight: 3}, 117, 117},
}

// batchNodeItems is the npm client's work in all its flows.
func batchNodeItems() int {
	n := 0
	for _, f := range batchFlows {
		n += f.items
	}
	return n
}

// TestBatchClients proves that batch clients finish at least as much work
// through the gateway as going direct to the provider, on a key whose OTPM
// the clients do not know: the cookbook client and the openai npm client,
// each once direct to a simulator and once through a gateway (its defaults,
// the default lag) in front of another, all four runs side by side on
// fresh simulators. Through the gateway: every item done, and as many as
// direct or more; no 429 from the provider; the work done no later,
// counted in minutes of the key; and, for the npm client's two flows,
// token shares that follow their weights while both flows have requests
// waiting.
//
// Everything runs on the wall clock: the simulators, the gateways and the
// clients read one time, so a machine too busy to run the test process for
// a while delays every party alike instead of moving a compressed clock on
// under calls in transit. Each run starts on a key whose first minute is
// taken — all of OTPM, by calls the test sends before the clients start,
// as another user of the key would (fill). Every call of the clients then
// waits for that minute to end (refused with a retry-after direct, in line
// through the gateway), which the claims rely on: the minutes of the key
// are counted from it (batchEarliestMinute), and the npm client's flows
// enter the gateway's line together, with equal fair-queuing tags, so that
// the calls admitted as the minute ends are shared by weight from the
// first. Each client's work is what the key admits in one minute: a run
// through the gateway is done in the second.
//
// Nothing is timed but in minutes of the key. The work done no later is
// judged by the minute it was done in (compareMinutes), which a stall of
// the machine would have to last most of a minute to change; the shares
// come from the governor's record of its admissions; and no provider 429
// assumes only what the gateway does, that the provider counts a call
// within the lag (1 s) of the gateway sending it: every call of the
// clients is admitted to room a filler freed, and needs only that filler,
// sent alone, to have been counted within the lag.
//
// The two clients' subtests run side by side, started together rather than
// marked parallel: they wait on the key's minutes, not on the CPU, and so
// take one of the package's parallel test slots, not two.
func TestBatchClients(t *testing.T) {
	t.Parallel()
	warmUp(t)
	prompts := batchPrompts(max(batchCookbookItems, batchNodeItems()))
	var wg sync.WaitGroup
	wg.Go(func() {
		t.Run("cookbook", func(t *testing.T) {
			runBatchCookbook(t, prompts[:batchCookbookItems])
		})
	})
	wg.Go(func() {
		t.Run("openai-npm", func(t *testing.T) {
			node, modules := testenv.NodeModules(t)
			runBatchNode(t, node, modules, prompts[:batchNodeItems()])
		})
	})
	wg.Wait()
}

// batchEarliestMinute is the first minute of a run's key, counted from
// just before the first filler was sent, in which any client can have had
// n calls answered. The fillers hold all of OTPM until the first of them
// ages out, a minute after the provider counted it; from then on the key
// admits at most batchPerMinute calls in any minute, so the n-th call is
// admitted at least ceil(n / batchPerMinute) minutes after the first
// filler was sent, and answered later still.
func batchEarliestMinute(n int) int { return 1 + (n+batchPerMinute-1)/batchPerMinute }

// batchWarm loads, once, what the simulator and the gateway load on their
// first request: the tokenizers that count and price a prompt. Under the
// race detector that takes a few hundred milliseconds, which the filler
// would otherwise spend between leaving the gateway and the simulator's
// count, eating into the lag.
var batchWarm sync.Once

func warmUp(t testing.TB) {
	batchWarm.Do(func() {
		m, err := forecast.NewModel(forecast.ModelConfig{Profile: "groq", Model: batchModel, Wire: true})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(sim.NewServer(m, sim.ServerConfig{}))
		defer srv.Close()
		gw, err := New(context.Background(), Config{Upstream: srv.URL + "/v1", Profile: llm.Groq})
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

// batchWorld is a simulator with a gateway in front of it or not: the
// provider a run sends its requests to.
type batchWorld struct {
	model *forecast.Model
	sim   *httptest.Server
	gw    *Gateway         // nil for a direct run
	front *httptest.Server // the gateway's server (nil for a direct run)
	log   *testenv.Buffer  // the gateway's log

	journal  *chargeLog  // the governor's admissions, in order
	arrivals *arrivalLog // the chat requests that reached the gateway

	t0 time.Time // just before the filler was sent: the start of the key's first minute
}

func newBatchWorld(t *testing.T, throughGateway bool, flows []Flow) *batchWorld {
	t.Helper()
	lim, err := govtext.Limits(batchLimits)
	if err != nil {
		t.Fatal(err)
	}
	w := &batchWorld{log: &testenv.Buffer{}, journal: &chargeLog{}, arrivals: &arrivalLog{}}
	w.model, err = forecast.NewModel(forecast.ModelConfig{Profile: "groq", Limits: lim, Latency: batchLatency,
		Model: batchModel, Seed: 7, Wire: true})
	if err != nil {
		t.Fatal(err)
	}
	w.sim = httptest.NewServer(sim.NewServer(w.model, sim.ServerConfig{APIKey: batchKey}))
	t.Cleanup(w.sim.Close)
	if !throughGateway {
		return w
	}
	w.gw, err = New(context.Background(), Config{
		Upstream:   w.sim.URL + "/v1",
		APIKey:     batchKey,
		Profile:    llm.Groq,
		Limits:     lim,
		Flows:      flows,
		ClientKeys: []ClientKey{{Key: batchClientKey}},
		Logger:     slog.New(slog.NewTextHandler(w.log, &slog.HandlerOptions{Level: slog.LevelDebug})),
		journal:    w.journal.Record,
	})
	if err != nil {
		t.Fatal(err)
	}
	start(t, w.gw)
	w.front = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/chat/completions" {
			w.arrivals.add(r.Header.Get(FlowHeader))
		}
		w.gw.ServeHTTP(rw, r)
	}))
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

// fill takes the key's first minute: batchFillers calls of max_tokens
// batchOTPM / batchFillers, all of OTPM, in no flow of the clients', sent
// one after the other. It records when the first was sent, the start of
// the key's first minute, and returns once the last is answered. One after
// the other, the fillers age out one after the other: the room the minute
// frees comes a call's latency apart, for batchPerMinute / batchFillers
// calls at a time, not all at once — a burst the gateway sends that a busy
// machine delivers well within the lag.
func (w *batchWorld) fill(ctx context.Context) error {
	url, key := w.baseURL()
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"Write the quarterly report."}],"max_tokens":%d}`,
		batchModel, batchOTPM/batchFillers)
	w.t0 = time.Now()
	for i := range batchFillers {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/chat/completions", strings.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("the %s run's filler %d: %w", w.name(), i+1, err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("the %s run's filler %d: %s %s", w.name(), i+1, resp.Status, data)
		}
	}
	return nil
}

// fillAll fills every world at once, and fails the test if one fails.
func fillAll(t *testing.T, ctx context.Context, worlds []*batchWorld) {
	t.Helper()
	errs := make([]error, len(worlds))
	var wg sync.WaitGroup
	for i, w := range worlds {
		wg.Go(func() { errs[i] = w.fill(ctx) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// minute is the minute of w's key in which at falls: 1 for the filler's
// first minute.
func (w *batchWorld) minute(at time.Time) int { return int(at.Sub(w.t0)/time.Minute) + 1 }

// runBatchCookbook runs the cookbook client direct and through the gateway.
func runBatchCookbook(t *testing.T, prompts []string) {
	ctx := testBudget(t)
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

	worlds := []*batchWorld{newBatchWorld(t, false, nil), newBatchWorld(t, true, nil)}
	fillAll(t, ctx, worlds)
	runs := make([]*cookbook.Outcome, len(worlds))
	var wg sync.WaitGroup
	for i, w := range worlds {
		url, key := w.baseURL()
		c := &cookbook.Client{
			URL: url + "/chat/completions", APIKey: key,
			MaxRequestsPerMinute: batchRPM, MaxTokensPerMinute: batchTPM, MaxAttempts: 5,
			Minute: time.Minute, Pause: 15 * time.Second, Timeout: 300 * time.Second, Tick: time.Millisecond,
		}
		wg.Go(func() { runs[i] = c.Run(ctx, bodies) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("the cookbook runs did not end before the test's deadline")
	}

	done := make([][]time.Time, len(worlds)) // when each item finished, sorted
	for i, w := range worlds {
		r, st := runs[i], w.model.Stats()
		attempts := map[int]int{}
		var spans []time.Duration
		for _, res := range r.Results {
			attempts[res.Attempts]++
			spans = append(spans, res.Span)
			if res.OK {
				done[i] = append(done[i], r.Start.Add(res.Done))
			}
		}
		slices.Sort(spans)
		slices.SortFunc(done[i], time.Time.Compare)
		t.Logf("cookbook %s: %d ok, %d failed of %d; wall %s; the client saw %d rate-limit errors, %d other API errors, %d exceptions; attempts per request %v; a request's span median %s, max %s",
			w.name(), r.Succeeded, r.Failed, r.Started, r.Wall.Round(time.Millisecond),
			r.RateLimitErrors, r.APIErrors, r.Others, attempts,
			spans[len(spans)/2].Round(time.Millisecond), spans[len(spans)-1].Round(time.Millisecond))
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
	if gw.Succeeded != len(bodies) || gw.Succeeded < direct.Succeeded {
		t.Errorf("through the gateway the cookbook client finished %d items, direct %d: want all %d, and at least as many as direct",
			gw.Succeeded, direct.Succeeded, len(bodies))
	}
	if n := worlds[1].model.Stats().RejectedByStatus[429]; n != 0 {
		t.Errorf("the provider refused %d of the gateway's calls with 429, want 0:\n%s", n, worlds[1].upstreamFailures())
	}
	compareMinutes(t, "cookbook", worlds, done)
}

// compareMinutes checks that the gateway run had the direct run's number
// of items done in the same minute of its key as the direct run, or an
// earlier one. A direct run that gives items up ends sooner for doing less:
// the time to do what both runs did is the fair measure. Minutes, not
// seconds: the gateway holds each charge a minute and its lag, so a key it
// keeps full admits the calls of minute k a lag of k seconds later than a
// client that retries the instant the provider has room would get them;
// and no client can do better than batchEarliestMinute, which the direct
// run is checked against too.
func compareMinutes(t *testing.T, client string, worlds []*batchWorld, done [][]time.Time) {
	t.Helper()
	n := len(done[0])
	if n == 0 || len(done[1]) < n {
		return // nothing done direct, or fewer items through the gateway: reported already
	}
	direct, gw := worlds[0].minute(done[0][n-1]), worlds[1].minute(done[1][n-1])
	earliest := batchEarliestMinute(n)
	t.Logf("%s: the direct run had its %d items done %s after its filler, in minute %d of its key; the gateway run had as many done %s after its filler, in minute %d, and all its %d in minute %d; minute %d is the earliest the limits allow",
		client, n, done[0][n-1].Sub(worlds[0].t0).Round(time.Millisecond), direct,
		done[1][n-1].Sub(worlds[1].t0).Round(time.Millisecond), gw,
		len(done[1]), worlds[1].minute(done[1][len(done[1])-1]), earliest)
	if direct < earliest {
		t.Errorf("%s: the direct run had %d items done in minute %d of its key, before minute %d, the earliest its limits allow: the provider admitted more than its limits",
			client, n, direct, earliest)
	}
	if gw > direct {
		t.Errorf("%s: the gateway run had the direct run's %d items done in minute %d of its key, later than the direct run's minute %d",
			client, n, gw, direct)
	}
}

// nodeBatchOut is what batch-check.mjs prints.
type nodeBatchOut struct {
	OK      int   `json:"ok"`
	Failed  int   `json:"failed"`
	StartMS int64 `json:"start_ms"`
	WallMS  int64 `json:"wall_ms"`
	Flows   map[string]struct {
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
func runBatchNode(t *testing.T, node, modules string, prompts []string) {
	ctx := testBudget(t)
	script, err := filepath.Abs("../../clients/node/batch-check.mjs")
	if err != nil {
		t.Fatal(err)
	}
	type flowPlan struct {
		Name    string   `json:"name"`
		Workers int      `json:"workers"`
		Prompts []string `json:"prompts"`
	}
	plan := struct {
		Model     string     `json:"model"`
		MaxTokens int        `json:"max_tokens"`
		Flows     []flowPlan `json:"flows"`
	}{Model: batchModel, MaxTokens: batchMaxTokens}
	var flows []Flow
	for _, f := range batchFlows {
		plan.Flows = append(plan.Flows, flowPlan{Name: f.Name, Workers: f.workers, Prompts: prompts[:f.items]})
		prompts = prompts[f.items:]
		flows = append(flows, f.Flow)
	}
	planFile := filepath.Join(t.TempDir(), "plan.json")
	data, _ := json.Marshal(plan)
	if err := os.WriteFile(planFile, data, 0o600); err != nil {
		t.Fatal(err)
	}

	worlds := []*batchWorld{newBatchWorld(t, false, nil), newBatchWorld(t, true, flows)}
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
		case <-ctx.Done():
			t.Fatalf("node batch-check.mjs (%s) was not ready before the test's deadline\nstderr:\n%s", worlds[i].name(), p.stderr)
		}
	}
	fillAll(t, ctx, worlds)
	for _, p := range procs {
		_, _ = io.WriteString(p.start, "start\n")
		_ = p.start.Close()
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

	done := make([][]time.Time, len(worlds)) // when each item finished, sorted
	for i, w := range worlds {
		o, st := outs[i], w.model.Stats()
		t.Logf("openai-npm %s: %d ok, %d failed of %d; wall %s; the provider saw %d requests, %d succeeded, %d refused with 429",
			w.name(), o.OK, o.Failed, o.OK+o.Failed, time.Duration(o.WallMS)*time.Millisecond,
			st.Requests, st.Succeeded, st.RejectedByStatus[429])
		for _, f := range batchFlows {
			fo := o.Flows[f.Name]
			t.Logf("openai-npm %s: flow %s: %d ok, %d failed %v, done at %s",
				w.name(), f.Name, fo.OK, fo.Failed, fo.FailedByStatus, time.Duration(fo.WallMS)*time.Millisecond)
			if len(fo.Failures) > 0 {
				t.Logf("openai-npm %s: flow %s: first failures %s", w.name(), f.Name, fo.Failures)
			}
			for _, ms := range fo.DoneMS {
				done[i] = append(done[i], time.UnixMilli(o.StartMS+ms))
			}
		}
		slices.SortFunc(done[i], time.Time.Compare)
	}
	direct, gw := outs[0], outs[1]
	if all := batchNodeItems(); gw.OK != all || gw.OK < direct.OK {
		t.Errorf("through the gateway the npm client finished %d items, direct %d: want all %d, and at least as many as direct", gw.OK, direct.OK, all)
	}
	if n := worlds[1].model.Stats().RejectedByStatus[429]; n != 0 {
		t.Errorf("the provider refused %d of the gateway's calls with 429, want 0:\n%s", n, worlds[1].upstreamFailures())
	}
	compareMinutes(t, "openai-npm", worlds, done)

	// The shares while both flows had requests waiting, from the governor's
	// record of its admissions. The first filler is the first; counting from
	// a minute after it, every admission is of a call that waited in line
	// for the key's minute to turn, so the requests that had reached the
	// gateway and were not admitted yet are the ones in line.
	admitted := worlds[1].journal.admissions()
	if len(admitted) == 0 {
		t.Fatal("the gateway's governor recorded no admission")
	}
	weights := map[string]float64{}
	var wsum float64
	for _, f := range batchFlows {
		weights[f.Name] = f.Weight
		wsum += f.Weight
	}
	tokens, n := backlogged(admitted, worlds[1].arrivals.list(), weights, admitted[0].At.Add(time.Minute))
	var sum int64
	for _, f := range batchFlows {
		sum += tokens[f.Name]
	}
	t.Logf("openai-npm gateway: %d calls were admitted while both flows had requests waiting", n)
	if n < 60 {
		t.Fatalf("only %d admissions while both flows were backlogged; the measurement needs more", n)
	}
	for _, f := range batchFlows {
		share, want := float64(tokens[f.Name])/float64(sum), f.Weight/wsum
		t.Logf("openai-npm gateway: flow %s (weight %g): %.3f of the %d tokens admitted while both were backlogged; weight share %.3f",
			f.Name, f.Weight, share, sum, want)
		if math.Abs(share-want) > 0.05*want {
			t.Errorf("flow %s took %.3f of the tokens while both flows were backlogged, want %.3f ± 5 %%", f.Name, share, want)
		}
	}
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
