package benchcmd

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/examples/summarize"
	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/govtext"
	"github.com/sluice-dev/sluice/internal/sim"
)

// Every node is "serve --node NAME" of this same binary; the simulator stays
// in the parent, so that it sees the calls of all nodes on one key and its
// log survives the kills.
const (
	// MultinodeNodeEnv is set, to the node's name, in each node's
	// environment: the tests re-execute their binary as the node.
	MultinodeNodeEnv = "SLUICE_BENCH_MULTINODE_NODE"
	// multinodeTokenEnv holds the nodes' API token, new in every run.
	multinodeTokenEnv = "SLUICE_BENCH_MULTINODE_TOKEN"
)

func newMultinodeCommand(Config) *cli.Command {
	return &cli.Command{
		Name:    "multinode",
		Summary: "run the summarize pipeline on N \"serve --node\" processes sharing one key on PostgreSQL, SIGKILL some; check the aggregate limits hold and nothing is lost",
		Run:     runBenchMultinode,
	}
}

// MultinodeReport is the multinode bench's report, as --json prints it.
type MultinodeReport struct {
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
	// DayPaceRatio is, when a day limit applies, the cluster's spend of
	// it per second over the single node's: one pace for the cluster is
	// 1 (it was the number of nodes while each paced the day alone).
	DayPaceRatio float64 `json:"day_pace_ratio,omitempty"`
	DayLimit     string  `json:"day_limit,omitempty"`
	// StuckRuns lists the runs that did not complete: ID, status, error.
	StuckRuns []string `json:"stuck_runs,omitempty"`
}

func runBenchMultinode(ctx context.Context, env *cli.Env, args []string) error {
	b, nodes, kill, asJSON, err := parseMultinodeFlags(env, args)
	if err != nil {
		return err
	}
	began := time.Now()
	var single multinodeRun
	if !b.rolling {
		if single, err = b.run(ctx, "single", 1, 0); err != nil {
			return fmt.Errorf("single node: %w", err)
		}
	}
	cluster, err := b.run(ctx, "cluster", nodes, kill)
	if err != nil {
		return fmt.Errorf("%d nodes: %w", nodes, err)
	}
	rep := MultinodeReport{
		Nodes: nodes, Killed: kill, Requests: cluster.requests, ProviderRejections: cluster.rejections,
		Lost: cluster.lost, Duplicates: cluster.check.DuplicateSaves, MaxAggregateRatio: round4(cluster.peak),
		Utilization: round4(cluster.utilization), SingleNodeUtilization: round4(single.utilization),
		Events: b.events, Limits: b.limits.String(), Bottleneck: cluster.bottleneck, MaxAggregateLimit: cluster.peakLimit,
		ProviderRejectionsByLimit: cluster.rejectedBy, Stuck: cluster.check.Stuck, PostRetries: cluster.postRetries, AdoptedRuns: cluster.adopted,
		RebilledInFlight: cluster.check.RebilledInFlight, RebilledFinished: cluster.check.RebilledFinished,
		Seconds: round4(cluster.seconds), AdmissionsPerSecond: round4(cluster.admissionsPerSecond()),
		SingleNodeRequests: single.requests, SingleNodeProviderRejections: single.rejections,
		SingleNodeMaxAggregateRatio: round4(single.peak), SingleNodeSeconds: round4(single.seconds),
		SingleNodeAdmissionsPerSecond: round4(single.admissionsPerSecond()), StuckRuns: cluster.check.StuckRuns,
		DayPaceRatio: round4(single.dayPaceRatio(cluster)), DayLimit: cluster.dayLimit,
		WallSeconds: round4(time.Since(began).Seconds()), Rolled: cluster.rolled, MaxStopSeconds: round4(cluster.maxStop.Seconds()), RunsAtStops: cluster.atStops,
	}
	if err := printReport(env.Stdout, asJSON, "", rep, func(w io.Writer) { printMultinodeReport(w, rep, b.rolling) }); err != nil {
		return err
	}
	for _, r := range []multinodeRun{single, cluster} {
		if r.logs != "" {
			fmt.Fprintln(env.Stderr, r.logs)
		}
	}
	return b.verdict(rep, single, cluster)
}

