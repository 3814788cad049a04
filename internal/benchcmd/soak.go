package benchcmd

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/examples/summarize"
	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/govtext"
	"github.com/sluice-dev/sluice/internal/serveapp"
	"github.com/sluice-dev/sluice/internal/sim"
	"github.com/sluice-dev/sluice/llm"
)

func newSoakCommand(Config) *cli.Command {
	return &cli.Command{
		Name:    "soak",
		Summary: "run the summarize pipeline for an hour of compressed time against a faulty provider; check memory, goroutines, files and connections stay flat",
		Run:     runBenchSoak,
	}
}

// Tolerance of the flatness verdict: a series is flat when its last value is
// at most soakGrowth times its first plus the series' slack. The slack is
// what an idle process holds in varying amounts: the LLM client keeps up to
// 16 idle connections to the simulator, each 3 goroutines and 2 descriptors
// (both ends are in this process); the SQLite pool keeps up to 4 idle
// connections; the governor's and the simulator's rolling-minute ledgers
// hold a wall-clock minute of calls, which is speed times more calls than at
// real time (about 0.7 MB at 20×). A leak of one goroutine, descriptor or
// connection per run, or per faulted call, exceeds it within a few hundred
// runs, and one of 1.5 KB a run by the end of an hour's soak at the default
// rate (1,300 runs, warm-up included).
const soakGrowth = 1.2

// soakSlack is each series' absolute slack, in its unit.
var soakSlack = map[string]float64{
	"heap_bytes": 1 << 20,
	"goroutines": 50,
	"open_fds":   40,
	"db_conns":   4,
}

// maxSoakFailures bounds how many failed runs a soak report describes.
const maxSoakFailures = 10

type soakReport struct {
	Driver     string  `json:"driver"`       // sqlite or postgres
	Duration   string  `json:"duration"`     // of pipeline time, warm-up excluded
	Speed      float64 `json:"speed"`        // compression: pipeline time per wall time
	Wall       string  `json:"wall"`         // measured, warm-up and drains included
	RatePerMin float64 `json:"rate_per_min"` // documents sent per minute of pipeline time
	Sent       int     `json:"sent"`         // runs started, warm-up included
	Completed  int     `json:"completed"`    // runs that ended completed
	Failed     int     `json:"failed"`       // runs that ended any other way
	// Failures says how the first maxSoakFailures failed runs ended: their
	// ID, status, step and error.
	Failures    []string `json:"failures,omitempty"`
	LateSends   int      `json:"late_sends"`    // sends more than one interval behind schedule
	LLMRequests int64    `json:"llm_requests"`  // requests the simulator received
	LLMOK       int64    `json:"llm_succeeded"` // of them, answered 200 with a whole body
	// LLMFaults counts the simulator's injected faults by kind; LLMRejected
	// its rate-limit rejections (the governor should keep these near 0).
	LLMFaults   map[string]int64 `json:"llm_faults"`
	LLMRejected int64            `json:"llm_rejected"`
	Series      []soakSeries     `json:"series"`
	Flat        bool             `json:"flat"`      // every series is flat
	Tolerance   string           `json:"tolerance"` // the verdict's rule
	Samples     []soakSample     `json:"samples"`
}

// soakSeries is one measured quantity: First is taken idle after the
// warm-up, Last idle after the soak's runs have all ended, Max over every
// sample (under load too).
type soakSeries struct {
	Name  string  `json:"name"`
	First int64   `json:"first"`
	Last  int64   `json:"last"`
	Max   int64   `json:"max"`
	Slack float64 `json:"slack"`
	Flat  bool    `json:"flat"`
}

// soakSample is one reading of the process. At is pipeline time since the
// soak began (negative: warm-up).
type soakSample struct {
	Phase      string        `json:"phase"` // first, during, last
	At         time.Duration `json:"at_ns"`
	HeapBytes  int64         `json:"heap_bytes"` // live Go heap, as a forced GC marked it
	Goroutines int64         `json:"goroutines"`
	OpenFDs    int64         `json:"open_fds"` // -1 where /proc/self/fd is missing
	DBConns    int64         `json:"db_conns"` // -1 where it cannot be read
}

// soakOptions are the soak bench's flags, checked; limits and faults
// parsed, the limits multiplied by the speed.
type soakOptions struct {
	duration, warmup, every, drain time.Duration
	speed, rate                    float64
	dbURL, profiles                string
	latency, firstByte, runTimeout time.Duration
	limits                         governor.Limits
	faults                         forecast.Faults
	seed                           int64
	asJSON                         bool
}

