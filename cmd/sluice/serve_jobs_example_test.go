package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/testenv"
)

// The DevPick example in YAML (examples/devpick-yaml), as its README runs
// it: the Python program makes the articles, serve --config runs the three
// jobs on them against the provider simulator (DevPick's key; see limits),
// and the Python program reads the results from its own table. All three
// jobs progress, no title is saved before its article's summary, and the
// provider refuses nothing.
func TestDevPickYAMLExample(t *testing.T) {
	t.Parallel()
	python, err := exec.LookPath("python3")
	if err != nil {
		if testenv.InCI() {
			t.Fatal("python3 is needed by the YAML example's test")
		}
		t.Skip("no python3")
	}
	dir := t.TempDir()
	src := filepath.Join("..", "..", "examples", "devpick-yaml")
	cfg, err := os.ReadFile(filepath.Join(src, "sluice.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	prog, err := os.ReadFile(filepath.Join(src, "devpick.py"))
	if err != nil {
		t.Fatal(err)
	}
	// The file's paths are relative to where serve runs; this test's serve
	// runs in the test's directory, so they are made absolute.
	text := strings.Replace(string(cfg), "source_db: sqlite:devpick.db", "source_db: sqlite:"+filepath.Join(dir, "devpick.db"), 1)
	if text == string(cfg) {
		t.Fatal("the example no longer names sqlite:devpick.db as its source_db")
	}
	if err := os.WriteFile(filepath.Join(dir, "sluice.yaml"), []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "devpick.py"), prog, 0o600); err != nil {
		t.Fatal(err)
	}
	py := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(python, append([]string{"devpick.py"}, args...)...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("devpick.py %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	py("init")
	py("add", "40")

	// DevPick's key, but four times its output tokens a minute: with the
	// example's own 1,000, the first analysis and summary batches take the
	// first minute's output tokens before any title is eligible, and the
	// first title waits the minute out — a wait of the key's limit that a
	// loaded machine would stretch towards the test's budget. The key and
	// the simulator have the same limits, so a 429 is still sluice's fault.
	//
	// And the whole day's tokens may be spent at once (--day-burst 24h):
	// with the default hour, the first second's batches spend the hour's
	// share of TPD (8,333 tokens), and from then on the key runs at the
	// day's even pace, about 140 tokens a minute shared by three jobs. A
	// title batch then waits several minutes for its share, as it should,
	// and whether one got into that first second depends on how fast the
	// machine made the summaries it waits for — not on sluice.
	const limits = "rpm=30,rpd=1000,tpm=8000,tpd=200000,otpm=4000"
	model, provider := startSim(t, limits)
	began := time.Now()
	base, logs := startServeLogged(t, func(string) string { return "" }, "--config", filepath.Join(dir, "sluice.yaml"),
		"--db", filepath.Join(dir, "sluice.db"), "--provider-url", provider, "--limits", limits, "--day-burst", "24h",
		"--log-level", "debug")
	// A job that does not progress is read from what serve says of it:
	// its flows' health, its runs and its log.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, path := range []string{"/v1/flows", "/v1/runs?limit=50", "/metrics"} {
			resp, err := http.Get(base + path)
			if err != nil {
				t.Logf("GET %s: %v", path, err)
				continue
			}
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			t.Logf("GET %s: %d %s", path, resp.StatusCode, b)
		}
		t.Logf("the provider: %+v", model.Stats())
		t.Logf("serve's log:\n%s", logs.String())
	})

	type progress struct{ Done, Total int }
	var got struct {
		Analysis progress `json:"analysis"`
		Summary  progress `json:"summary"`
		Title    progress `json:"title"`
		Early    int      `json:"titles_before_summaries"`
	}
	// The key's minute holds about two analysis batches (TPM 8,000) and a
	// title waits for its article's summary: the first title may take a
	// window or two of the key, which -race on a busy machine stretches
	// well past testenv.Budget.
	testenv.WaitWithin(t, 6*time.Minute, 250*time.Millisecond, func() (bool, string) {
		if err := json.Unmarshal([]byte(py("show", "--json")), &got); err != nil {
			t.Fatal(err)
		}
		if got.Early > 0 {
			t.Fatalf("%d titles saved before their article's summary", got.Early)
		}
		ok := got.Analysis.Done > 0 && got.Summary.Done > 0 && got.Title.Done > 0
		return ok, "the Python program sees " + py("show")
	})
	t.Logf("all three jobs progressed %s after serve started: %+v", time.Since(began).Round(time.Second), got)
	if s := model.Stats(); s.Rejected > 0 {
		t.Errorf("the provider refused %d calls (%v), want none", s.Rejected, s.RejectedByLimit)
	}
	// The saved outputs are English, as the jobs' checks demand, and each
	// names the article it is about in the Python program's own read.
	var art map[string]any
	out := py("show")
	if !strings.Contains(out, "->") {
		t.Fatalf("show lists no title: %s", out)
	}
	if err := json.Unmarshal([]byte(py("article", "a000000001")), &art); err != nil {
		t.Fatal(err)
	}
}
