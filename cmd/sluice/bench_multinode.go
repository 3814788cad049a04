package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/sluice-dev/sluice/examples/summarize"
	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/sim"
)

// Every node is "serve --node NAME" of this same binary; the simulator stays
// in the parent, so that it sees the calls of all nodes on one key and its
// log survives the kills.
const (
	// multinodeNodeEnv is set, to the node's name, in each node's
	// environment: the tests re-execute their binary as the node.
	multinodeNodeEnv = "SLUICE_BENCH_MULTINODE_NODE"
	// multinodeTokenEnv holds the nodes' API token, new in every run.
	multinodeTokenEnv = "SLUICE_BENCH_MULTINODE_TOKEN"
)

func init() {
	registerBench(&command{
		name:    "multinode",
		summary: "run the summarize pipeline on N \"serve --node\" processes sharing one key on PostgreSQL, SIGKILL some; check the aggregate limits hold and nothing is lost",
		run:     runBenchMultinode,
	})
}

type multinodeReport struct {
	Nodes              int `json:"nodes"`
	Killed             int `json:"killed"`
	Requests           int `json:"requests"`
	ProviderRejections int `json:"provider_rejections"`
	Lost               int `json:"lost"`
	Duplicates         int `json:"duplicates"`
	// MaxAggregateRatio is the simulator's highest ratio, over every limit
	// and every admission, of the window's charges (all nodes together) to
	// the limit: forecast.Stats.Peak.
	MaxAggregateRatio float64 `json:"max_aggregate_ratio"`
	// Utilization is the cluster run's use of its bottleneck limit, and
	// SingleNodeUtilization the single node's on the same workload (see
	// utilization).
	Utilization           float64 `json:"utilization"`
	SingleNodeUtilization float64 `json:"single_node_utilization"`

	Events     int    `json:"events"`
	Limits     string `json:"limits"`
	Bottleneck string `json:"bottleneck"`
	// MaxAggregateLimit names the limit of MaxAggregateRatio.
	MaxAggregateLimit string `json:"max_aggregate_limit"`
	// ProviderRejectionsByLimit counts the cluster's rejections by the
	// limit they named.
	ProviderRejectionsByLimit map[string]int64 `json:"provider_rejections_by_limit,omitempty"`
	// Stuck runs did not end in success (they count as lost too).
	Stuck int `json:"stuck"`
	// PostRetries are posts of an event sent again to another node, after
	// a node failed to answer one (it was killed, or not ready yet).
	PostRetries int `json:"post_retries"`
	// AdoptedRuns are the killed nodes' unfinished runs that the live
	// nodes handed back to their queues (none when --restart-after
	// restarts a killed node before the live nodes look).
	AdoptedRuns int `json:"adopted_runs"`
	// RebilledInFlight are calls made again because a kill cut them;
	// RebilledFinished, calls made again for a step already recorded
	// (must be 0). See bench crash.
	RebilledInFlight int `json:"rebilled_in_flight"`
	RebilledFinished int `json:"rebilled_finished"`
	// Seconds is from the first post to the end of the last run;
	// AdmissionsPerSecond, the calls the provider admitted over it.
	Seconds                       float64 `json:"seconds"`
	AdmissionsPerSecond           float64 `json:"admissions_per_second"`
	SingleNodeRequests            int     `json:"single_node_requests"`
	SingleNodeProviderRejections  int     `json:"single_node_provider_rejections"`
	SingleNodeMaxAggregateRatio   float64 `json:"single_node_max_aggregate_ratio"`
	SingleNodeSeconds             float64 `json:"single_node_seconds"`
	SingleNodeAdmissionsPerSecond float64 `json:"single_node_admissions_per_second"`
	WallSeconds                   float64 `json:"wall_seconds"`
	// Rolled counts the nodes stopped with SIGTERM and started again as a
	// new build of the binary (--rolling); MaxStopSeconds is the longest
	// of those stops, from the signal to the process's exit.
	Rolled         int     `json:"rolled,omitempty"`
	MaxStopSeconds float64 `json:"max_stop_seconds,omitempty"`
	// RunsAtStops counts the runs under way on the rolled nodes when each
	// was stopped: a node is stopped once it has some, as long as any is
	// left to run.
	RunsAtStops int `json:"runs_at_stops,omitempty"`
	// StuckRuns lists the runs that did not complete: ID, status, error.
	StuckRuns []string `json:"stuck_runs,omitempty"`
}