func runBenchSoak(ctx context.Context, env *cli.Env, args []string) error {
	o, err := parseSoakFlags(env, args)
	if err != nil {
		return err
	}
	return runSoak(ctx, env, o)
}

func parseSoakFlags(env *cli.Env, args []string) (soakOptions, error) {
	var o soakOptions
	fs := cli.NewFlagSet(env, "bench soak", "[flags]",
		"Runs examples/summarize in this process against the provider simulator with faults, sending\n"+
			"documents at a steady rate for --duration of pipeline time, compressed --speed times: the\n"+
			"event rate and the per-minute limits are multiplied by the speed; the provider's latency,\n"+
			"the client's first-byte deadline (which ends the calls the provider never answers), the\n"+
			"retry backoff and the run deadline are divided by it. --duration 1h --speed 20 takes\n"+
			"3 minutes of wall time. A warm-up of --warmup runs first. The live Go heap, goroutines, open\n"+
			"file descriptors and database connections are sampled idle after the warm-up (first),\n"+
			"every --sample-every under load, and idle once every run has ended (last); a series is\n"+
			"flat when last ≤ first×1.2 + its slack.")
	fs.DurationVar(&o.duration, "duration", time.Hour, "pipeline time to send documents for")
	fs.Float64Var(&o.speed, "speed", 20, "compression: pipeline time per wall time (1 = real time)")
	fs.Float64Var(&o.rate, "rate", 20, "documents sent per minute of pipeline time")
	fs.DurationVar(&o.warmup, "warmup", 5*time.Minute, "pipeline time of traffic before the first sample")
	fs.DurationVar(&o.every, "sample-every", 10*time.Second, "wall time between samples under load")
	fs.StringVar(&o.dbURL, "db", "", "database: postgres://… URL, or an SQLite path (default: a new SQLite file in a temporary folder)")
	fs.DurationVar(&o.latency, "latency", 2*time.Second, "mean response time of the provider, in pipeline time")
	fs.DurationVar(&o.firstByte, "first-byte", 30*time.Second, "the client's first-byte deadline, which ends a call the provider never answers, in pipeline time")
	fs.DurationVar(&o.runTimeout, "run-timeout", 10*time.Minute, "deadline of each run from its start, in pipeline time")
	limitsF := fs.String("limits", "rpm=100,tpm=30000", "the key's per-minute limits, in pipeline time (rpm tpm itpm otpm; day limits cannot be compressed)")
	faultsF := fs.String("faults", "error_5xx=0.10,timeout=0.05,reset=0.02,bad_json=0.02", "fractions of admitted calls that fail")
	fs.DurationVar(&o.drain, "drain-timeout", 5*time.Minute, "wall time to wait for the runs in flight to end after sending stops")
	fs.Int64Var(&o.seed, "seed", 1, "seed of the simulator's faults, latency and output lengths")
	fs.StringVar(&o.profiles, "heap-profiles", "", "`DIR` to write heap profiles to at the first and last samples (first.pprof, last.pprof), for go tool pprof -diff_base")
	fs.BoolVar(&o.asJSON, "json", false, "print the report, every sample included, as JSON")
	if err := cli.ParseFlags(fs, env, args); err != nil {
		return o, err
	}
	if err := o.check(); err != nil {
		return o, err
	}
	var err error
	if o.limits, err = govtext.Limits(*limitsF); err != nil {
		return o, fmt.Errorf("--limits: %w", err)
	}
	for l := range governor.NumLimits {
		if o.limits[l] != 0 && l.Period() != time.Minute {
			return o, fmt.Errorf("--limits: %s counts over a day, which a compressed run cannot reproduce; give per-minute limits", l)
		}
		// Saturate: a scaled limit beyond any count is no limit at all.
		scaled := float64(o.limits[l]) * o.speed
		o.limits[l] = int64(min(scaled, math.MaxInt64/2))
	}
	if o.faults, err = forecast.ParseFaults(*faultsF); err != nil {
		return o, fmt.Errorf("--faults: %w", err)
	}
	return o, nil
}

