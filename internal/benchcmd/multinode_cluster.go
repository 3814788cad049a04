package benchcmd

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
)

// multinodeCluster is the nodes of one run.
type multinodeCluster struct {
	b        *multinodeBench
	db       string
	runs     *dbosRuns // reads the runs in db
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
	if b.dayBurst > 0 {
		cmd.Args = append(cmd.Args, "--day-burst", b.dayBurst.String())
	}
	cmd.Env = append(os.Environ(), MultinodeNodeEnv+"="+name, multinodeTokenEnv+"="+b.token)
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
	busy := c.runsUnderWay()
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
			busy := c.runsUnderWay()
			if n := busy[nd.name]; n > 0 || c.unfinished() == 0 {
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
	for {
		counts, err := c.runs.countByStatus(summarize.FunctionID)
		if err != nil {
			return fmt.Errorf("count runs: %w", err)
		}
		if counts.total() >= n && counts.notEnded() == 0 {
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
func (c *multinodeCluster) runsUnderWay() map[string]int {
	n, err := c.runs.pendingByExecutor()
	if err != nil {
		return map[string]int{}
	}
	return n
}

// unfinished counts the pipeline's runs that have not ended (-1 when the
// database cannot say).
func (c *multinodeCluster) unfinished() int {
	counts, err := c.runs.countByStatus(summarize.FunctionID)
	if err != nil {
		return -1
	}
	return counts.of(dbos.WorkflowStatusPending, dbos.WorkflowStatusEnqueued)
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