func runBenchMultinode(ctx context.Context, env *cmdEnv, args []string) error {
	fs := newFlagSet(env, "bench multinode", "--db postgres://… [flags]",
		"Runs examples/summarize on --nodes \"sluice serve --node nI\" processes of this binary on one\n"+
			"PostgreSQL database, all calling one provider simulator with --limits. First one node alone,\n"+
			"then the cluster, each on a new database of the --db server: --events documents are posted\n"+
			"round-robin; once half were answered, --kill nodes are SIGKILLed, and the live nodes resume\n"+
			"their unfinished runs (or, with --restart-after, each is restarted with its name). Reports the\n"+
			"simulator's rejections (must be 0) and the highest ratio of any limit's window, all nodes\n"+
			"together, to the limit (must be at most 1), runs lost and documents saved twice (must be 0),\n"+
			"and the bottleneck limit's utilization of the cluster beside the single node's.\n"+
			"See docs/bench.md and docs/multinode.md.")
	nodes := fs.Int("nodes", 3, "processes in the cluster run (1 to 8)")
	kill := fs.Int("kill", 1, "nodes to SIGKILL midway (0 to nodes-1)")
	dbURL := fs.String("db", "", "PostgreSQL server, a postgres://… URL: each run gets a new database on it, dropped after (required)")
	events := fs.Int("events", 600, "documents to post (one run, two LLM calls each)")
	limitsF := fs.String("limits", "rpm=2000,tpm=1000000,otpm=72000", "the key's limits, in the simulator and on every node: tight enough that they, not the CPU, bound the run")
	latency := fs.Duration("latency", 200*time.Millisecond, "mean response time of the simulated provider")
	leaseTTL := fs.Duration("lease-ttl", 2*time.Second, "the nodes' --lease-ttl")
	restartAfter := fs.Duration("restart-after", -1, "restart each killed node with its name this long after its kill (negative: never; the live nodes resume its runs)")
	adoptEvery := fs.Duration("adopt-every", time.Second, "the nodes' --adopt-every: how often each looks for the runs of nodes that no longer run")
	timeout := fs.Duration("timeout", 5*time.Minute, "deadline of each run, from its first post to the end of its last document's run")
	seed := fs.Uint64("seed", 1, "seed of the simulator")
	rolling := fs.Bool("rolling", false, "a rolling deploy instead of kills: once a third of the documents were posted, stop each node in turn with SIGTERM and start it again as a new build of the binary (a copy whose bytes, and so whose hash, differ), while posts go on; no single-node run")
	stopGrace := fs.Duration("stop-grace", 5*time.Second, "the nodes' --stop-grace; with --rolling a stop must end within it plus 2s")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := parseFlags(fs, env, args); err != nil {
		return err
	}
	if *rolling && *kill != 0 {
		return errors.New("--rolling stops the nodes one by one: use it with --kill 0")
	}
	if *stopGrace < 0 || *stopGrace > time.Hour {
		return errors.New("--stop-grace must be between 0 and 1h")
	}
	limits, err := governor.ParseLimits(*limitsF)
	switch {
	case *nodes < 1 || *nodes > 8:
		return errors.New("--nodes must be between 1 and 8")
	case *kill < 0 || *kill >= *nodes:
		return fmt.Errorf("--kill must be between 0 and %d (--nodes - 1)", *nodes-1)
	case !isPostgresURL(*dbURL):
		return errors.New("--db must be a postgres:// URL: the nodes share one PostgreSQL database")
	case *events < 2 || *events > 100_000:
		return errors.New("--events must be between 2 and 100000")
	case err != nil:
		return fmt.Errorf("--limits: %w", err)
	case *latency < 0 || *latency > time.Minute:
		return errors.New("--latency must be between 0 and 1m")
	case *leaseTTL < time.Millisecond || *leaseTTL > time.Hour:
		return errors.New("--lease-ttl must be between 1ms and 1h")
	case *restartAfter > 10*time.Minute:
		return errors.New("--restart-after must be at most 10m (negative: never)")
	case *adoptEvery == 0 || *adoptEvery > time.Hour:
		return errors.New("--adopt-every must be at most 1h, and not 0 (negative: never)")
	case *timeout < time.Second:
		return errors.New("--timeout must be at least 1s")
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	var tok [16]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return err
	}
	b := &multinodeBench{
		exe: exe, admin: *dbURL, tag: "multinode_" + strconv.FormatInt(time.Now().UnixNano(), 36),
		events: *events, limits: limits, latency: *latency, leaseTTL: *leaseTTL, restartAfter: *restartAfter, adoptEvery: *adoptEvery,
		timeout: *timeout, seed: *seed, token: hex.EncodeToString(tok[:]), rolling: *rolling, stopGrace: *stopGrace,
	}
	began := time.Now()
	var single multinodeRun
	if !*rolling {
		if single, err = b.run(ctx, "single", 1, 0); err != nil {
			return fmt.Errorf("single node: %w", err)
		}
	}
	cluster, err := b.run(ctx, "cluster", *nodes, *kill)
	if err != nil {
		return fmt.Errorf("%d nodes: %w", *nodes, err)
	}
	rep := multinodeReport{
		Nodes: *nodes, Killed: *kill, Requests: cluster.requests, ProviderRejections: cluster.rejections,
		Lost: cluster.lost, Duplicates: cluster.check.DuplicateSaves, MaxAggregateRatio: round4(cluster.peak),
		Utilization: round4(cluster.utilization), SingleNodeUtilization: round4(single.utilization),
		Events: *events, Limits: limits.String(), Bottleneck: cluster.bottleneck, MaxAggregateLimit: cluster.peakLimit,
		ProviderRejectionsByLimit: cluster.rejectedBy, Stuck: cluster.check.Stuck, PostRetries: cluster.postRetries, AdoptedRuns: cluster.adopted,
		RebilledInFlight: cluster.check.RebilledInFlight, RebilledFinished: cluster.check.RebilledFinished,
		Seconds: round4(cluster.seconds), AdmissionsPerSecond: round4(cluster.admissionsPerSecond()),
		SingleNodeRequests: single.requests, SingleNodeProviderRejections: single.rejections,
		SingleNodeMaxAggregateRatio: round4(single.peak), SingleNodeSeconds: round4(single.seconds),
		SingleNodeAdmissionsPerSecond: round4(single.admissionsPerSecond()), StuckRuns: cluster.check.StuckRuns,
		WallSeconds: round4(time.Since(began).Seconds()), Rolled: cluster.rolled, MaxStopSeconds: round4(cluster.maxStop.Seconds()), RunsAtStops: cluster.atStops,
	}
	if *asJSON {
		if err := json.NewEncoder(env.stdout).Encode(rep); err != nil {
			return err
		}
	} else if *rolling {
		fmt.Fprintf(env.stdout, "nodes %d  rolled %d (runs under way at the stops %d, the longest stop %.2fs)  events %d  limits %s  requests %d  provider rejections %d  lost %d  duplicates %d  stuck %d\n"+
			"max aggregate ratio %.4f (%s)  %.1f admissions/s over %.1fs  post retries %d  re-billed in flight %d, finished %d  wall %.1fs\n",
			rep.Nodes, rep.Rolled, rep.RunsAtStops, rep.MaxStopSeconds, rep.Events, rep.Limits, rep.Requests, rep.ProviderRejections, rep.Lost, rep.Duplicates, rep.Stuck,
			rep.MaxAggregateRatio, rep.MaxAggregateLimit, rep.AdmissionsPerSecond, rep.Seconds, rep.PostRetries,
			rep.RebilledInFlight, rep.RebilledFinished, rep.WallSeconds)
		for _, r := range rep.StuckRuns {
			fmt.Fprintln(env.stdout, "stuck:", r)
		}
	} else {
		fmt.Fprintf(env.stdout, "nodes %d  killed %d  events %d  limits %s  requests %d  provider rejections %d  lost %d  duplicates %d  stuck %d\n"+
			"max aggregate ratio %.4f (%s)  utilization of %s %.4f  single node %.4f (%.2f of it)\n"+
			"%.1f admissions/s over %.1fs (single node %.1f over %.1fs)  post retries %d  adopted runs %d  re-billed in flight %d, finished %d  wall %.1fs\n",
			rep.Nodes, rep.Killed, rep.Events, rep.Limits, rep.Requests, rep.ProviderRejections, rep.Lost, rep.Duplicates, rep.Stuck,
			rep.MaxAggregateRatio, rep.MaxAggregateLimit, rep.Bottleneck, rep.Utilization, rep.SingleNodeUtilization, rep.Utilization/rep.SingleNodeUtilization,
			rep.AdmissionsPerSecond, rep.Seconds, rep.SingleNodeAdmissionsPerSecond, rep.SingleNodeSeconds, rep.PostRetries, rep.AdoptedRuns,
			rep.RebilledInFlight, rep.RebilledFinished, rep.WallSeconds)
		for _, r := range rep.StuckRuns {
			fmt.Fprintln(env.stdout, "stuck:", r)
		}
	}
	for _, r := range []multinodeRun{single, cluster} {
		if r.logs != "" {
			fmt.Fprintln(env.stderr, r.logs)
		}
	}
	switch {
	case rep.ProviderRejections > 0 || single.rejections > 0:
		return fmt.Errorf("the provider refused %d calls of the cluster and %d of the single node: the governor must send none it refuses", rep.ProviderRejections, single.rejections)
	case rep.MaxAggregateRatio > 1 || single.peak > 1:
		return fmt.Errorf("a window held %.4f of %s's limit: the nodes together must stay within it", rep.MaxAggregateRatio, rep.MaxAggregateLimit)
	case rep.Lost > 0 || rep.Duplicates > 0 || single.lost > 0 || single.check.DuplicateSaves > 0:
		return fmt.Errorf("%d runs lost and %d documents saved twice in the cluster, %d and %d on the single node", rep.Lost, rep.Duplicates, single.lost, single.check.DuplicateSaves)
	case rep.RebilledFinished > 0:
		return fmt.Errorf("%d calls re-billed after their step was recorded", rep.RebilledFinished)
	case rep.Stuck > 0:
		return fmt.Errorf("%d runs did not complete", rep.Stuck)
	case *rolling && rep.Rolled != *nodes:
		return fmt.Errorf("%d of %d nodes rolled", rep.Rolled, *nodes)
	case *rolling && cluster.maxStop > *stopGrace+2*time.Second:
		return fmt.Errorf("a stop took %s, want at most the grace %s plus 2s", cluster.maxStop.Round(time.Millisecond), *stopGrace)
	}
	return nil
}

