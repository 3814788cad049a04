package benchcmd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/gateway"
	"github.com/sluice-dev/sluice/internal/guard"
	"github.com/sluice-dev/sluice/internal/sim"
)

func newGatewayCommand(Config) *cli.Command {
	return &cli.Command{
		Name:    "gateway",
		Summary: "latency the gateway adds and its throughput, beside httputil.ReverseProxy, in one run",
		Run:     runBenchGateway,
	}
}

type latencyStats struct {
	Requests int64 `json:"requests"`
	Errors   int64 `json:"errors"`
	// Unsent counts the requests due while --max-open of the path's were
	// still unanswered: not sent, so that the load generator holds no
	// more open than that. Above 0, the path is saturated at --rate.
	Unsent int64   `json:"unsent"`
	P50US  float64 `json:"p50_us"`
	P99US  float64 `json:"p99_us"`
}

type gatewayReport struct {
	Rate            float64      `json:"rate_per_s"`
	MaxOpen         int          `json:"max_open"`
	Duration        string       `json:"duration"`
	Direct          latencyStats `json:"direct"`
	Proxy           latencyStats `json:"reverse_proxy"`
	Gateway         latencyStats `json:"gateway"`
	ProxyAddedP50   float64      `json:"reverse_proxy_added_p50_us"`
	ProxyAddedP99   float64      `json:"reverse_proxy_added_p99_us"`
	GatewayAddedP50 float64      `json:"gateway_added_p50_us"`
	GatewayAddedP99 float64      `json:"gateway_added_p99_us"`
	Concurrency     int          `json:"concurrency"`
	ProxyRPS        float64      `json:"reverse_proxy_requests_per_s"`
	GatewayRPS      float64      `json:"gateway_requests_per_s"`
	// ThroughputRatio is the mean gateway throughput over the mean proxy
	// throughput.
	ThroughputRatio float64 `json:"throughput_ratio"`
	// ThroughputRatios are each round's gateway throughput over the
	// proxy's of the same round, and ThroughputRatioMedian their median:
	// the two sides of a round saw the same machine within seconds of each
	// other, where the means mix rounds the machine's other work slowed
	// differently.
	ThroughputRatios      []float64 `json:"throughput_ratios"`
	ThroughputRatioMedian float64   `json:"throughput_ratio_median"`
}

// gatewayOptions are the gateway bench's flags.
type gatewayOptions struct {
	rate                float64
	maxOpen             int
	duration, tput      time.Duration
	concurrency, rounds int
	cpuProfile          string
	asJSON              bool
}

