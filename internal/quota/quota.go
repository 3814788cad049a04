// Package quota keeps a governor's day-window usage in sluice's store, so a
// process that restarts in the afternoon does not spend the day's budget a
// second time. A [Ledger] is a governor with that record: every admitted
// charge, and every correction of one, is journaled; Open restores the last
// day's charges of the key — of every process that used it — before the
// governor admits anything.
package quota

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/govkey"
	"github.com/sluice-dev/sluice/internal/store"
)

// Ledger is a governor whose charges are kept in sluice's store: the
// embedded Governor admits calls, and the Ledger writes down what they
// were charged. Its methods are safe for simultaneous use by multiple
// goroutines.
type Ledger struct {
	*governor.Governor
	j     *journal
	lease *leaser // nil unless one of a cluster
	// keep is how old a charge is pruned: a day more than the governor
	// restores.
	keep time.Duration

	mu      sync.Mutex // guards started and stopped
	started bool
	stopped bool
	stop    chan struct{} // closed by the first Stop
	done    chan struct{} // closed when the writer Start began has returned
}

// Config says how often the journal is written.
type Config struct {
	// FlushEvery is how often buffered charges are written. Default 1s.
	FlushEvery time.Duration
	// Now is the clock used for restoring and pruning. Default time.Now.
	Now func() time.Time
	// Cluster, if set, makes the Ledger one of several processes on the
	// key, each holding leases of the key's capacity from the store, so
	// their sum never exceeds a limit (see Cluster).
	Cluster *Cluster
}

// Open restores cfg.Key's charges of the last day from st into a new
// governor for cfg and returns it as a Ledger that journals its charges to
// st from then on. cfg.Key names the key in the store and must not be empty
// (and must never be the secret itself). Call Start to write in the
// background, Stop to flush.
func Open(ctx context.Context, st store.Store, cfg governor.Config, qc Config) (*Ledger, error) {
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
	cfg.Journal = j.Record
	var cc Cluster
	if qc.Cluster != nil {
		var err error
		if cc, err = qc.Cluster.withDefaults(); err != nil {
			return nil, err
		}
		if strings.Contains(cfg.Key, unitSeparator) {
			// The leases of its flows' budgets are named with it (budgetKey).
			return nil, fmt.Errorf("quota: key %q: a key shared by a cluster has no unit separator (U+001F) in its name", cfg.Key)
		}
	}
	g, err := governor.New(cfg)
	if err != nil {
		return nil, err
	}
	now := qc.Now()
	// A day of charges, or a month's under a budget per month.
	saved, err := st.Charges(ctx, cfg.Key, now.Add(-g.Kept()))
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
	if qc.Cluster != nil {
		// Its calls go only on room of the leases its leaser takes.
		g.Inside(govkey.Key{}).Leased()
	}
	l := &Ledger{Governor: g, j: j, keep: g.Kept() + 24*time.Hour, stop: make(chan struct{}), done: make(chan struct{})}
	if qc.Cluster != nil {
		l.lease = &leaser{cfg: cc, g: g, st: st, key: cfg.Key, now: qc.Now, lag: cfg.Lag}
	}
	return l, nil
}

// Start writes the journal every FlushEvery and prunes charges older than
// two days (31 days under a budget per month) every hour, until ctx ends or Stop. Charges recorded after the
// writer ends stay buffered until Flush or Stop. Starting again, or after
// Stop, does nothing.
func (l *Ledger) Start(ctx context.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started || l.stopped {
		return
	}
	l.started = true
	var leasing sync.WaitGroup
	if l.lease != nil {
		leasing.Go(func() { l.lease.run(ctx, l.stop) })
	}
	go func() {
		defer close(l.done)
		defer leasing.Wait()
		t := time.NewTicker(l.j.every)
		defer t.Stop()
		lastPrune := time.Time{}
		for {
			select {
			case <-l.stop:
				return
			case <-ctx.Done():
				return
			case now := <-t.C:
				_ = l.Flush(ctx) // kept in the buffer and retried on the next tick
				if now.Sub(lastPrune) > time.Hour {
					_, _ = l.j.st.PruneCharges(ctx, l.j.key, now.Add(-l.keep))
					if l.lease != nil {
						// Leases are kept as long as charges: two days, or 31
						// under a budget per month, whose grants sum a month
						// of them.
						_, _ = l.j.st.PruneLeases(ctx, l.j.key, l.lease.now().Add(-max(48*time.Hour, l.keep)))
					}
					lastPrune = now
				}
			}
		}
	}()
}

// Flush writes the charges recorded since the last flush.
func (l *Ledger) Flush(ctx context.Context) error { return l.j.flush(ctx) }

// Stop ends the background writer, if started, waits for it to return and
// flushes what is left: once it returns nil, the writer has returned and
// every charge recorded before Stop is in the store. It is safe to call
// twice.
func (l *Ledger) Stop(ctx context.Context) error {
	l.mu.Lock()
	if !l.stopped {
		l.stopped = true
		close(l.stop)
	}
	started := l.started
	l.mu.Unlock()
	if started {
		select {
		case <-l.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return l.Flush(ctx)
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