// check bounds the flags: at most a day of pipeline time and a million
// runs; a wait compressed below a millisecond is a millisecond (scale).
func (o soakOptions) check() error {
	switch {
	case o.duration <= 0 || o.duration > 24*time.Hour:
		return fmt.Errorf("--duration %s: want more than 0 and at most 24h", o.duration)
	case !(o.speed >= 1 && o.speed <= 1000):
		return fmt.Errorf("--speed %g: want 1 to 1000", o.speed)
	case !(o.rate > 0 && o.rate <= 10000):
		return fmt.Errorf("--rate %g: want more than 0 and at most 10000 a minute", o.rate)
	case o.warmup < 0 || o.warmup > o.duration:
		return fmt.Errorf("--warmup %s: want 0 to --duration", o.warmup)
	case o.every <= 0:
		return fmt.Errorf("--sample-every %s: want a positive duration", o.every)
	case o.latency < 0 || o.latency > time.Hour:
		return fmt.Errorf("--latency %s: want 0 to 1h", o.latency)
	case o.firstByte <= 0 || o.firstByte > time.Hour:
		return fmt.Errorf("--first-byte %s: want more than 0 and at most 1h", o.firstByte)
	case o.runTimeout <= 0 || o.runTimeout > 24*time.Hour:
		return fmt.Errorf("--run-timeout %s: want more than 0 and at most 24h", o.runTimeout)
	case o.drain <= 0:
		return fmt.Errorf("--drain-timeout %s: want a positive duration", o.drain)
	}
	if n := o.rate * (o.duration + o.warmup).Minutes(); n > 1e6 {
		return fmt.Errorf("--rate %g for %s sends %.0f documents: at most a million", o.rate, o.duration+o.warmup, n)
	}
	return nil
}

// scale compresses a duration of pipeline time into wall time; the
// client's deadlines refuse less than a millisecond.
func (o soakOptions) scale(d time.Duration) time.Duration {
	return max(time.Duration(float64(d)/o.speed), time.Millisecond)
}

func runSoak(ctx context.Context, env *cli.Env, o soakOptions) error {
	db := o.dbURL
	driver := "sqlite"
	if cli.IsPostgresURL(db) {
		driver = "postgres"
	} else if db == "" {
		dir, remove, err := tempDir("sluice-soak")
		if err != nil {
			return err
		}
		defer remove()
		db = filepath.Join(dir, "sluice.db")
	}
	if o.profiles != "" {
		// Finer than the default 512 KiB, so a slow growth shows by its
		// allocation sites; set before the app allocates anything.
		runtime.MemProfileRate = 16 << 10
	}
	conns, closeConns, err := dbConnCounter(ctx, driver, db)
	if err != nil {
		return err
	}
	defer closeConns()
	// The provider holds a timeout fault until the client gives up (its
	// first-byte deadline), or ten minutes of pipeline time if it does not.
	model, provider, err := startSim(ctx, forecast.ModelConfig{Profile: "groq", Latency: o.scale(o.latency), Faults: o.faults, Limits: o.limits, Seed: o.seed, Wire: true},
		sim.ServerConfig{HangTimeout: o.scale(10 * time.Minute)})
	if err != nil {
		return err
	}
	defer provider.Stop(context.Background())
	app, err := serveapp.New(ctx, env.Getenv, serveapp.Options{
		DB: db, ProviderURL: simURL(provider), Profile: "groq", Limits: o.limits.String(),
		RetryBase: o.scale(time.Second), RunTimeout: o.scale(o.runTimeout),
		Timeouts: llm.Timeouts{FirstByte: o.scale(o.firstByte)},
	})
	if err != nil {
		return err
	}
	defer app.Stop(context.Background())
	if err := app.Start(ctx); err != nil {
		return err
	}

	began := time.Now()
	s := &soak{app: app, interval: time.Duration(float64(time.Minute) / (o.rate * o.speed)), speed: o.speed, conns: conns, profiles: o.profiles}
	rep := soakReport{Driver: driver, Duration: o.duration.String(), Speed: o.speed, RatePerMin: o.rate, Tolerance: fmt.Sprintf("last ≤ first×%g + slack", soakGrowth)}
	if err := s.run(ctx, o, &rep); err != nil {
		return err
	}
	rep.Wall = time.Since(began).Round(time.Millisecond).String()

	st := model.Stats()
	rep.LLMRequests, rep.LLMOK, rep.LLMRejected = st.Requests, st.Succeeded, st.Rejected
	rep.LLMFaults = map[string]int64{}
	for f := forecast.Fault5xx; f < forecast.NumFaults; f++ {
		rep.LLMFaults[f.String()] = st.Faults[f]
	}
	rep.Series, rep.Flat = soakVerdict(rep.Samples)
	return printReport(env.Stdout, o.asJSON, "", rep, func(w io.Writer) { printSoak(w, rep) })
}