// multinodeBench is one invocation's settings.
type multinodeBench struct {
	exe, admin, tag string // admin: the --db server; tag names the databases
	events          int
	limits          governor.Limits
	latency         time.Duration
	leaseTTL        time.Duration
	restartAfter    time.Duration // negative: never
	adoptEvery      time.Duration
	timeout         time.Duration
	seed            uint64
	token           string
	rolling         bool          // a rolling deploy instead of kills
	stopGrace       time.Duration // the nodes' --stop-grace
}

// multinodeRun is what one run (the single node's or the cluster's)
// measured.
type multinodeRun struct {
	requests, rejections int
	rejectedBy           map[string]int64
	peak                 float64
	peakLimit            string
	bottleneck           string
	utilization          float64
	admitted             int64
	seconds              float64
	lost                 int
	postRetries          int
	adopted              int // runs of killed nodes the live ones handed back to their queues
	check                crashReport
	logs                 string        // the end of the nodes' output, when something went wrong
	rolled               int           // nodes stopped and started again as a new build (--rolling)
	maxStop              time.Duration // the longest of those stops
	atStops              int           // runs under way on them at their stops
}

func (r multinodeRun) admissionsPerSecond() float64 {
	if r.seconds <= 0 {
		return 0
	}
	return float64(r.admitted) / r.seconds
}