// parseMultinodeFlags reads the flags into the bench's settings, checked:
// the cluster's nodes, how many to kill, and whether to print JSON.
func parseMultinodeFlags(env *cli.Env, args []string) (b *multinodeBench, nodes, kill int, asJSON bool, err error) {
	fs := cli.NewFlagSet(env, "bench multinode", "--db postgres://… [flags]",
		"Runs examples/summarize on --nodes \"sluice serve --node nI\" processes of this binary on one\n"+
			"PostgreSQL database, all calling one provider simulator with --limits. First one node alone,\n"+
			"then the cluster, each on a new database of the --db server: --events documents are posted\n"+
			"round-robin; once half were answered, --kill nodes are SIGKILLed, and the live nodes resume\n"+
			"their unfinished runs (or, with --restart-after, each is restarted with its name). Reports the\n"+
			"simulator's rejections (must be 0) and the highest ratio of any limit's window, all nodes\n"+
			"together, to the limit (must be at most 1), runs lost and documents saved twice (must be 0),\n"+
			"and the bottleneck limit's utilization of the cluster beside the single node's.\n"+
			"See docs/bench.md and docs/multinode.md.")
	b = &multinodeBench{tag: "multinode_" + strconv.FormatInt(time.Now().UnixNano(), 36)}
	fs.IntVar(&nodes, "nodes", 3, "processes in the cluster run (1 to 8)")
	fs.IntVar(&kill, "kill", 1, "nodes to SIGKILL midway (0 to nodes-1)")
	fs.StringVar(&b.admin, "db", "", "PostgreSQL server, a postgres://… URL: each run gets a new database on it, dropped after (required)")
	fs.IntVar(&b.events, "events", 600, "documents to post (one run, two LLM calls each)")
	limitsF := fs.String("limits", "rpm=2000,tpm=1000000,otpm=72000", "the key's limits, in the simulator and on every node: tight enough that they, not the CPU, bound the run")
	fs.DurationVar(&b.latency, "latency", 200*time.Millisecond, "mean response time of the simulated provider")
	fs.DurationVar(&b.leaseTTL, "lease-ttl", 2*time.Second, "the nodes' --lease-ttl")
	fs.DurationVar(&b.dayBurst, "day-burst", 0, "the nodes' --day-burst, for --limits with a day limit (0: serve's default)")
	fs.DurationVar(&b.restartAfter, "restart-after", -1, "restart each killed node with its name this long after its kill (negative: never; the live nodes resume its runs)")
	fs.DurationVar(&b.adoptEvery, "adopt-every", time.Second, "the nodes' --adopt-every: how often each looks for the runs of nodes that no longer run")
	fs.DurationVar(&b.timeout, "timeout", 5*time.Minute, "deadline of each run, from its first post to the end of its last document's run")
	fs.Uint64Var(&b.seed, "seed", 1, "seed of the simulator")
	fs.BoolVar(&b.rolling, "rolling", false, "a rolling deploy instead of kills: once a third of the documents were posted, stop each node in turn with SIGTERM and start it again as a new build of the binary (a copy whose bytes, and so whose hash, differ), while posts go on; no single-node run")
	fs.DurationVar(&b.stopGrace, "stop-grace", 5*time.Second, "the nodes' --stop-grace; with --rolling a stop must end within it plus 2s")
	fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
	if err = cli.ParseFlags(fs, env, args); err != nil {
		return nil, 0, 0, false, err
	}
	var limitsErr error
	b.limits, limitsErr = govtext.Limits(*limitsF)
	err = cmp.Or(
		refuseIf(b.rolling && kill != 0, "--rolling stops the nodes one by one: use it with --kill 0"),
		between("stop-grace", b.stopGrace, 0, time.Hour),
		between("nodes", nodes, 1, 8),
		refuseIf(kill < 0 || kill >= nodes, "--kill must be between 0 and %d (--nodes - 1)", nodes-1),
		refuseIf(!cli.IsPostgresURL(b.admin), "--db must be a postgres:// URL: the nodes share one PostgreSQL database"),
		between("events", b.events, 2, 100_000),
		wrapIf(limitsErr, "--limits"),
		between("latency", b.latency, 0, time.Minute),
		between("lease-ttl", b.leaseTTL, time.Millisecond, time.Hour),
		refuseIf(b.dayBurst < 0 || b.dayBurst > 24*time.Hour, "--day-burst must be from 0 to 24h"),
		refuseIf(b.restartAfter > 10*time.Minute, "--restart-after must be at most 10m (negative: never)"),
		refuseIf(b.adoptEvery == 0 || b.adoptEvery > time.Hour, "--adopt-every must be at most 1h, and not 0 (negative: never)"),
		refuseIf(b.timeout < time.Second, "--timeout must be at least 1s"),
	)
	if err != nil {
		return nil, 0, 0, false, err
	}
	if b.exe, err = os.Executable(); err != nil {
		return nil, 0, 0, false, err
	}
	var tok [16]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return nil, 0, 0, false, err
	}
	b.token = hex.EncodeToString(tok[:])
	return b, nodes, kill, asJSON, nil
}

