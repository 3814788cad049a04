package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/guard"
	"github.com/sluice-dev/sluice/internal/sim"
	"github.com/sluice-dev/sluice/llm"
	"github.com/sluice-dev/sluice/run"
)

func init() {
	register(&command{
		name:    "demo",
		summary: "run three LLM jobs on one rate-limited key, durably, against a built-in provider simulator",
		run:     runDemo,
	})
}

// demoFlow is one of the demo's jobs: DevPick's three (seed 000), in
// miniature so a minute shows them sharing the key.
type demoFlow struct {
	name      string
	event     string
	priority  int
	maxTokens int
	prompt    string
	backlog   int           // events sent at the start
	every     time.Duration // then one event this often (0: none)
}

var demoFlows = []demoFlow{
	{name: "analysis", event: "article/new", priority: 1, maxTokens: 300, prompt: "Analyse this new article: topics, audience, one-line verdict.", every: 6 * time.Second},
	{name: "summary", event: "article/summary", maxTokens: 260, prompt: "Summarize this article in English in three sentences.", backlog: 60},
	{name: "title", event: "article/title", maxTokens: 60, prompt: "Translate this article's title into English.", backlog: 120},
}

// demoLimits are tight on purpose: the backlogs want far more than the key
// allows, and its daily token budget (paced over the day, as the governor
// does) leaves about 14,000 tokens a minute — some 35 calls.
const demoLimits = "rpm=60,tpm=30000,otpm=8000,tpd=20000000"

func runDemo(ctx context.Context, env *cmdEnv, args []string) error {
	fs := newFlagSet(env, "demo", "[flags]",
		"Starts a simulated Groq-style provider with tight limits ("+demoLimits+"), and an app with three\n"+
			"jobs that share its one key — the analysis of new articles (priority), a summary backfill\n"+
			"and a title backfill, as in DevPick's write-up. Every LLM call is a durable step admitted by\n"+
			"the quota governor, so the jobs share the key fairly in tokens and the provider refuses\n"+
			"nothing. Prints progress every few seconds, then a summary. The run API is served on --addr\n"+
			"meanwhile (try: curl 'http://127.0.0.1:8288/v1/runs?status=completed').")
	dur := fs.Duration("for", time.Minute, "how long to run")
	every := fs.Duration("report-every", 5*time.Second, "how often to print progress")
	addr := fs.String("addr", "127.0.0.1:8288", `address of the run API ("" to serve none)`)
	dbURL := fs.String("db", "", "database (default: a new SQLite file in a temporary folder, removed at the end)")
	untilEach := fs.Int("until-each", 0, "stop early once every job has finished this many articles (0: run for --for)")
	if err := parseFlags(fs, env, args); err != nil {
		return err
	}
	if *dur <= 0 || *every <= 0 || *untilEach < 0 {
		fmt.Fprintln(env.stderr, "sluice demo: --for and --report-every must be positive, --until-each not negative")
		return errUsage
	}
	db := *dbURL
	if db == "" {
		dir, err := os.MkdirTemp("", "sluice-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		db = filepath.Join(dir, "sluice.db")
	}

	limits, err := governor.ParseLimits(demoLimits)
	if err != nil {
		return err
	}
	model, err := sim.NewModel(sim.Config{Profile: "groq", Limits: limits, Latency: 400 * time.Millisecond, Seed: 1, Wire: true})
	if err != nil {
		return err
	}
	provider := sim.NewServer(model, sim.ServerConfig{Addr: "127.0.0.1:0"})
	if err := provider.Start(ctx); err != nil {
		return fmt.Errorf("start the simulated provider: %w", err)
	}
	defer provider.Stop(context.Background())

	var flows []governor.FlowConfig
	for _, f := range demoFlows {
		flows = append(flows, governor.FlowConfig{Name: f.name, Priority: f.priority})
	}
	app, err := sluice.New(ctx, sluice.Config{
		DatabaseURL: db,
		Providers: []sluice.Provider{{
			Name:   "groq-sim",
			LLM:    llm.Config{BaseURL: "http://" + provider.Addr() + "/v1", Profile: llm.Groq},
			Limits: limits,
		}},
		Flows: flows,
	})
	if err != nil {
		return err
	}
	defer app.Stop(context.Background())

	prog := newDemoProgress(*untilEach)
	for _, f := range demoFlows {
		if err := registerDemoFlow(app, f, prog); err != nil {
			return err
		}
	}
	if err := app.Start(ctx); err != nil {
		return err
	}
	if *addr != "" {
		if err := guard.CheckBind(*addr, false, "the demo's run API has no token"); err != nil {
			return err
		}
		ln, err := net.Listen("tcp", *addr)
		if err != nil {
			return fmt.Errorf("listen on %s: %w (use --addr to pick another, or --addr \"\")", *addr, err)
		}
		srv := guard.NewServer(app.Handler(sluice.HandlerConfig{}), guard.Config{Addr: *addr})
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		fmt.Fprintf(env.stdout, "run API on http://%s/v1/runs\n", ln.Addr())
	}
	fmt.Fprintf(env.stdout, "provider simulator (groq) on http://%s with %s; database %s\n\n", provider.Addr(), demoLimits, db)

	runCtx, cancel := context.WithTimeout(ctx, *dur)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for _, f := range demoFlows {
		wg.Add(1)
		go func() {
			defer wg.Done()
			feedDemoFlow(runCtx, app, f, prog)
		}()
	}
	tick := time.NewTicker(*every)
	defer tick.Stop()
loop:
	for {
		select {
		case <-runCtx.Done():
			break loop
		case <-prog.reached:
			cancel()
			break loop
		case <-tick.C:
			prog.print(env.stdout, time.Since(start), model.Stats())
		}
	}
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	fmt.Fprintln(env.stdout)
	prog.print(env.stdout, time.Since(start), model.Stats())
	st := model.Stats()
	rejected := st.RejectedByStatus[429] + st.RejectedByStatus[413]
	fmt.Fprintf(env.stdout, "\nThe provider answered %d requests and refused %d (429/413): every call was admitted only when it fit\n", st.Succeeded, rejected)
	fmt.Fprintf(env.stdout, "every limit of the key. The jobs shared the key by tokens; the analysis of new articles had priority.\n")
	return nil
}

// registerDemoFlow adds one job: each event is one article; the run makes
// one governed LLM call for it.
func registerDemoFlow(app *sluice.App, f demoFlow, prog *demoProgress) error {
	type article struct {
		ID   string `json:"id"`
		Text string `json:"text"`
	}
	return sluice.Register(app, run.Function{
		ID:      f.name,
		Event:   f.event,
		Retries: 5,
		Flow:    f.name,
		// Each job runs several articles at a time; the governor, not this
		// limit, decides when their calls go.
		Concurrency: []run.Concurrency{{Limit: 8}},
	}, func(ctx *sluice.Context, ev sluice.Event[article]) (string, error) {
		resp, err := sluice.LLM(ctx, "llm", &llm.ChatRequest{
			Model:     "sim-model",
			MaxTokens: f.maxTokens,
			Messages: []llm.Message{
				{Role: "system", Content: f.prompt},
				{Role: "user", Content: ev.Data.Text},
			},
		})
		if err != nil {
			return "", err
		}
		prog.done(f.name, resp.Usage.TotalTokens, time.Since(ev.TS))
		return resp.Text(), nil
	})
}

// feedDemoFlow sends a job's backlog at once, then (for a job with arrivals)
// one article now and one every f.every.
func feedDemoFlow(ctx context.Context, app *sluice.App, f demoFlow, prog *demoProgress) {
	n := 0
	send := func() {
		n++
		id := fmt.Sprintf("%s-%04d", f.name, n)
		data := map[string]string{"id": id, "text": demoArticle(n)}
		if _, err := app.Send(ctx, f.event, id, data); err == nil {
			prog.sent(f.name)
		}
	}
	for range f.backlog {
		send()
	}
	if f.every == 0 {
		return
	}
	send()
	t := time.NewTicker(f.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			send()
		}
	}
}