// run starts n nodes on a new database and a new simulator, posts the
// documents, kills and restarts kill nodes midway, waits for every run to
// end, stops the nodes and measures.
func (b *multinodeBench) run(ctx context.Context, name string, n, kill int) (multinodeRun, error) {
	var res multinodeRun
	db, drop, err := (&backfillBench{admin: b.admin, tag: b.tag}).freshDB(ctx, name)
	if err != nil {
		return res, err
	}
	defer drop()
	// The pipeline's first saves on a new PostgreSQL database race to
	// create its table (see summarize.Schema), and the check counts saves
	// in it: create it first.
	bdb, err := openBenchDB(ctx, db)
	if err != nil {
		return res, err
	}
	err = bdb.exec(ctx, summarize.Schema)
	bdb.close()
	if err != nil {
		return res, fmt.Errorf("create %s: %w", summarize.Table, err)
	}
	model, err := forecast.NewModel(forecast.ModelConfig{Profile: "groq", Limits: b.limits, Latency: b.latency, Seed: int64(b.seed), Wire: true})
	if err != nil {
		return res, err
	}
	var calls callLog
	var span admissionSpan
	provider := sim.NewServer(model, sim.ServerConfig{OnFinish: func(c sim.Call) {
		calls.add(0, c) // the nodes share the server: in-flight re-bills are not charged to a kill
		span.add(c.Start)
	}})
	if err := provider.Start(ctx); err != nil {
		return res, err
	}
	defer provider.Stop(context.Background())

	c := &multinodeCluster{b: b, db: db, provider: "http://" + provider.Addr() + "/v1", client: &http.Client{Timeout: 30 * time.Second}}
	defer c.killAll()
	if err := c.start(ctx, n); err != nil {
		return res, err
	}
	began := time.Now()
	deadline := began.Add(b.timeout)
	var rolled chan error
	for i := range b.events {
		if i == b.events/2 && kill > 0 {
			c.kill(ctx, kill)
		}
		if i == b.events/3 && b.rolling {
			rolled = make(chan error, 1)
			go func() { rolled <- c.roll(ctx) }()
		}
		if err := c.post(ctx, i, deadline); err != nil {
			return res, err
		}
	}
	if rolled != nil {
		if err := <-rolled; err != nil {
			return res, err
		}
		res.rolled, res.maxStop, res.atStops = c.rolled, c.maxStop, c.atStops
	}
	if err := c.waitRestarts(); err != nil {
		return res, err
	}
	if err := c.waitRuns(ctx, b.events, deadline); err != nil {
		return res, err
	}
	res.seconds = time.Since(began).Seconds()
	if err := c.stop(); err != nil {
		return res, err
	}
	res.postRetries = c.retries
	res.adopted = c.adopted()

	if err := crashCheck(ctx, db, &res.check, b.events, calls.snapshot(), nil); err != nil {
		return res, err
	}
	res.lost = max(res.check.Lost, b.events-res.check.Completed)
	st := model.Stats()
	res.requests, res.rejections, res.admitted = calls.answered(), int(st.Rejected), st.Succeeded
	if res.lost > 0 || res.check.DuplicateSaves > 0 || res.rejections > 0 {
		res.logs = c.outputs()
	}
	for _, f := range st.Faults {
		res.admitted += f
	}
	first, last := span.bounds()
	for _, l := range governor.AllLimits {
		if b.limits[l] == 0 {
			continue
		}
		if n := st.RejectedByLimit[l]; n > 0 {
			if res.rejectedBy == nil {
				res.rejectedBy = map[string]int64{}
			}
			res.rejectedBy[l.String()] = n
		}
		if st.Peak[l] > res.peak || res.peakLimit == "" {
			res.peak, res.peakLimit = st.Peak[l], l.String()
		}
		if u := utilization(st.Charged.On(l), b.limits[l], l.Period(), last.Sub(first)); u > res.utilization || res.bottleneck == "" {
			res.utilization, res.bottleneck = u, l.String()
		}
	}
	return res, nil
}

