// Command testreport reads the output of "go test -json" on its standard
// input and prints what a person needs from it: each package's result line
// as it ends, the whole output of every test that failed (and of every test
// still running when its package failed, as on a timeout or a panic), and
// build errors. At the end it writes a report: the tests that failed and the
// slowest tests, to standard output or to the file -report names. It exits 1
// if any package or build failed, so scripts/test.sh can use it in a pipe.
//
//	go test -json ./... | go run ./scripts/testreport -slowest 10
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// event is one line of "go test -json" (see "go doc test2json").
type event struct {
	Action      string
	Package     string
	Test        string
	Elapsed     float64 // seconds
	Output      string
	ImportPath  string // of build-output and build-fail events
	FailedBuild string // of a package's fail event when its build failed
}

// result is what the report says of one finished test.
type result struct {
	pkg, test string
	elapsed   time.Duration
}

type report struct {
	out      io.Writer
	running  map[[2]string][]string // output of each test that has not ended, by package and test
	failed   []result
	slow     []result // top-level tests that passed or failed
	pkgs     map[string]string
	builds   []string // packages whose build failed
	passed   int
	skipped  int
	nonJSON  int
	maxLines int
}

func main() {
	reportPath := flag.String("report", "", "write the closing report to this file instead of standard output")
	slowest := flag.Int("slowest", 10, "how many of the slowest tests the report names")
	flag.Parse()
	r := &report{out: os.Stdout, running: map[[2]string][]string{}, pkgs: map[string]string{}, maxLines: 2000}
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		r.line(sc.Bytes())
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "testreport: reading go test's output: %v\n", err)
		os.Exit(1)
	}
	var w io.Writer = os.Stdout
	if *reportPath != "" {
		f, err := os.Create(*reportPath)
		if err != nil {
			fmt.Fprintf(os.Stderr, "testreport: %v\n", err)
			os.Exit(1)
		}
		defer f.Close()
		w = f
	}
	ok := r.close(w, *slowest)
	if !ok {
		if f, isFile := w.(*os.File); isFile && f != os.Stdout {
			f.Close()
		}
		os.Exit(1)
	}
}

// line handles one line of go test's output.
func (r *report) line(b []byte) {
	var e event
	if len(b) == 0 || b[0] != '{' || json.Unmarshal(b, &e) != nil {
		// go vet's and the linker's complaints, and anything else go test
		// printed outside its JSON.
		r.nonJSON++
		fmt.Fprintf(r.out, "%s\n", b)
		return
	}
	key := [2]string{e.Package, e.Test}
	switch e.Action {
	case "build-output":
		fmt.Fprint(r.out, e.Output)
	case "build-fail":
		r.builds = append(r.builds, e.ImportPath)
	case "output":
		if e.Test == "" {
			if e.Output != "PASS\n" && !strings.HasPrefix(e.Output, "ok  \t") && !strings.HasPrefix(e.Output, "FAIL\t") && e.Output != "FAIL\n" {
				fmt.Fprint(r.out, e.Output) // printed outside any test, e.g. by TestMain
			}
			return
		}
		if lines := r.running[key]; len(lines) < r.maxLines {
			r.running[key] = append(lines, e.Output)
		} else if len(lines) == r.maxLines {
			r.running[key] = append(lines, "… (more output cut)\n")
		}
	case "run":
		r.running[key] = nil
	case "pass", "fail", "skip":
		d := time.Duration(e.Elapsed * float64(time.Second))
		if e.Test == "" {
			r.endPackage(e, d)
			return
		}
		lines := r.running[key]
		delete(r.running, key)
		switch e.Action {
		case "fail":
			fmt.Fprint(r.out, strings.Join(lines, ""))
			r.failed = append(r.failed, result{e.Package, e.Test, d})
		case "pass":
			r.passed++
		case "skip":
			r.skipped++
		}
		if e.Action != "skip" && !strings.Contains(e.Test, "/") {
			r.slow = append(r.slow, result{e.Package, e.Test, d})
		}
	}
}

// endPackage prints a package's result, and, when it failed, the output of
// its tests that never ended: a panic or a timeout stops the test binary
// with them still running.
func (r *report) endPackage(e event, d time.Duration) {
	r.pkgs[e.Package] = e.Action
	if e.Action == "fail" {
		var left [][2]string
		for k := range r.running {
			if k[0] == e.Package {
				left = append(left, k)
			}
		}
		slices.SortFunc(left, func(a, b [2]string) int { return strings.Compare(a[1], b[1]) })
		for _, k := range left {
			fmt.Fprintf(r.out, "--- %s did not end:\n%s", k[1], strings.Join(r.running[k], ""))
			r.failed = append(r.failed, result{e.Package, k[1] + " (did not end)", 0})
			delete(r.running, k)
		}
	}
	word := map[string]string{"pass": "ok  ", "fail": "FAIL", "skip": "?   "}[e.Action]
	if e.FailedBuild != "" {
		fmt.Fprintf(r.out, "FAIL\t%s [build failed]\n", e.Package)
		return
	}
	fmt.Fprintf(r.out, "%s\t%s\t%.3fs\n", word, e.Package, d.Seconds())
}

// close writes the report and says whether everything passed.
func (r *report) close(w io.Writer, slowest int) bool {
	var failedPkgs []string
	for p, a := range r.pkgs {
		if a == "fail" {
			failedPkgs = append(failedPkgs, p)
		}
	}
	slices.Sort(failedPkgs)
	ok := len(failedPkgs) == 0 && len(r.builds) == 0 && len(r.pkgs) > 0
	fmt.Fprintf(w, "%d packages, %d failed; %d tests passed, %d failed, %d skipped\n",
		len(r.pkgs), len(failedPkgs), r.passed, len(r.failed), r.skipped)
	for _, b := range r.builds {
		fmt.Fprintf(w, "  build failed: %s\n", b)
	}
	for _, f := range r.failed {
		fmt.Fprintf(w, "  FAIL %s %s (%s)\n", f.pkg, f.test, f.elapsed.Round(time.Millisecond))
	}
	if len(r.pkgs) == 0 {
		fmt.Fprintln(w, "  no package reported a result")
	}
	slices.SortStableFunc(r.slow, func(a, b result) int { return cmp.Compare(b.elapsed, a.elapsed) })
	if n := min(slowest, len(r.slow)); n > 0 {
		fmt.Fprintf(w, "slowest %d tests:\n", n)
		for _, s := range r.slow[:n] {
			fmt.Fprintf(w, "  %8s  %s %s\n", s.elapsed.Round(100*time.Millisecond), s.test, s.pkg)
		}
	}
	return ok
}
