package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
)

// demoLog is where the demo's warnings go: the app's and its own, one
// line at a time, so the terminal view is not torn.
type demoLog struct {
	mu       sync.Mutex
	w        io.Writer
	stopping atomic.Bool // set when the demo begins to stop
}

// quietStop drops the records of work cut short by the demo's own stop —
// DBOS's queue runners log their cancelled polls as errors — and passes
// every other record on, during the stop too.
type quietStop struct {
	slog.Handler
	stopping *atomic.Bool
}

func (q quietStop) Handle(ctx context.Context, r slog.Record) error {
	if q.stopping.Load() {
		cancelled := false
		r.Attrs(func(a slog.Attr) bool {
			if err, ok := a.Value.Any().(error); ok && errors.Is(err, context.Canceled) {
				cancelled = true
			} else if strings.Contains(a.Value.String(), context.Canceled.Error()) {
				cancelled = true
			}
			return !cancelled
		})
		if cancelled || strings.Contains(r.Message, "Workflow ID conflict") {
			return nil
		}
	}
	return q.Handler.Handle(ctx, r)
}

func (q quietStop) WithAttrs(as []slog.Attr) slog.Handler {
	return quietStop{q.Handler.WithAttrs(as), q.stopping}
}

func (q quietStop) WithGroup(name string) slog.Handler {
	return quietStop{q.Handler.WithGroup(name), q.stopping}
}

func (l *demoLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *demoLog) printf(format string, args ...any) {
	_, _ = fmt.Fprintf(l, format, args...)
}