// utilization is the share of a limit's capacity a run used: used ÷
// (limit × elapsed ÷ period), elapsed being the time the run's charges held
// the key, from its first admission until its last charge aged out of the
// window (span + period). A window holds at most the limit at any moment,
// so no run can use more than limit × (span + period) ÷ period: 1 means
// every window of the run was full. A run that spans few periods cannot
// reach 1 unless its work fills its last window too.
func utilization(used, limit int64, period, span time.Duration) float64 {
	if limit <= 0 {
		return 0
	}
	return float64(used) / (float64(limit) * float64(span+period) / float64(period))
}

func round4(x float64) float64 { return math.Round(x*1e4) / 1e4 }

// admissionSpan is when the simulator admitted its first and last calls.
type admissionSpan struct {
	mu          sync.Mutex
	first, last time.Time
}

func (s *admissionSpan) add(at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.first.IsZero() || at.Before(s.first) {
		s.first = at
	}
	if at.After(s.last) {
		s.last = at
	}
}

func (s *admissionSpan) bounds() (first, last time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first, s.last
}

// multinodeCluster is the nodes of one run.
type multinodeCluster struct {
	b        *multinodeBench
	db       string
	provider string
	client   *http.Client

	rolled  int           // nodes rolled (roll)
	maxStop time.Duration // the longest stop of a rolled node
	atStops int           // runs under way on the rolled nodes when they were stopped

	mu       sync.Mutex
	live     []*multinodeNode // serving: posts go to them in turn
	all      []*multinodeNode // every process started, killed ones included
	next     int              // the live node the next post goes to
	retries  int
	restarts sync.WaitGroup
	failed   error // the first restart that failed
}

// multinodeNode is one "serve --node" process.
type multinodeNode struct {
	name string
	url  string // http://ADDR, once it listens
	proc *crashWorkerProc
}

