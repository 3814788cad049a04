package benchcmd

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// crashWorkerProc is a running worker whose stdout the parent follows.
type crashWorkerProc struct {
	cmd   *exec.Cmd
	done  chan error
	ready chan struct{}

	mu    sync.Mutex
	out   strings.Builder
	sent  int    // documents sent in all, as the worker last said
	stamp string // the buildStamp it printed
}

func startCrashWorker(ctx context.Context, exe string, env []string) (*crashWorkerProc, error) {
	cmd := exec.CommandContext(ctx, exe, "bench", "crash") // #nosec G204 -- this binary
	cmd.Env = env
	w := &crashWorkerProc{cmd: cmd, done: make(chan error, 1), ready: make(chan struct{})}
	cmd.Stderr = w
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start worker: %w", err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == crashReady {
				close(w.ready)
			}
			if stamp, ok := strings.CutPrefix(sc.Text(), crashBuild); ok {
				w.mu.Lock()
				w.stamp = stamp
				w.mu.Unlock()
			}
			if n, err := strconv.Atoi(strings.TrimPrefix(sc.Text(), crashSent)); err == nil {
				w.mu.Lock()
				w.sent = max(w.sent, n)
				w.mu.Unlock()
				continue // not worth keeping in the output
			}
			_, _ = w.Write(append(sc.Bytes(), '\n'))
		}
		_, _ = io.Copy(io.Discard, stdout)
		w.done <- cmd.Wait()
	}()
	return w, nil
}

func (w *crashWorkerProc) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.out.Len() < 1<<20 { // enough to show why a worker failed
		w.out.Write(p)
	}
	return len(p), nil
}

func (w *crashWorkerProc) output() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.out.String()
}

// sleep waits d, failing if the worker exits or ctx ends first.
func (w *crashWorkerProc) sleep(ctx context.Context, d time.Duration) error {
	return w.await(ctx, nil, d)
}

func (w *crashWorkerProc) waitReady(ctx context.Context) error {
	return w.await(ctx, w.ready, time.Minute)
}

// await waits until ready is closed, or with ready nil until d has passed;
// it fails if d passes first, or the worker exits, or ctx ends.
func (w *crashWorkerProc) await(ctx context.Context, ready <-chan struct{}, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ready:
		return nil
	case <-t.C:
		if ready == nil {
			return nil
		}
		return fmt.Errorf("not ready after %s", d)
	case err := <-w.done:
		w.done <- err
		select {
		case <-ready: // a final worker may be done as soon as it is ready
			return nil
		default:
		}
		return fmt.Errorf("exited before it was stopped: %v", err)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// progress waits until the simulator has answered n more calls.
func (w *crashWorkerProc) progress(ctx context.Context, calls *callLog, n int) error {
	from, deadline := calls.answered(), time.Now().Add(crashStall)
	for calls.answered() < from+n {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d calls answered in %s, want %d", calls.answered()-from, crashStall, n)
		}
		if err := w.sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// sentCount returns how many documents had been sent in all when the
// worker last said.
func (w *crashWorkerProc) sentCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sent
}

// build returns the buildStamp the worker printed.
func (w *crashWorkerProc) build() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stamp
}

// term sends the worker SIGTERM and waits for it to exit by itself, for up
// to limit (then kills it), and returns how long it took; a worker that
// exits with an error fails.
func (w *crashWorkerProc) term(ctx context.Context, limit time.Duration) (time.Duration, error) {
	began := time.Now()
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return 0, err
	}
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case err := <-w.done:
		w.done <- err
		return time.Since(began), err
	case <-t.C:
		w.kill()
		return 0, fmt.Errorf("still running %s after SIGTERM", limit)
	case <-ctx.Done():
		w.kill()
		return 0, ctx.Err()
	}
}

func (w *crashWorkerProc) kill() {
	_ = w.cmd.Process.Kill()
	err := <-w.done
	w.done <- err
}

func (w *crashWorkerProc) wait() error {
	err := <-w.done
	w.done <- err
	return err
}
