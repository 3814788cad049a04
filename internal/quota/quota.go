// Package quota keeps a governor's day-window usage in sluice's store, so a
// process that restarts in the afternoon does not spend the day's budget a
// second time. Every admitted charge, and every correction of one, is
// journaled; Open restores the last day's charges of the key — of every
// process that used it — before the governor admits anything.
package quota

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/store"
)

// Governor is a governor whose charges are persisted.
type Governor struct {
	*governor.Governor
	j *journal

	started  atomic.Bool
	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
}

// Config says how often the journal is written.
type Config struct {
	// FlushEvery is how often buffered charges are written. Default 1s.
	FlushEvery time.Duration
	// Now is the clock used for restoring and pruning. Default time.Now.
	Now func() time.Time
}

// Open restores cfg.Key's charges of the last day from st into a new
// governor for cfg and journals its charges to st from then on. cfg.Key
// names the key in the store and must not be empty (and must never be the
// secret itself). Call Start to write in the background, Stop to flush.
func Open(ctx context.Context, st store.Store, cfg governor.Config, qc Config) (*Governor, error) {
	if cfg.Key == "" {
		return nil, errors.New("quota: the governor needs a Key to be persisted under")
	}
	if qc.FlushEvery <= 0 {
		qc.FlushEvery = time.Second
	}
	if qc.Now == nil {
		qc.Now = time.Now
	}
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("quota: %w", err)
	}
	j := &journal{st: st, key: cfg.Key, prefix: hex.EncodeToString(b[:]) + ":", every: qc.FlushEvery}
	cfg.Journal = j
	g, err := governor.New(cfg)
	if err != nil {
		return nil, err
	}
	now := qc.Now()
	saved, err := st.Charges(ctx, cfg.Key, now.Add(-24*time.Hour))
	if err != nil {
		return nil, fmt.Errorf("quota %s: restore: %w", cfg.Key, err)
	}
	charges := make([]governor.Charge, len(saved))
	for i, c := range saved {
		// IDs of earlier processes do not matter to the governor; keep them
		// distinct and below the ones it will give out now.
		charges[i] = governor.Charge{ID: 0, Flow: c.Flow, At: c.At, Cost: c.Cost}
	}
	g.Restore(now, charges)
	return &Governor{Governor: g, j: j, stop: make(chan struct{}), done: make(chan struct{})}, nil
}

// Start writes the journal every FlushEvery and prunes charges older than
// two days every hour, until Stop.
func (q *Governor) Start(ctx context.Context) {
	if !q.started.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer close(q.done)
		t := time.NewTicker(q.j.every)
		defer t.Stop()
		lastPrune := time.Time{}
		for {
			select {
			case <-q.stop:
				return
			case <-ctx.Done():
				return
			case now := <-t.C:
				_ = q.Flush(ctx) // kept in the buffer and retried on the next tick
				if now.Sub(lastPrune) > time.Hour {
					_, _ = q.j.st.PruneCharges(ctx, q.j.key, now.Add(-48*time.Hour))
					lastPrune = now
				}
			}
		}
	}()
}

// Flush writes the charges recorded since the last flush.
func (q *Governor) Flush(ctx context.Context) error { return q.j.flush(ctx) }

// Stop ends the background writer, if started, and flushes what is left.
// It is safe to call twice.
func (q *Governor) Stop(ctx context.Context) error {
	q.stopOnce.Do(func() { close(q.stop) })
	if q.started.Load() {
		select {
		case <-q.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return q.Flush(ctx)
}

// journal buffers charges for the store. Record runs under the governor's
// lock, so it only appends.
type journal struct {
	st     store.Store
	key    string
	prefix string // distinguishes this process's reservation ids from others'
	every  time.Duration

	mu      sync.Mutex
	pending map[uint64]store.Charge
	order   []uint64
	flushMu sync.Mutex
}

func (j *journal) Record(c governor.Charge) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.pending == nil {
		j.pending = map[uint64]store.Charge{}
	}
	if _, seen := j.pending[c.ID]; !seen {
		j.order = append(j.order, c.ID)
	}
	j.pending[c.ID] = store.Charge{ID: j.prefix + strconv.FormatUint(c.ID, 10), Flow: c.Flow, At: c.At, Cost: c.Cost}
}

func (j *journal) flush(ctx context.Context) error {
	j.flushMu.Lock()
	defer j.flushMu.Unlock()
	j.mu.Lock()
	if len(j.order) == 0 {
		j.mu.Unlock()
		return nil
	}
	batch := make([]store.Charge, 0, len(j.order))
	for _, id := range j.order {
		batch = append(batch, j.pending[id])
	}
	taken := j.pending
	j.pending, j.order = nil, nil
	j.mu.Unlock()
	if err := j.st.UpsertCharges(ctx, j.key, batch); err != nil {
		// Put back what was not written, unless a newer record replaced it.
		j.mu.Lock()
		if j.pending == nil {
			j.pending = map[uint64]store.Charge{}
		}
		for id, c := range taken {
			if _, newer := j.pending[id]; !newer {
				j.pending[id] = c
				j.order = append(j.order, id)
			}
		}
		j.mu.Unlock()
		return fmt.Errorf("quota %s: write charges: %w", j.key, err)
	}
	return nil
}