// start starts nodes n0 … n(n-1) together, as a deployment's processes
// start, and waits until each is ready.
func (c *multinodeCluster) start(ctx context.Context, n int) error {
	errs := make([]error, n)
	nodes := make([]*multinodeNode, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { nodes[i], errs[i] = c.startNode(ctx, c.b.exe, "n"+strconv.Itoa(i)) })
	}
	wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, nd := range nodes {
		if nd != nil {
			c.live = append(c.live, nd)
		}
	}
	return errors.Join(errs...)
}

// startNode starts "exe serve --node name" and returns once it is ready.
func (c *multinodeCluster) startNode(ctx context.Context, exe, name string) (*multinodeNode, error) {
	b := c.b
	cmd := exec.CommandContext(ctx, exe, "serve", "--node", name, "--db", c.db, // #nosec G204 -- this binary, or a copy of it
		"--provider-url", c.provider, "--profile", "groq", "--limits", b.limits.String(), "--lease-ttl", b.leaseTTL.String(),
		"--adopt-every", b.adoptEvery.String(), "--addr", "127.0.0.1:0", "--token-env", multinodeTokenEnv,
		"--stop-grace", b.stopGrace.String())
	cmd.Env = append(os.Environ(), multinodeNodeEnv+"="+name, multinodeTokenEnv+"="+b.token)
	p := &crashWorkerProc{cmd: cmd, done: make(chan error, 1), ready: make(chan struct{})}
	nd := &multinodeNode{name: name, proc: p}
	cmd.Stderr = p
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start node %s: %w", name, err)
	}
	c.mu.Lock()
	c.all = append(c.all, nd)
	c.mu.Unlock()
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			// serve says where it listens before anything else.
			if addr, ok := strings.CutPrefix(sc.Text(), "listening on "); ok && nd.url == "" {
				nd.url = addr
				close(p.ready)
			}
			_, _ = p.Write(append(sc.Bytes(), '\n'))
		}
		_, _ = io.Copy(io.Discard, stdout)
		p.done <- cmd.Wait()
	}()
	fail := func(err error) (*multinodeNode, error) {
		p.kill()
		return nil, fmt.Errorf("node %s: %w\n%s", name, err, p.output())
	}
	if err := p.waitReady(ctx); err != nil {
		return fail(err)
	}
	// It listens at once; /readyz answers 200 once its runs are resumed.
	for deadline := time.Now().Add(2 * time.Minute); !c.ready(ctx, nd); {
		if time.Now().After(deadline) {
			return fail(errors.New("not ready after 2m"))
		}
		if err := p.sleep(ctx, 50*time.Millisecond); err != nil {
			return fail(err)
		}
	}
	return nd, nil
}

func (c *multinodeCluster) ready(ctx context.Context, nd *multinodeNode) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, nd.url+"/readyz", nil)
	if err != nil {
		return false
	}
	req.Header.Set("Authorization", "Bearer "+c.b.token)
	resp, err := c.client.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// post sends document i's event to the live nodes in turn until one