func printMultinodeReport(w io.Writer, rep MultinodeReport, rolling bool) {
	if rolling {
		fmt.Fprintf(w, "nodes %d  rolled %d (runs under way at the stops %d, the longest stop %.2fs)  events %d  limits %s  requests %d  provider rejections %d  lost %d  duplicates %d  stuck %d\n"+
			"max aggregate ratio %.4f (%s)  %.1f admissions/s over %.1fs  post retries %d  re-billed in flight %d, finished %d  wall %.1fs\n",
			rep.Nodes, rep.Rolled, rep.RunsAtStops, rep.MaxStopSeconds, rep.Events, rep.Limits, rep.Requests, rep.ProviderRejections, rep.Lost, rep.Duplicates, rep.Stuck,
			rep.MaxAggregateRatio, rep.MaxAggregateLimit, rep.AdmissionsPerSecond, rep.Seconds, rep.PostRetries,
			rep.RebilledInFlight, rep.RebilledFinished, rep.WallSeconds)
	} else {
		fmt.Fprintf(w, "nodes %d  killed %d  events %d  limits %s  requests %d  provider rejections %d  lost %d  duplicates %d  stuck %d\n"+
			"max aggregate ratio %.4f (%s)  utilization of %s %.4f  single node %.4f (%.2f of it)\n"+
			"%.1f admissions/s over %.1fs (single node %.1f over %.1fs)  post retries %d  adopted runs %d  re-billed in flight %d, finished %d  wall %.1fs\n",
			rep.Nodes, rep.Killed, rep.Events, rep.Limits, rep.Requests, rep.ProviderRejections, rep.Lost, rep.Duplicates, rep.Stuck,
			rep.MaxAggregateRatio, rep.MaxAggregateLimit, rep.Bottleneck, rep.Utilization, rep.SingleNodeUtilization, rep.Utilization/rep.SingleNodeUtilization,
			rep.AdmissionsPerSecond, rep.Seconds, rep.SingleNodeAdmissionsPerSecond, rep.SingleNodeSeconds, rep.PostRetries, rep.AdoptedRuns,
			rep.RebilledInFlight, rep.RebilledFinished, rep.WallSeconds)
	}
	if rep.DayLimit != "" && !rolling {
		fmt.Fprintf(w, "day limit %s: the cluster spends it at %.3f × the single node's pace\n", rep.DayLimit, rep.DayPaceRatio)
	}
	for _, r := range rep.StuckRuns {
		fmt.Fprintln(w, "stuck:", r)
	}
}