func runBenchGateway(ctx context.Context, env *cli.Env, args []string) error {
	var o gatewayOptions
	fs := cli.NewFlagSet(env, "bench gateway", "[flags]",
		"Serves the provider simulator (no limits, no latency) and, in front of it, the gateway (no\n"+
			"limits: every request admitted at once) and a plain httputil.ReverseProxy, all on loopback\n"+
			"in this process. Latency: requests go at --rate per second to each of the three — straight\n"+
			"to the simulator, through the proxy, through the gateway — in turn, for --duration; the\n"+
			"latency added is each path's percentile minus the direct one. Throughput: --concurrency\n"+
			"clients send back to back through the proxy and the gateway in turn, --rounds times, the\n"+
			"first side alternating; each throughput is the mean of its rounds, and the ratio is given\n"+
			"both as the ratio of those means and as the median of each round's gateway/proxy ratio.\n"+
			"Every request sets max_tokens, as a governed request should.")
	fs.Float64Var(&o.rate, "rate", 500, "requests per second to each of the three paths in the latency phase")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "length of the latency phase")
	fs.IntVar(&o.maxOpen, "max-open", 256, "most requests of one path unanswered at once in the latency phase; one due beyond it is not sent, and counted as unsent (saturation)")
	fs.IntVar(&o.concurrency, "concurrency", 16, "clients sending back to back in the throughput phase")
	fs.DurationVar(&o.tput, "throughput-duration", 3*time.Second, "length of each throughput round")
	fs.IntVar(&o.rounds, "rounds", 3, "throughput rounds; each runs the proxy and the gateway once, the first side alternating")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of both phases to this `FILE` (read it with go tool pprof)")
	fs.BoolVar(&o.asJSON, "json", false, "print the report as JSON")
	if err := cli.ParseFlags(fs, env, args); err != nil {
		return err
	}
	if o.rate <= 0 || o.duration <= 0 || o.concurrency < 1 || o.tput <= 0 || o.rounds < 1 || o.maxOpen < 1 {
		return errors.New("--rate, --duration, --max-open, --concurrency, --throughput-duration and --rounds must be positive")
	}
	if o.maxOpen > 4096 || o.concurrency > 4096 {
		return errors.New("--max-open and --concurrency must be at most 4096")
	}
	b, stop, err := startGatewayPaths(ctx, max(o.maxOpen, o.concurrency))
	defer stop()
	if err != nil {
		return err
	}
	// Warm up connections and the tokenizer on every path.
	for range 50 {
		for _, p := range b.paths {
			if _, err := b.send(p); err != nil {
				return fmt.Errorf("warm-up request to %s: %w", p, err)
			}
		}
	}
	stopProfile, err := startCPUProfile(o.cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	stats, err := b.latency(ctx, o.rate, o.duration, o.maxOpen)
	if err != nil {
		return err
	}
	proxyRPS, gatewayRPS, err := b.throughput(ctx, o)
	if err != nil {
		return err
	}
	rep := gatewayReport{
		Rate: o.rate, MaxOpen: o.maxOpen, Duration: o.duration.String(), Direct: stats[0], Proxy: stats[1], Gateway: stats[2],
		ProxyAddedP50: stats[1].P50US - stats[0].P50US, ProxyAddedP99: stats[1].P99US - stats[0].P99US,
		GatewayAddedP50: stats[2].P50US - stats[0].P50US, GatewayAddedP99: stats[2].P99US - stats[0].P99US,
		Concurrency: o.concurrency, ProxyRPS: mean(proxyRPS), GatewayRPS: mean(gatewayRPS),
	}
	rep.ThroughputRatio = rep.GatewayRPS / rep.ProxyRPS
	rep.ThroughputRatios, rep.ThroughputRatioMedian = throughputRatios(proxyRPS, gatewayRPS)
	for _, s := range stats {
		if s.Errors > 0 {
			return fmt.Errorf("latency phase: %d of %d requests failed", s.Errors, s.Requests)
		}
	}
	return printReport(env.Stdout, o.asJSON, "  ", rep, func(w io.Writer) { printGatewayReport(w, rep) })
}

// gatewayPaths are the three paths the bench compares, all on loopback:
// straight to the simulator, through the reverse proxy, through the
// gateway; and the client that sends to them.
type gatewayPaths struct {
	direct, proxy, gateway string
	paths                  []string // the three, in that order
	client                 *http.Client
}