// accepts it: sent again, an event ID starts nothing new.
func (c *multinodeCluster) post(ctx context.Context, i int, deadline time.Time) error {
	doc := fmt.Sprintf("doc-%06d", i)
	body, _ := json.Marshal(map[string]any{"name": summarize.Event, "id": "upload-" + doc, "data": summarize.Doc{DocumentID: doc}})
	var last error
	for attempt := 0; ; attempt++ {
		if time.Now().After(deadline) {
			return fmt.Errorf("post %s: not accepted before the deadline: %v", doc, last)
		}
		nd, nodes := c.pick(attempt > 0)
		if nd == nil {
			last = errors.New("no node is live")
		} else if last = c.send(ctx, nd, body); last == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if attempt%nodes == nodes-1 { // every node was tried
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// pick returns the live node whose turn it is (nil if none is) and how
// many nodes were started; retry counts the post as sent again.
func (c *multinodeCluster) pick(retry bool) (*multinodeNode, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if retry {
		c.retries++
	}
	if len(c.live) == 0 {
		return nil, len(c.all)
	}
	nd := c.live[c.next%len(c.live)]
	c.next++
	return nd, len(c.all)
}

func (c *multinodeCluster) send(ctx context.Context, nd *multinodeNode, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, nd.url+"/v1/events", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.b.token)
	resp, err := c.client.Do(req)
	if err != nil {
		return fmt.Errorf("node %s: %w", nd.name, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("node %s: HTTP %d: %.200s", nd.name, resp.StatusCode, out)
	}
	return nil
}

// kill SIGKILLs the k live nodes with the most runs under way (a node
// killed idle would leave nothing to take over) and, unless restartAfter is
// negative, restarts each with its name restartAfter later; it returns when
// each was killed.
func (c *multinodeCluster) kill(ctx context.Context, k int) {
	busy := c.runsUnderWay(ctx)
	c.mu.Lock()
	slices.SortStableFunc(c.live, func(a, b *multinodeNode) int { return cmp.Compare(busy[a.name], busy[b.name]) })
	victims := c.live[len(c.live)-k:]
	c.live = c.live[: len(c.live)-k : len(c.live)-k]
	c.mu.Unlock()
	for _, nd := range victims {
		nd.proc.kill() // SIGKILL: no shutdown, no lease settled
		if c.b.restartAfter < 0 {
			continue
		}
		c.restarts.Go(func() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(c.b.restartAfter):
			}
			again, err := c.startNode(ctx, c.b.exe, nd.name)
			c.mu.Lock()
			defer c.mu.Unlock()
			if err != nil {
				if c.failed == nil {
					c.failed = fmt.Errorf("restart: %w", err)
				}
				return
			}
			c.live = append(c.live, again)
		})
	}
}

// roll stops each live node in turn with SIGTERM, as a deploy does, and
// starts it again with its name as a new build of the binary, while posts
// go to the other nodes; it fails if a node does not exit by itself with
// status 0.
func (c *multinodeCluster) roll(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "sluice-rolling")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	for i, nd := range c.liveNodes() {
		exe, err := newBuild(c.b.exe, dir, i+1)
		if err != nil {
			return err
		}
		c.mu.Lock()
		c.live = slices.DeleteFunc(c.live, func(n *multinodeNode) bool { return n == nd })
		c.mu.Unlock()
		// A deploy stops a node at work: wait until it has runs under
		// way, unless none is left to run.
		for {
			busy := c.runsUnderWay(ctx)
			if n := busy[nd.name]; n > 0 || c.unfinished(ctx) == 0 {
				c.atStops += n
				break
			}
			if err := nd.proc.sleep(ctx, 20*time.Millisecond); err != nil {
				return fmt.Errorf("node %s: %w", nd.name, err)
			}
		}
		// Given long enough to be measured: the report fails a stop
		// longer than the grace plus 2s.
		took, err := nd.proc.term(ctx, c.b.stopGrace+time.Minute)
		if err != nil {
			return fmt.Errorf("node %s after SIGTERM: %v\n%s", nd.name, err, nd.proc.output())
		}
		c.maxStop = max(c.maxStop, took)
		again, err := c.startNode(ctx, exe, nd.name)
		if err != nil {
			return fmt.Errorf("start node %s again: %w", nd.name, err)
		}
		c.mu.Lock()
		c.live = append(c.live, again)
		c.mu.Unlock()
		c.rolled++
	}
	return nil
}

// newBuild copies the binary exe into dir as build n, with n's mark
// appended after its end: it runs as exe does, but its bytes, and so its
// hash, differ, as a rebuilt binary's would.
func newBuild(exe, dir string, n int) (string, error) {
	b, err := os.ReadFile(exe) // #nosec G304 -- this binary
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, fmt.Sprintf("sluice-build-%d", n))
	b = append(b, fmt.Sprintf("\nsluice rolling-deploy build %d\n", n)...)
	if err := os.WriteFile(path, b, 0o755); err != nil { // #nosec G306 -- an executable for this bench
		return "", err
	}
	return path, nil
}

func (c *multinodeCluster) waitRestarts() error {
	c.restarts.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failed
}

// waitRuns waits until n runs exist and every one has ended, or the
// deadline passes (the runs not ended then are lost); it fails if a live
// node exits.
func (c *multinodeCluster) waitRuns(ctx context.Context, n int, deadline time.Time) error {
	db, err := openBenchDB(ctx, c.db)
	if err != nil {
		return err
	}
	defer db.close()
	q := `SELECT COUNT(*), COUNT(*) FILTER (WHERE status NOT IN ($2, $3, $4, $5)) FROM ` + db.table("workflow_status") + ` WHERE name = $1`
	args := []any{summarize.FunctionID, string(dbos.WorkflowStatusSuccess), string(dbos.WorkflowStatusError),
		string(dbos.WorkflowStatusCancelled), string(dbos.WorkflowStatusMaxRecoveryAttemptsExceeded)}
	for {
		var runs, pending int64
		if err := db.each(ctx, q, args, func(scan func(...any) error) error { return scan(&runs, &pending) }); err != nil {
			return fmt.Errorf("count runs: %w", err)
		}
		if runs >= int64(n) && pending == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return nil
		}
		for _, nd := range c.liveNodes() {
			select {
			case err := <-nd.proc.done:
				nd.proc.done <- err
				return fmt.Errorf("node %s exited: %v\n%s", nd.name, err, nd.proc.output())
			default:
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *multinodeCluster) liveNodes() []*multinodeNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*multinodeNode(nil), c.live...)
}