// verdict fails a run that broke what must hold.
func (b *multinodeBench) verdict(rep MultinodeReport, single, cluster multinodeRun) error {
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
	case b.rolling && rep.Rolled != rep.Nodes:
		return fmt.Errorf("%d of %d nodes rolled", rep.Rolled, rep.Nodes)
	case b.rolling && cluster.maxStop > b.stopGrace+2*time.Second:
		return fmt.Errorf("a stop took %s, want at most the grace %s plus 2s", cluster.maxStop.Round(time.Millisecond), b.stopGrace)
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
	dayBurst        time.Duration // the nodes' --day-burst; 0: their default
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
	dayLimit             string        // the day limit spent fastest, of its limit; "" when none applies
	daySpend             float64       // its units charged per second of the run
	dayOf                int64         // its limit
}

// dayPaceRatio is how fast other spent the day limit beside r, 0 when
// either spent none.
func (r multinodeRun) dayPaceRatio(other multinodeRun) float64 {
	if r.daySpend <= 0 || other.daySpend <= 0 {
		return 0
	}
	return other.daySpend / r.daySpend
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
	db, drop, err := freshDB(ctx, "", b.admin, b.tag, name)
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
	var calls callLog
	var span admissionSpan
	model, provider, err := startSim(ctx, forecast.ModelConfig{Profile: "groq", Limits: b.limits, Latency: b.latency, Seed: int64(b.seed), Wire: true},
		sim.ServerConfig{OnFinish: func(c sim.Call) {
			calls.add(0, c) // the nodes share the server: in-flight re-bills are not charged to a kill
			span.add(c.Start)
		}})
	if err != nil {
		return res, err
	}
	defer provider.Stop(context.Background())

	c := &multinodeCluster{b: b, db: db, provider: simURL(provider), client: &http.Client{Timeout: 30 * time.Second}}
	defer c.killAll()
	if err := c.start(ctx, n); err != nil {
		return res, err
	}
	// DBOS's tables exist once a node is ready.
	if c.runs, err = openDBOSRuns(ctx, db); err != nil {
		return res, err
	}
	defer c.runs.close()
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

	if err := crashCheck(ctx, db, c.runs, &res.check, b.events, calls.snapshot(), nil); err != nil {
		return res, err
	}
	res.lost = max(res.check.Lost, b.events-res.check.Completed)
	st := model.Stats()
	res.requests, res.rejections, res.admitted = calls.answered(), int(st.Rejected), st.Succeeded
	if res.lost > 0 || res.check.DuplicateSaves > 0 || res.rejections > 0 {
		res.logs = c.outputs()
	}
	res.measure(st, b.limits, &span)
	return res, nil
}

// measure reads the simulator's figures of the run: the calls it
// admitted, its rejections by limit, the fullest window of any limit and
// the bottleneck limit's utilization over the run's admissions.
func (res *multinodeRun) measure(st forecast.Stats, limits governor.Limits, span *admissionSpan) {
	for _, f := range st.Faults {
		res.admitted += f
	}
	first, last := span.bounds()
	for l := range governor.NumLimits {
		if limits[l] == 0 {
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
		if u := utilization(st.Charged.On(l), limits[l], l.Period(), last.Sub(first)); u > res.utilization || res.bottleneck == "" {
			res.utilization, res.bottleneck = u, l.String()
		}
		if span := last.Sub(first).Seconds(); l.Period() > time.Hour && span > 0 {
			// The day limit spent fastest, of its limit.
			v := float64(st.Charged.On(l)) / span
			if res.dayLimit == "" || v/float64(limits[l]) > res.daySpend/float64(res.dayOf) {
				res.dayLimit, res.daySpend, res.dayOf = l.String(), v, limits[l]
			}
		}
	}
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
