package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/gateway"
	"github.com/sluice-dev/sluice/internal/guard"
	"github.com/sluice-dev/sluice/internal/sim"
)

func init() {
	registerBench(&command{
		name:    "gateway",
		summary: "latency the gateway adds and its throughput, beside httputil.ReverseProxy, in one run",
		run:     runBenchGateway,
	})
}

type latencyStats struct {
	Requests int64   `json:"requests"`
	Errors   int64   `json:"errors"`
	P50US    float64 `json:"p50_us"`
	P99US    float64 `json:"p99_us"`
}

type gatewayReport struct {
	Rate            float64      `json:"rate_per_s"`
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
	ThroughputRatio float64      `json:"throughput_ratio"`
}

func runBenchGateway(ctx context.Context, env *cmdEnv, args []string) error {
	fs := newFlagSet(env, "bench gateway", "[flags]",
		"Serves the provider simulator (no limits, no latency) and, in front of it, the gateway (no\n"+
			"limits: every request admitted at once) and a plain httputil.ReverseProxy, all on loopback\n"+
			"in this process. Latency: requests go at --rate per second to each of the three — straight\n"+
			"to the simulator, through the proxy, through the gateway — in turn, for --duration; the\n"+
			"latency added is each path's percentile minus the direct one. Throughput: --concurrency\n"+
			"clients send back to back through the proxy and the gateway in turn; each throughput is the\n"+
			"mean of its rounds. Every request sets max_tokens, as a governed request should.")
	rate := fs.Float64("rate", 500, "requests per second to each of the three paths in the latency phase")
	duration := fs.Duration("duration", 10*time.Second, "length of the latency phase")
	concurrency := fs.Int("concurrency", 16, "clients sending back to back in the throughput phase")
	tput := fs.Duration("throughput-duration", 3*time.Second, "length of each throughput round")
	rounds := fs.Int("rounds", 3, "throughput rounds; each runs the proxy and the gateway once, the first side alternating")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of both phases to this `FILE` (read it with go tool pprof)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := parseFlags(fs, env, args); err != nil {
		return err
	}
	if *rate <= 0 || *duration <= 0 || *concurrency < 1 || *tput <= 0 || *rounds < 1 {
		return errors.New("--rate, --duration, --concurrency, --throughput-duration and --rounds must be positive")
	}

	m, err := forecast.NewModel(forecast.ModelConfig{Profile: "openai", Wire: true})
	if err != nil {
		return err
	}
	up := sim.NewServer(m, sim.ServerConfig{})
	if err := up.Start(ctx); err != nil {
		return err
	}
	defer up.Stop(context.Background())
	direct := "http://" + up.Addr()
	gw, err := gateway.New(context.Background(), gateway.Config{Upstream: direct + "/v1", Profile: "openai"})
	if err != nil {
		return err
	}
	gw.Start(ctx)
	defer gw.Stop(context.Background())
	target, _ := url.Parse(direct)
	proxy := httputil.NewSingleHostReverseProxy(target)
	// The proxy keeps as many idle upstream connections as the gateway's
	// client does, so neither pays for new connections the other does not.
	pt := http.DefaultTransport.(*http.Transport).Clone()
	pt.MaxIdleConnsPerHost = 16
	proxy.Transport = pt
	var servers []*http.Server
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
	defer func() {
		for _, s := range servers {
			_ = s.Close()
		}
	}()
	proxyURL, err := serve(proxy, false)
	if err != nil {
		return err
	}
	gatewayURL, err := serve(gw, true)
	if err != nil {
		return err
	}

	client := &http.Client{Transport: &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024, IdleConnTimeout: time.Minute}}
	body := []byte(`{"model":"sim-model","messages":[{"role":"system","content":"You write short titles."},` +
		`{"role":"user","content":"Give this article a title: rivers, bridges and the towns between them."}],"max_tokens":16}`)
	send := func(base string) (time.Duration, error) {
		start := time.Now()
		resp, err := client.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(string(body)))
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
	paths := []string{direct, proxyURL, gatewayURL}
	// Warm up connections and the tokenizer on every path.
	for range 50 {
		for _, p := range paths {
			if _, err := send(p); err != nil {
				return fmt.Errorf("warm-up request to %s: %w", p, err)
			}
		}
	}

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	// Latency: the three paths take turns at the same pace, so each sees the
	// same machine at the same moments.
	lat := make([][]time.Duration, len(paths))
	errs := make([]int64, len(paths))
	var mu sync.Mutex
	var wg sync.WaitGroup
	interval := time.Duration(float64(time.Second) / (*rate * float64(len(paths))))
	start := time.Now()
	for i := 0; ; i++ {
		at := start.Add(time.Duration(i) * interval)
		if at.Sub(start) >= *duration {
			break
		}
		if d := time.Until(at); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		p := i % len(paths)
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := send(paths[p])
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
	stats := make([]latencyStats, len(paths))
	for p := range paths {
		stats[p] = latencyStats{Requests: int64(len(lat[p])) + errs[p], Errors: errs[p], P50US: percentile(lat[p], 0.50), P99US: percentile(lat[p], 0.99)}
	}

	// Throughput: closed loop, the proxy and the gateway alternating.
	run := func(base string) (float64, error) {
		var n, failed atomic.Int64
		deadline := time.Now().Add(*tput)
		var wg sync.WaitGroup
		t0 := time.Now()
		for range *concurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) && ctx.Err() == nil {
					if _, err := send(base); err != nil {
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
	var proxyRPS, gatewayRPS []float64
	for round := range *rounds {
		order := []string{proxyURL, gatewayURL}
		if round%2 == 1 {
			order = []string{gatewayURL, proxyURL}
		}
		for _, base := range order {
			r, err := run(base)
			if err != nil {
				return err
			}
			if base == proxyURL {
				proxyRPS = append(proxyRPS, r)
			} else {
				gatewayRPS = append(gatewayRPS, r)
			}
		}
	}

	rep := gatewayReport{
		Rate: *rate, Duration: duration.String(), Direct: stats[0], Proxy: stats[1], Gateway: stats[2],
		ProxyAddedP50: stats[1].P50US - stats[0].P50US, ProxyAddedP99: stats[1].P99US - stats[0].P99US,
		GatewayAddedP50: stats[2].P50US - stats[0].P50US, GatewayAddedP99: stats[2].P99US - stats[0].P99US,
		Concurrency: *concurrency, ProxyRPS: mean(proxyRPS), GatewayRPS: mean(gatewayRPS),
	}
	rep.ThroughputRatio = rep.GatewayRPS / rep.ProxyRPS
	for _, s := range stats {
		if s.Errors > 0 {
			return fmt.Errorf("latency phase: %d of %d requests failed", s.Errors, s.Requests)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(env.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	w := env.stdout
	fmt.Fprintf(w, "latency at %.0f requests/s per path for %s (µs):\n", rep.Rate, rep.Duration)
	fmt.Fprintf(w, "  %-14s %8s %8s %10s %10s\n", "path", "p50", "p99", "added p50", "added p99")
	fmt.Fprintf(w, "  %-14s %8.0f %8.0f\n", "direct", rep.Direct.P50US, rep.Direct.P99US)
	fmt.Fprintf(w, "  %-14s %8.0f %8.0f %10.0f %10.0f\n", "reverse proxy", rep.Proxy.P50US, rep.Proxy.P99US, rep.ProxyAddedP50, rep.ProxyAddedP99)
	fmt.Fprintf(w, "  %-14s %8.0f %8.0f %10.0f %10.0f\n", "gateway", rep.Gateway.P50US, rep.Gateway.P99US, rep.GatewayAddedP50, rep.GatewayAddedP99)
	fmt.Fprintf(w, "throughput with %d clients: reverse proxy %.0f/s, gateway %.0f/s, ratio %.2f\n",
		rep.Concurrency, rep.ProxyRPS, rep.GatewayRPS, rep.ThroughputRatio)
	return nil
}

// percentile returns the q-quantile of ds in microseconds (nearest rank).
func percentile(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	i = min(max(i, 0), len(s)-1)
	return float64(s[i]) / float64(time.Microsecond)
}

func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}