// run warms up, takes the first sample, sends the soak's documents while
// sampling, and takes the last sample once every run has ended.
func (s *soak) run(ctx context.Context, o soakOptions, rep *soakReport) error {
	// Warm-up: traffic until caches, pools and the governor's state have
	// grown to their working size, then every run ended.
	if err := s.send(ctx, int(o.rate*o.warmup.Minutes()), rep); err != nil {
		return err
	}
	if err := s.wait(ctx, o.drain, rep); err != nil {
		return err
	}
	s.start = time.Now()
	rep.Samples = append(rep.Samples, s.sample(ctx, "first"))
	if err := s.profile("first"); err != nil {
		return err
	}
	sctx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan []soakSample, 1)
	go func() {
		var out []soakSample
		t := time.NewTicker(o.every)
		defer t.Stop()
		for {
			select {
			case <-sctx.Done():
				sampled <- out
				return
			case <-t.C:
				out = append(out, s.sample(sctx, "during"))
			}
		}
	}()
	err := s.send(ctx, int(o.rate*o.duration.Minutes()), rep)
	if err == nil {
		err = s.wait(ctx, o.drain, rep)
	}
	stopSampling()
	rep.Samples = append(rep.Samples, <-sampled...)
	if err != nil {
		return err
	}
	rep.Samples = append(rep.Samples, s.sample(ctx, "last"))
	return s.profile("last")
}

// soak sends the documents and reads the process.
type soak struct {
	app      *sluice.App
	interval time.Duration // wall time between two sends
	speed    float64
	conns    func(context.Context) int64
	profiles string    // folder for heap profiles; "" writes none
	start    time.Time // of the soak proper, for samples' At
	next     int       // number of the next document
	pending  []string  // runs sent and not yet waited for
}

// send sends n documents, one every interval; a send that falls behind the
// schedule goes at once, and counts as late when a whole interval behind.
func (s *soak) send(ctx context.Context, n int, rep *soakReport) error {
	t0 := time.Now()
	for i := range n {
		due := t0.Add(time.Duration(i) * s.interval)
		if d := time.Until(due); d > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(d):
			}
		} else if -d > s.interval {
			rep.LateSends++
		}
		doc := fmt.Sprintf("soak-%07d", s.next)
		s.next++
		sent, err := s.app.Send(ctx, summarize.Event, "upload-"+doc, summarize.Doc{DocumentID: doc})
		if err != nil {
			return fmt.Errorf("send %s: %w", doc, err)
		}
		if len(sent) != 1 || sent[0].Status != "queued" {
			return fmt.Errorf("send %s: %+v, want one run queued", doc, sent)
		}
		s.pending = append(s.pending, sent[0].RunID)
		rep.Sent++
	}
	return nil
}

// wait waits for every run sent so far to end, oldest first: most have ended
// by the time their turn comes, so this reads about one run at a time.
func (s *soak) wait(ctx context.Context, timeout time.Duration, rep *soakReport) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for i, id := range s.pending {
		st, err := s.app.Wait(ctx, id)
		if err != nil {
			return fmt.Errorf("wait for run %s (%d runs still in flight): %w", id, len(s.pending)-i, err)
		}
		if st.Status == "completed" {
			rep.Completed++
		} else {
			rep.Failed++
			if len(rep.Failures) < maxSoakFailures {
				rep.Failures = append(rep.Failures, fmt.Sprintf("%s %s at step %q: %s", st.ID, st.Status, st.Step, st.Error))
			}
		}
	}
	s.pending = s.pending[:0]
	return nil
}

func (s *soak) sample(ctx context.Context, phase string) soakSample {
	runtime.GC()
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(live)
	return soakSample{
		Phase:      phase,
		At:         time.Duration(float64(time.Since(s.start)) * s.speed).Round(time.Second),
		HeapBytes:  int64(live[0].Value.Uint64()),
		Goroutines: int64(runtime.NumGoroutine()),
		OpenFDs:    openFDs(),
		DBConns:    s.conns(ctx),
	}
}

