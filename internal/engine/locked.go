package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/internal/store"
)

// SendLockWait bounds how long Send waits, in all, for an SQLite database
// that another connection or process holds locked (each statement already
// waits the database's busy timeout): a busy database slows a send down
// instead of failing it. Past it, Send's error matches store.ErrLocked,
// which the API answers with 503 and Retry-After.
const SendLockWait = 30 * time.Second

// sendLockWait is SendLockWait; tests shorten it.
var sendLockWait = SendLockWait

// whileLocked runs do, and runs it again while it fails because the
// database is locked (store.ErrLocked: nothing was written), backing off
// from 10 ms to a second, for SendLockWait of the wall clock at most. It
// logs once that it waits.
func (e *Engine) whileLocked(ctx context.Context, what string, do func() error) error {
	deadline := time.Now().Add(sendLockWait)
	pause := 10 * time.Millisecond
	for waited := false; ; waited = true {
		err := do()
		if err == nil || !errors.Is(err, store.ErrLocked) {
			if waited && err == nil {
				e.cfg.Logger.Info("sluice: the database is free again", "for", what)
			}
			return err
		}
		if !waited {
			e.cfg.Logger.Warn("sluice: the database is locked; waiting for it", "for", what, "at_most", sendLockWait.String())
		}
		if time.Now().Add(pause).After(deadline) {
			return fmt.Errorf("%s: waited %s for the database: %w", what, sendLockWait, err)
		}
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, context.Cause(ctx))
		}
		pause = min(2*pause, time.Second)
	}
}