// runsUnderWay counts each executor's pending runs (none when the database
// cannot say: the kill then takes the last nodes started).
func (c *multinodeCluster) runsUnderWay(ctx context.Context) map[string]int {
	n := map[string]int{}
	db, err := openBenchDB(ctx, c.db)
	if err != nil {
		return n
	}
	defer db.close()
	_ = db.each(ctx, `SELECT executor_id, count(*) FROM dbos.workflow_status WHERE status = 'PENDING' GROUP BY executor_id`, nil,
		func(scan func(...any) error) error {
			var ex string
			var k int
			if err := scan(&ex, &k); err != nil {
				return err
			}
			n[ex] = k
			return nil
		})
	return n
}

// unfinished counts the pipeline's runs that have not ended (-1 when the
// database cannot say).
func (c *multinodeCluster) unfinished(ctx context.Context) int {
	db, err := openBenchDB(ctx, c.db)
	if err != nil {
		return -1
	}
	defer db.close()
	n := -1
	_ = db.each(ctx, `SELECT count(*) FROM dbos.workflow_status WHERE name = $1 AND status IN ('PENDING', 'ENQUEUED')`,
		[]any{summarize.FunctionID}, func(scan func(...any) error) error { return scan(&n) })
	return n
}

// adoptedLine is what a node logs when it hands the runs of a node that no
// longer runs back to their queues, with their number after it
// (runs=N in text, "runs":N in JSON).
var adoptedLine = regexp.MustCompile(`handed the unfinished runs of a process that stopped back to their queues.*?\bruns"?[=:](\d+)`)

// adopted counts the runs the nodes handed back, as they logged them.
func (c *multinodeCluster) adopted() int {
	c.mu.Lock()
	all := append([]*multinodeNode(nil), c.all...)
	c.mu.Unlock()
	n := 0
	for _, nd := range all {
		for _, m := range adoptedLine.FindAllStringSubmatch(nd.proc.output(), -1) {
			k, _ := strconv.Atoi(m[1])
			n += k
		}
	}
	return n
}

// outputs is the end of each process's output, for a failure's message.
func (c *multinodeCluster) outputs() string {
	c.mu.Lock()
	all := append([]*multinodeNode(nil), c.all...)
	c.mu.Unlock()
	var sb strings.Builder
	for _, nd := range all {
		out := nd.proc.output()
		if len(out) > 4000 {
			out = "…" + out[len(out)-4000:]
		}
		fmt.Fprintf(&sb, "\n--- node %s:\n%s", nd.name, out)
	}
	return sb.String()
}

// stop interrupts every live node and waits for it to exit: a node that
// fails to stop within 30 s, or exits with an error, fails the run.
func (c *multinodeCluster) stop() error {
	live := c.liveNodes()
	errs := make([]error, len(live))
	var wg sync.WaitGroup
	for i, nd := range live {
		wg.Go(func() {
			_ = nd.proc.cmd.Process.Signal(os.Interrupt)
			t := time.NewTimer(30 * time.Second)
			defer t.Stop()
			select {
			case err := <-nd.proc.done:
				nd.proc.done <- err
				if err != nil {
					errs[i] = fmt.Errorf("node %s stopped: %v\n%s", nd.name, err, nd.proc.output())
				}
			case <-t.C:
				nd.proc.kill()
				errs[i] = fmt.Errorf("node %s did not stop within 30s of an interrupt\n%s", nd.name, nd.proc.output())
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// killAll SIGKILLs whatever still runs (after a failure); stopped and
// killed nodes have exited already.
func (c *multinodeCluster) killAll() {
	c.restarts.Wait()
	c.mu.Lock()
	all := append([]*multinodeNode(nil), c.all...)
	c.mu.Unlock()
	for _, nd := range all {
		nd.proc.kill()
	}
}