// profile writes a heap profile as of the last GC to the profiles folder.
func (s *soak) profile(name string) error {
	if s.profiles == "" {
		return nil
	}
	if err := os.MkdirAll(s.profiles, 0o750); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(s.profiles, name+".pprof"))
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return fmt.Errorf("write heap profile: %w", err)
	}
	return f.Close()
}

// soakVerdict summarizes the samples into series and judges each flat.
func soakVerdict(samples []soakSample) ([]soakSeries, bool) {
	get := []struct {
		name string
		v    func(soakSample) int64
	}{
		{"heap_bytes", func(s soakSample) int64 { return s.HeapBytes }},
		{"goroutines", func(s soakSample) int64 { return s.Goroutines }},
		{"open_fds", func(s soakSample) int64 { return s.OpenFDs }},
		{"db_conns", func(s soakSample) int64 { return s.DBConns }},
	}
	all := len(samples) >= 2
	out := make([]soakSeries, 0, len(get))
	for _, g := range get {
		sr := soakSeries{Name: g.name, Slack: soakSlack[g.name], Max: math.MinInt64}
		for _, s := range samples {
			sr.Max = max(sr.Max, g.v(s))
		}
		if len(samples) > 0 {
			sr.First, sr.Last = g.v(samples[0]), g.v(samples[len(samples)-1])
		}
		sr.Flat = len(samples) >= 2 && float64(sr.Last) <= float64(sr.First)*soakGrowth+sr.Slack
		all = all && sr.Flat
		out = append(out, sr)
	}
	return out, all
}

func printSoak(w io.Writer, rep soakReport) {
	fmt.Fprintf(w, "%s: %s of pipeline time at %g× (%s wall), %g documents a minute\n", rep.Driver, rep.Duration, rep.Speed, rep.Wall, rep.RatePerMin)
	fmt.Fprintf(w, "runs: sent %d  completed %d  failed %d  late sends %d\n", rep.Sent, rep.Completed, rep.Failed, rep.LateSends)
	for _, f := range rep.Failures {
		fmt.Fprintf(w, "  failed: %s\n", f)
	}
	fmt.Fprintf(w, "LLM calls: %d  succeeded %d  rate-limited %d  faults", rep.LLMRequests, rep.LLMOK, rep.LLMRejected)
	for f := forecast.Fault5xx; f < forecast.NumFaults; f++ {
		fmt.Fprintf(w, " %s %d", f, rep.LLMFaults[f.String()])
	}
	fmt.Fprintf(w, "\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "series\tfirst\tlast\tmax\tslack\tflat\t")
	for _, s := range rep.Series {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.0f\t%v\t\n", s.Name, s.First, s.Last, s.Max, s.Slack, s.Flat)
	}
	tw.Flush()
	verdict := "flat"
	if !rep.Flat {
		verdict = "NOT flat"
	}
	fmt.Fprintf(w, "\n%s (%s; first idle after warm-up, last idle after the last run, %d samples)\n", verdict, rep.Tolerance, len(rep.Samples))
}

// openFDs counts the process's open file descriptors, or -1 where
// /proc/self/fd does not exist.
func openFDs() int64 {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return int64(len(ents)) - 1 // the directory's own descriptor
}

// dbConnCounter returns what counts the database connections open to db.
// They are counted where they end rather than through the pools that hold
// them (the app does not expose its pool), so every handle counts, whoever
// opened it. On PostgreSQL: the server's sessions on the database other than
// the counter's own. On SQLite: the process's descriptors of the database
// file, one per connection plus any SQLite keeps open for a connection closed
// while another held a lock on the file (it closes them when the locks go).
func dbConnCounter(ctx context.Context, driver, db string) (func(context.Context) int64, func(), error) {
	if driver == "postgres" {
		conn, err := pgx.Connect(ctx, db)
		if err != nil {
			return nil, nil, fmt.Errorf("connect to count connections: %w", err)
		}
		count := func(ctx context.Context) int64 {
			var n int64
			err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n)
			if err != nil {
				return -1
			}
			return n
		}
		return count, func() { conn.Close(context.Background()) }, nil
	}
	path, err := filepath.Abs(strings.TrimPrefix(db, "sqlite:"))
	if err != nil {
		return nil, nil, err
	}
	count := func(context.Context) int64 {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			return -1
		}
		var n int64
		for _, e := range ents {
			if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && target == path {
				n++
			}
		}
		return n
	}
	return count, func() {}, nil
}