func demoArticle(n int) string {
	words := strings.Fields("開発 news rate limits durable steps backfill quota tokens fairness governor stall progress provider")
	var b strings.Builder
	for i := range 120 + n%40 {
		b.WriteString(words[(i*5+n)%len(words)])
		b.WriteByte(' ')
	}
	return b.String()
}

// demoProgress counts what each job sent and finished.
type demoProgress struct {
	mu      sync.Mutex
	flows   map[string]*demoCount
	target  int           // every job's done count that closes reached (0: never)
	reached chan struct{} // closed once every job has finished target articles
}

type demoCount struct {
	sent, done int
	tokens     int64
	waits      []time.Duration
}

func newDemoProgress(target int) *demoProgress {
	p := &demoProgress{flows: map[string]*demoCount{}, target: target, reached: make(chan struct{})}
	for _, f := range demoFlows {
		p.flows[f.name] = &demoCount{}
	}
	return p
}

func (p *demoProgress) sent(flow string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.flows[flow].sent++
}

func (p *demoProgress) done(flow string, tokens int64, wait time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.flows[flow]
	c.done++
	c.tokens += tokens
	c.waits = append(c.waits, wait)
	if p.target <= 0 || c.done != p.target {
		return
	}
	for _, o := range p.flows {
		if o.done < p.target {
			return
		}
	}
	close(p.reached)
}

func (p *demoProgress) print(w io.Writer, elapsed time.Duration, st sim.Stats) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(w, "after %s: provider answered %d, refused %d\n", elapsed.Round(time.Second), st.Succeeded, st.RejectedByStatus[429]+st.RejectedByStatus[413])
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "  job\tpriority\tsent\tdone\ttokens\tp95 time to done\t")
	for _, f := range demoFlows {
		c := p.flows[f.name]
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%d\t%s\t\n", f.name, f.priority, c.sent, c.done, c.tokens, p95(c.waits))
	}
	tw.Flush()
}

func p95(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[(len(s)*95+99)/100-1].Round(100 * time.Millisecond).String()
}
