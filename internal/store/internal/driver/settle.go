package driver

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/internal/store"
)

// Settle implements store.Store.
func (b Backfills) Settle(ctx context.Context, tx store.Tx, s store.Settlement) error {
	op, err := named("settle batch", " of ", "backfill name", s.Backfill, store.MaxKeyBytes)
	if err != nil {
		return err
	}
	s, err = checkSettlement(s)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if len(s.Outcomes) == 0 {
		return nil
	}
	settle := func(tx store.Tx) error { return b.settle(ctx, tx, s) }
	if tx != nil {
		err = settle(tx)
	} else {
		err = b.conn.InTx(ctx, settle)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// checkSettlement returns s as it is stored, its outcomes sorted by key
// and its reasons cut, or an error naming what must not be stored.
func checkSettlement(s store.Settlement) (store.Settlement, error) {
	if err := checkName("run ID", s.RunID, store.MaxRunIDBytes); err != nil {
		return s, err
	}
	if err := checkName("request ID", s.RequestID, store.MaxKeyBytes); err != nil {
		return s, err
	}
	switch {
	case s.Shard < 0 || s.Shard >= store.MaxLanes:
		return s, fmt.Errorf("shard %d: want 0 to %d", s.Shard, store.MaxLanes-1)
	case s.MaxRejects < 1:
		return s, fmt.Errorf("MaxRejects %d is under 1", s.MaxRejects)
	case s.RetryAfter < 0:
		return s, fmt.Errorf("RetryAfter %s is negative", s.RetryAfter)
	}
	if err := checkTime("time", s.At); err != nil {
		return s, err
	}
	for _, then := range s.Then {
		if err := checkName("backfill name in Then", then, store.MaxKeyBytes); err != nil {
			return s, err
		}
	}
	out := slices.Clone(s.Outcomes)
	slices.SortFunc(out, func(a, b store.Outcome) int { return strings.Compare(a.Key, b.Key) })
	for i, o := range out {
		if err := checkName("key", o.Key, store.MaxKeyBytes); err != nil {
			return s, err
		}
		if i > 0 && out[i-1].Key == o.Key {
			return s, fmt.Errorf("key %s is in the batch twice", quote(o.Key))
		}
		if o.Saved {
			out[i].Reason = ""
			continue
		}
		if o.Reason == "" {
			return s, fmt.Errorf("rejected key %s has no reason", quote(o.Key))
		}
		out[i].Reason = text(o.Reason, store.MaxReasonBytes)
	}
	s.Outcomes = out
	s.Then = slices.Compact(slices.Sorted(slices.Values(s.Then)))
	s.At = Millis(s.At)
	return s, nil
}

// settle records s, checked, in tx: it reads and locks the batch's items,
// then writes only what changes, so the same s a second time writes
// nothing. Jobs are written last and in name order, as every
// transaction here writes them, so that concurrent ones cannot deadlock.
func (b Backfills) settle(ctx context.Context, tx store.Tx, s store.Settlement) error {
	keys := make([]string, len(s.Outcomes))
	for i, o := range s.Outcomes {
		keys[i] = o.Key
	}
	list, err := json.Marshal(keys)
	if err != nil {
		return err
	}
	items, err := b.readItems(ctx, txQuery(tx), b.sql["lock_items"], s.Backfill, string(list))
	if err != nil {
		return err
	}
	byKey := make(map[string]store.Item, len(items))
	for _, it := range items {
		byKey[it.Key] = it
	}
	var changed []settledItem
	var saved []string
	c := counts{}
	progress := false
	for _, o := range s.Outcomes {
		it, ok := byKey[o.Key]
		if !ok {
			return fmt.Errorf("no item %s", quote(o.Key))
		}
		after, ok := settled(it, o, s)
		if !ok {
			continue
		}
		c[it.State]--
		c[after.State]++
		changed = append(changed, settledItem{Key: after.Key, State: after.State, EligibleAt: after.EligibleAt.UnixMilli(),
			ProcessedAt: nullMillis(after.ProcessedAt), Rejects: after.Rejects, Reason: after.Reason, RetryAt: nullMillis(after.RetryAt),
			ActiveAt: s.At.UnixMilli()})
		switch after.State {
		case store.ItemSaved:
			saved = append(saved, after.Key)
			progress = true
		case store.ItemParked:
			progress = true
		}
	}
	if len(changed) == 0 {
		return nil
	}
	rows, err := json.Marshal(changed)
	if err != nil {
		return err
	}
	var call int64
	err = txQuery(tx)(ctx, b.sql["record_call"], []any{s.RunID, s.RequestID}, func(r Row) error { return r.Scan(&call) })
	if err != nil {
		return fmt.Errorf("record the call: %w", err)
	}
	if _, err := tx.Exec(ctx, b.sql["settle_items"], s.Backfill, string(rows), call); err != nil {
		return err
	}
	jobs := map[string]counts{s.Backfill: c}
	if len(saved) > 0 {
		for _, then := range s.Then {
			n, err := b.addItems(ctx, tx, then, saved, s.At, "")
			if err != nil {
				return err
			}
			if jobs[then] == nil {
				jobs[then] = counts{}
			}
			jobs[then][store.ItemPending] += n
		}
	}
	for _, job := range slices.SortedFunc(maps.Keys(jobs), strings.Compare) {
		var at time.Time
		if job == s.Backfill && progress {
			at = s.At
		}
		if err := b.countJobItems(ctx, tx, job, s.At, s.Shard, jobs[job], at); err != nil {
			return err
		}
	}
	return nil
}

// settledItem is an item's new record as settle_items reads it from JSON.
type settledItem struct {
	Key         string          `json:"key"`
	State       store.ItemState `json:"state"`
	EligibleAt  int64           `json:"eligible_at"`  // as read: it never changes
	ProcessedAt any             `json:"processed_at"` // Unix ms, or nil
	Rejects     int             `json:"rejects"`
	Reason      string          `json:"reason"`
	RetryAt     any             `json:"retry_at"`  // Unix ms, or nil
	ActiveAt    int64           `json:"active_at"` // the settlement's time: the item's latest activity
}

// settled returns it after outcome o of s, a settlement checkSettlement
// returned, and whether o changes it. An item saved or parked is final,
// and one that records s's run and request ID has had its outcome of s.
func settled(it store.Item, o store.Outcome, s store.Settlement) (store.Item, bool) {
	if it.State == store.ItemSaved || it.State == store.ItemParked || (it.RunID == s.RunID && it.RequestID == s.RequestID) {
		return it, false
	}
	it.RunID, it.RequestID = s.RunID, s.RequestID
	if o.Saved {
		it.State, it.ProcessedAt, it.RetryAt = store.ItemSaved, s.At, time.Time{}
		return it, true
	}
	it.Rejects++
	it.Reason = o.Reason
	if it.Rejects >= s.MaxRejects {
		it.State, it.ProcessedAt, it.RetryAt = store.ItemParked, s.At, time.Time{}
	} else {
		it.State, it.RetryAt = store.ItemRejected, Millis(s.At.Add(s.RetryAfter))
	}
	return it, true
}