// startGatewayPaths serves the simulator and, in front of it, the gateway
// and the reverse proxy; stop stops them all.
func startGatewayPaths(ctx context.Context, maxOpen int) (b *gatewayPaths, stop func(), err error) {
	var stops []func()
	stop = func() {
		for _, s := range slices.Backward(stops) {
			s()
		}
	}
	_, up, err := startSim(ctx, forecast.ModelConfig{Profile: "openai", Wire: true}, sim.ServerConfig{})
	if err != nil {
		return nil, stop, err
	}
	stops = append(stops, func() { _ = up.Stop(context.Background()) })
	b = &gatewayPaths{direct: "http://" + up.Addr()}
	gw, err := gateway.New(context.Background(), gateway.Config{Upstream: b.direct + "/v1", Profile: "openai"})
	if err != nil {
		return nil, stop, err
	}
	gw.Start(ctx)
	stops = append(stops, func() { _ = gw.Stop(context.Background()) })
	target, _ := url.Parse(b.direct)
	proxy := httputil.NewSingleHostReverseProxy(target)
	// The proxy keeps as many idle upstream connections as the gateway's
	// client does, so neither pays for new connections the other does not.
	pt := http.DefaultTransport.(*http.Transport).Clone()
	pt.MaxIdleConnsPerHost = gateway.UpstreamIdleConns
	proxy.Transport = pt
	var servers []*http.Server
	stops = append(stops, func() {
		for _, s := range servers {
			_ = s.Close()
		}
	})
	// The gateway is served as "sluice gateway" serves it, behind guard's
	// deadlines and checks; the proxy as a plain http.Server.
	serve := func(h http.Handler, guarded bool) (string, error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		if guarded {
			srv = guard.NewServer(h, guard.Config{Addr: ln.Addr().String()})
		}
		servers = append(servers, srv)
		go func() { _ = srv.Serve(ln) }()
		return "http://" + ln.Addr().String(), nil
	}
	if b.proxy, err = serve(proxy, false); err != nil {
		return nil, stop, err
	}
	if b.gateway, err = serve(gw, true); err != nil {
		return nil, stop, err
	}
	b.paths = []string{b.direct, b.proxy, b.gateway}
	// At most maxOpen connections to each path, as many as requests of
	// it may be open at once: what the bench holds open is bounded.
	b.client = &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConns: 3 * maxOpen, MaxIdleConnsPerHost: maxOpen,
		MaxConnsPerHost: maxOpen, IdleConnTimeout: time.Minute}}
	return b, stop, nil
}

// gatewayBody is every request the bench sends: a short completion with
// max_tokens set.
var gatewayBody = []byte(`{"model":"sim-model","messages":[{"role":"system","content":"You write short titles."},` +
	`{"role":"user","content":"Give this article a title: rivers, bridges and the towns between them."}],"max_tokens":16}`)

// send posts a chat completion to base and returns how long its whole
// answer took.
func (b *gatewayPaths) send(base string) (time.Duration, error) {
	start := time.Now()
	resp, err := b.client.Post(base+"/v1/chat/completions", "application/json", bytes.NewReader(gatewayBody))
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %d", resp.StatusCode)
	}
	return time.Since(start), err
}

// latency sends rate requests a second to each path for d, the three paths
// taking turns at the same pace so that each sees the same machine at the
// same moments, and returns each path's figures. A request due while
// maxOpen of its path's are unanswered is not sent but counted (Unsent):
// an open-loop generator that opened one more for each would hold an
// unbounded number open once a path saturates.
func (b *gatewayPaths) latency(ctx context.Context, rate float64, d time.Duration, maxOpen int) ([]latencyStats, error) {
	lat := make([][]time.Duration, len(b.paths))
	errs := make([]int64, len(b.paths))
	unsent := make([]int64, len(b.paths))
	open := make([]chan struct{}, len(b.paths))
	for p := range open {
		open[p] = make(chan struct{}, maxOpen)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	interval := time.Duration(float64(time.Second) / (rate * float64(len(b.paths))))
	start := time.Now()
	for i := 0; ; i++ {
		at := start.Add(time.Duration(i) * interval)
		if at.Sub(start) >= d {
			break
		}
		if d := time.Until(at); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		p := i % len(b.paths)
		select {
		case open[p] <- struct{}{}:
		default:
			unsent[p]++ // the path has maxOpen unanswered
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-open[p] }()
			d, err := b.send(b.paths[p])
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs[p]++
				return
			}
			lat[p] = append(lat[p], d)
		}()
	}
	wg.Wait()
	stats := make([]latencyStats, len(b.paths))
	for p := range b.paths {
		stats[p] = latencyStats{Requests: int64(len(lat[p])) + errs[p], Errors: errs[p], Unsent: unsent[p],
			P50US: percentile(lat[p], 0.50), P99US: percentile(lat[p], 0.99)}
	}
	return stats, nil
}

