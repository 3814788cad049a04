package gateway

import (
	"bytes"
	"context"
	"encoding/json"
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
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/testenv"
)

// TestOpenAINodeClientBursts is the gateway's proof with a client no one
// here wrote: the official openai npm client, changed only in its base URL,
// key and default headers, sends bursts from three weighted flows through
// the gateway to a simulator with tight limits. The provider must refuse
// nothing, every request must be answered, and while all three flows have
// requests waiting their token shares must follow their weights within 10 %.
//
// A rolling minute frees room only a minute after it was used, so the test
// takes a little over a minute: a large call fills most of the first
// minute, the bursts queue behind it, and the second minute is shared out
// among the three waiting flows.
func TestOpenAINodeClientBursts(t *testing.T) {
	t.Parallel()
	node, modules := testenv.NodeModules(t)
	script, err := filepath.Abs("../../clients/node/gateway-check.mjs")
	if err != nil {
		t.Fatal(err)
	}
	const clientKey = "gw-node-client-key"
	lim := limits("rpm=600,tpm=30000")
	weights := map[string]float64{"summary": 1, "title": 2, "analysis": 3}

	journal := &chargeLog{}
	b := setup(t, forecast.ModelConfig{Profile: "groq", Limits: lim}, Config{
		Limits:     lim,
		Flows:      []Flow{{Name: "summary", Weight: 1}, {Name: "title", Weight: 2}, {Name: "analysis", Weight: 3}},
		ClientKeys: []ClientKey{{Key: clientKey}},
		MaxWait:    2 * time.Minute,
		// Under the race detector, with the other packages' tests running
		// beside it, a request can take over a second from leaving the
		// gateway to being counted by the simulator: the lag must cover it.
		Lag:     3 * time.Second,
		journal: journal.Record,
	})
	type flowPlan struct {
		Name         string `json:"name"`
		Count        int    `json:"count"`
		Stream       bool   `json:"stream"`
		IncludeUsage bool   `json:"include_usage"`
	}
	// About 120 tokens a request: 50 fit beside the filler in the first
	// minute, the other 235 in the second, in shares of 1:2:3.
	plan := struct {
		Model           string     `json:"model"`
		FillerMaxTokens int        `json:"filler_max_tokens"`
		MaxTokens       int        `json:"max_tokens"`
		Flows           []flowPlan `json:"flows"`
	}{"llama-3.1-8b-instant", 24000, 100, []flowPlan{
		{Name: "summary", Count: 55, Stream: true, IncludeUsage: true},
		{Name: "title", Count: 95, Stream: true},
		{Name: "analysis", Count: 135},
	}}
	planJSON, _ := json.Marshal(plan)
	// Requests are counted as they arrive, for the lines' lengths below.
	arrivals := &arrivalLog{}
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/chat/completions" {
			arrivals.add(r.Header.Get(FlowHeader))
		}
		b.gw.ServeHTTP(w, r)
	}))
	defer front.Close()

	cmd := exec.CommandContext(testBudget(t), node, script)
	cmd.Dir = filepath.Dir(script)
	cmd.Env = append(os.Environ(), "GATEWAY_BASE_URL="+front.URL+"/v1", "GATEWAY_API_KEY="+clientKey,
		"GATEWAY_PLAN="+string(planJSON), "GATEWAY_NODE_MODULES="+modules, "NODE_PATH="+modules)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("node gateway-check.mjs: %v\nstderr:\n%s\nstdout:\n%s", err, stderr.String(), stdout.String())
	}
	t.Logf("the bursts took %s", time.Since(start).Round(time.Millisecond))
	// Everything fits in two minutes of the key, counted from the filler's
	// admission, the first: an admission in a third means room was held
	// idle (or refused) that the key had.
	admitted := journal.admissions()
	if len(admitted) == 0 {
		t.Fatal("the governor recorded no admission")
	}
	if first, last := admitted[0].At, admitted[len(admitted)-1].At; last.Sub(first) >= 2*time.Minute {
		t.Errorf("the last call was admitted %s after the filler: some requests waited for a third minute", last.Sub(first).Round(time.Millisecond))
	}
	assertNoKey(t, "client output", stdout.String()+stderr.String())

	type flowOut struct {
		Sent       int               `json:"sent"`
		OK         int               `json:"ok"`
		WithUsage  int               `json:"with_usage"`
		EmptyText  int               `json:"empty_text"`
		MaxMS      int64             `json:"max_ms"`
		Failures   []json.RawMessage `json:"failures"`
		Completion int64             `json:"completion_tokens"`
	}
	var out struct {
		Filler struct {
			OK bool `json:"ok"`
		} `json:"filler"`
		Flows map[string]flowOut `json:"flows"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("client output %q: %v", stdout.String(), err)
	}
	if testing.Verbose() {
		t.Logf("client output: %s", stdout.String())
	}

	// Every request answered, streams passed through, usage chunks only for
	// the flow that asked for them.
	if !out.Filler.OK {
		t.Errorf("the filler call failed: %s", stdout.String())
	}
	total := 1
	for _, p := range plan.Flows {
		f := out.Flows[p.Name]
		total += p.Count
		if f.OK != p.Count || f.EmptyText != 0 {
			t.Errorf("flow %s: %d of %d answered, %d empty; failures %s", p.Name, f.OK, p.Count, f.EmptyText, f.Failures)
		}
		wantUsage := p.Count
		if p.Stream && !p.IncludeUsage {
			wantUsage = 0
		}
		if f.WithUsage != wantUsage {
			t.Errorf("flow %s: %d answers carried usage, want %d", p.Name, f.WithUsage, wantUsage)
		}
	}

	// The provider refused nothing and saw each request once.
	resp, err := http.Get(b.sim.URL + "/sim/stats")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Requests         int64            `json:"requests"`
		Succeeded        int64            `json:"succeeded"`
		Rejected         int64            `json:"rejected"`
		RejectedByStatus map[string]int64 `json:"rejected_by_status"`
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("/sim/stats: %v", err)
	}
	if st.Rejected != 0 || st.RejectedByStatus["429"] != 0 || st.RejectedByStatus["413"] != 0 ||
		st.Requests != int64(total) || st.Succeeded != int64(total) {
		t.Errorf("simulator: %d requests, %d succeeded, %d rejected %v; want %d, %d, 0",
			st.Requests, st.Succeeded, st.Rejected, st.RejectedByStatus, total, total)
	}
	_, metrics := b.do(t, "GET", "/metrics", "", map[string]string{"Authorization": "Bearer " + clientKey})
	for _, line := range strings.Split(string(metrics), "\n") {
		if strings.HasPrefix(line, "sluice_gateway_requests_total{") && !strings.Contains(line, `code="200"`) {
			t.Errorf("the gateway answered other than 200: %s", line)
		}
	}

	// Shares while all three flows were backlogged, from the governor's own
	// record of its admissions, in the order it made them, from the end of
	// the filler's minute (see backlogged).
	tokens, n := backlogged(admitted, arrivals.list(), weights, admitted[0].At.Add(time.Minute))
	if n < 100 {
		t.Fatalf("only %d admissions while all flows were backlogged; the measurement needs more", n)
	}
	var sum int64
	var wsum float64
	for f, w := range weights {
		sum += tokens[f]
		wsum += w
	}
	for f, w := range weights {
		share, want := float64(tokens[f])/float64(sum), w/wsum
		t.Logf("flow %s: %.3f of %d tokens over %d backlogged admissions (weight share %.3f)", f, share, sum, n, want)
		if math.Abs(share-want) > 0.1*want {
			t.Errorf("flow %s took %.3f of the tokens while all flows were backlogged, want %.3f ± 10 %%", f, share, want)
		}
	}
	_, flows := b.do(t, "GET", "/v1/flows", "", map[string]string{"Authorization": "Bearer " + clientKey})
	assertNoKey(t, "/v1/flows", string(flows))
}

// chargeLog keeps the admissions a governor journals (Config.Journal) in order.
type chargeLog struct {
	mu       sync.Mutex
	admitted []governor.Charge
	seen     map[uint64]bool
}

func (l *chargeLog) Record(c governor.Charge) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = map[uint64]bool{}
	}
	if !l.seen[c.ID] { // later records of an ID correct its charge
		l.seen[c.ID] = true
		l.admitted = append(l.admitted, c)
	}
}

func (l *chargeLog) admissions() []governor.Charge {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.admitted)
}

type arrival struct {
	at   time.Time
	flow string
}

// arrivalLog keeps the time and flow of every chat request as it arrives.
type arrivalLog struct {
	mu    sync.Mutex
	items []arrival
}

func (l *arrivalLog) add(flow string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.items = append(l.items, arrival{time.Now(), flow})
}

func (l *arrivalLog) list() []arrival {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.items)
}

// backlogged sums the tokens admitted to each flow of weights, from the
// time from on, at the moments when every one of those flows had a request
// waiting: one that had arrived and was not admitted yet. Admissions are
// taken in the order the governor made them (several share one instant when
// room frees at once).
//
// A request is in the governor's line only once the gateway has read and
// priced it, a moment after it arrived (longer on a busy machine), and a
// call admitted the moment it is priced, while the key has room, goes first
// come, first served. The callers count from a minute after their first
// admission, a call that fills (with others, perhaps) the key's first
// minute: every admission from then on is of a call that waited in line for
// room the window freed, and the requests that arrived before it had long
// been priced.
func backlogged(admitted []governor.Charge, arrived []arrival, weights map[string]float64, from time.Time) (map[string]int64, int) {
	tokens := map[string]int64{}
	waiting := map[string]int{}
	n, next := 0, 0
	for _, c := range admitted {
		for next < len(arrived) && !arrived[next].at.After(c.At) {
			waiting[arrived[next].flow]++
			next++
		}
		waiting[c.Flow]--
		if _, ok := weights[c.Flow]; !ok {
			continue
		}
		all := true
		for f := range weights {
			if f != c.Flow && waiting[f] <= 0 {
				all = false
			}
		}
		if all && !c.At.Before(from) {
			tokens[c.Flow] += c.Cost.Tokens()
			n++
		}
	}
	return tokens, n
}

// On a process of a cluster, GET /v1/flows shows each flow on every
// process and in total, this process's own figures beside: a flow only
// another process has is listed too.
func TestFlowsShowTheCluster(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	b := setup(t, forecast.ModelConfig{Profile: "groq", Limits: limits("rpm=30,tpm=6000")},
		Config{Limits: limits("rpm=30,tpm=6000"), Flows: []Flow{{Name: "summary"}},
			ClusterFlows: func(context.Context) ([]NodeFlow, error) {
				return []NodeFlow{
					{Node: "n1", Flow: "summary", Waiting: 1, Admitted: 4, Input: 40, Output: 20, At: at},
					{Node: "n2", Flow: "summary", Waiting: 2, Admitted: 5, Input: 50, Output: 25, At: at},
					{Node: "n2", Flow: "title", Waiting: 3, Admitted: 0, At: at},
				}, nil
			}})
	resp, body := b.do(t, "GET", "/v1/flows", "", nil)
	if resp == nil || resp.StatusCode != 200 {
		t.Fatalf("GET /v1/flows: %v %s", resp, body)
	}
	var v FlowsView
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatal(err)
	}
	byName := map[string]FlowView{}
	for _, f := range v.Flows {
		byName[f.Name] = f
	}
	s := byName["summary"]
	if c := s.Cluster; c == nil || c.Waiting != 3 || c.Admitted != 9 || c.Tokens["total"] != 135 || len(c.Nodes) != 2 || c.Nodes[1].Node != "n2" || c.Nodes[1].Tokens["input"] != 50 {
		t.Errorf("summary's cluster view %+v; want 3 waiting, 9 admitted, 135 tokens over n1 and n2", s.Cluster)
	}
	title, ok := byName["title"]
	if !ok || title.Cluster == nil || title.Cluster.Waiting != 3 || title.State != "waiting-for-quota" || title.Waiting != 0 {
		t.Errorf("title, only on n2: %+v (listed %v); want it listed, waiting for quota, 3 waiting on n2 and none here", title, ok)
	}
	// Without a cluster, nothing of it is said.
	solo := setup(t, forecast.ModelConfig{Profile: "groq", Limits: limits("rpm=30")}, Config{Limits: limits("rpm=30"), Flows: []Flow{{Name: "summary"}}})
	if _, body := solo.do(t, "GET", "/v1/flows", "", nil); strings.Contains(string(body), `"cluster"`) {
		t.Errorf("a gateway on no cluster shows a cluster: %s", body)
	}
}
