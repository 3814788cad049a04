package benchcmd

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
)

// buildSluice builds n variants of sluice (./cmd/sluice) from the module at src
// (default: the module of the current folder) into dir, as sluice-0 …
// sluice-(n-1): each with its own -X main.buildStamp, every other one with
// -trimpath, so that no two are the same binary, as separate releases of
// one code are not.
func buildSluice(ctx context.Context, src, dir string, n int) error {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("--upgrade builds sluice with the go command: %w", err)
	}
	if src == "" {
		out, err := exec.CommandContext(ctx, goCmd, "env", "GOMOD").Output() // #nosec G204 -- the go command
		mod := strings.TrimSpace(string(out))
		if err != nil || mod == "" || mod == os.DevNull {
			return fmt.Errorf("the current folder is not in the sluice module (go env GOMOD: %q, %v): give --src", mod, err)
		}
		src = filepath.Dir(mod)
	}
	build := func(i int) error {
		args := []string{"build", "-o", filepath.Join(dir, "sluice-"+strconv.Itoa(i)), "-ldflags", "-X main.buildStamp=" + strconv.Itoa(i)}
		if i%2 == 1 {
			args = append(args, "-trimpath")
		}
		cmd := exec.CommandContext(ctx, goCmd, append(args, "./cmd/sluice")...) // #nosec G204 -- the go command, on sluice's own source
		cmd.Dir = src
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go %s in %s: %v\n%s", strings.Join(args, " "), src, err, out)
		}
		return nil
	}
	// The first two fill the build cache for either kind of path; the
	// others then only link, a few at a time.
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.NumCPU())
	for i := range n {
		if i == 2 {
			wg.Wait()
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = build(i)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// sluiceBuilds returns the paths of the n builds in dir (sluice-0 …), after
// checking that no two are the same binary.
func sluiceBuilds(dir string, n int) ([]string, error) {
	paths := make([]string, n)
	seen := map[[sha256.Size]byte]int{}
	for i := range paths {
		paths[i] = filepath.Join(dir, "sluice-"+strconv.Itoa(i))
		b, err := os.ReadFile(paths[i])
		if err != nil {
			return nil, fmt.Errorf("build %d: %w", i, err)
		}
		sum := sha256.Sum256(b)
		if j, ok := seen[sum]; ok {
			return nil, fmt.Errorf("builds %d and %d are the same binary", j, i)
		}
		seen[sum] = i
	}
	return paths, nil
}

// defaultRestartCmd restarts the local cluster of the newest PostgreSQL
// version installed the Debian way (/etc/postgresql/VERSION/main).
func defaultRestartCmd() string {
	version := "15"
	if entries, err := os.ReadDir("/etc/postgresql"); err == nil {
		best := 0
		for _, e := range entries {
			if n, err := strconv.Atoi(e.Name()); err == nil && e.IsDir() && n > best {
				best, version = n, e.Name()
			}
		}
	}
	return "pg_ctlcluster --skip-systemctl-redirect " + version + " main restart"
}