// throughput runs the closed-loop rounds, the proxy and the gateway
// alternating, and returns each one's requests a second in every round.
func (b *gatewayPaths) throughput(ctx context.Context, o gatewayOptions) (proxyRPS, gatewayRPS []float64, err error) {
	for round := range o.rounds {
		order := []string{b.proxy, b.gateway}
		if round%2 == 1 {
			order = []string{b.gateway, b.proxy}
		}
		for _, base := range order {
			r, err := b.closedLoop(ctx, base, o.concurrency, o.tput)
			if err != nil {
				return nil, nil, err
			}
			if base == b.proxy {
				proxyRPS = append(proxyRPS, r)
			} else {
				gatewayRPS = append(gatewayRPS, r)
			}
		}
	}
	return proxyRPS, gatewayRPS, nil
}

// throughputRatios returns each round's gateway throughput over the
// proxy's of the same round, and their median.
func throughputRatios(proxyRPS, gatewayRPS []float64) (ratios []float64, med float64) {
	ratios = make([]float64, min(len(proxyRPS), len(gatewayRPS)))
	for i := range ratios {
		ratios[i] = gatewayRPS[i] / proxyRPS[i]
	}
	return ratios, median(ratios)
}

// closedLoop has clients send to base back to back for d and returns the
// requests answered a second.
func (b *gatewayPaths) closedLoop(ctx context.Context, base string, clients int, d time.Duration) (float64, error) {
	var n, failed atomic.Int64
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	t0 := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) && ctx.Err() == nil {
				if _, err := b.send(base); err != nil {
					failed.Add(1)
					continue
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		return 0, fmt.Errorf("throughput round on %s: %d requests failed", base, f)
	}
	return float64(n.Load()) / time.Since(t0).Seconds(), nil
}

func printGatewayReport(w io.Writer, rep gatewayReport) {
	fmt.Fprintf(w, "latency at %.0f requests/s per path for %s (µs):\n", rep.Rate, rep.Duration)
	fmt.Fprintf(w, "  %-14s %8s %8s %10s %10s\n", "path", "p50", "p99", "added p50", "added p99")
	fmt.Fprintf(w, "  %-14s %8.0f %8.0f\n", "direct", rep.Direct.P50US, rep.Direct.P99US)
	fmt.Fprintf(w, "  %-14s %8.0f %8.0f %10.0f %10.0f\n", "reverse proxy", rep.Proxy.P50US, rep.Proxy.P99US, rep.ProxyAddedP50, rep.ProxyAddedP99)
	fmt.Fprintf(w, "  %-14s %8.0f %8.0f %10.0f %10.0f\n", "gateway", rep.Gateway.P50US, rep.Gateway.P99US, rep.GatewayAddedP50, rep.GatewayAddedP99)
	for i, s := range []latencyStats{rep.Direct, rep.Proxy, rep.Gateway} {
		if s.Unsent > 0 {
			fmt.Fprintf(w, "  saturated: %s left %d of %d due requests unsent, %d of its requests being open\n",
				[]string{"direct", "reverse proxy", "gateway"}[i], s.Unsent, s.Unsent+s.Requests, rep.MaxOpen)
		}
	}
	fmt.Fprintf(w, "throughput with %d clients: reverse proxy %.0f/s, gateway %.0f/s, ratio %.2f\n",
		rep.Concurrency, rep.ProxyRPS, rep.GatewayRPS, rep.ThroughputRatio)
	fmt.Fprintf(w, "  ratio by round (gateway/proxy):")
	for _, r := range rep.ThroughputRatios {
		fmt.Fprintf(w, " %.3f", r)
	}
	fmt.Fprintf(w, "; median %.3f\n", rep.ThroughputRatioMedian)
}
