package backfill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/govkey"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/llm"
)

// selection is what a select step records: the batch it took, if any, and
// the cursor past the pending items it took (or found gone from the
// source), after which the next selection looks.
type selection struct {
	Batch batch        `json:"batch,omitzero"`
	After store.Cursor `json:"after,omitzero"`
}

// batch is one selected batch: the keys of its items, not their data,
// which its select step keeps in memory for the call (and a replay loads
// again).
type batch struct {
	Keys []string `json:"keys,omitempty"`
	// Rejects are the items' rejected outputs so far, in Keys' order.
	Rejects []int `json:"rejects,omitempty"`
	// TooLarge are items parked without a call: alone, their request
	// does not fit a limit of the key.
	TooLarge []store.Outcome `json:"too_large,omitempty"`
	// Gone are items Load no longer returned, rejected without a call
	// (goneReason), and GoneRejects the rejects of each so far: one that
	// comes back before MaxRejects such rejections is tried again.
	Gone        []string `json:"gone,omitempty"`
	GoneRejects []int    `json:"gone_rejects,omitempty"`
}

// goneReason is why an item Load no longer returns is rejected.
const goneReason = "no longer in the source"

func (bt batch) empty() bool { return len(bt.Keys) == 0 && len(bt.TooLarge) == 0 && len(bt.Gone) == 0 }

// gone adds to bt the items of next that data leaves out.
func (bt *batch) gone(next []store.Item, data map[string]json.RawMessage) {
	for _, it := range next {
		if _, ok := data[it.Key]; !ok {
			bt.Gone = append(bt.Gone, it.Key)
			bt.GoneRejects = append(bt.GoneRejects, it.Rejects)
		}
	}
}

// selectBatch takes the next eligible items of lane — the pending ones
// after the cursor after, and the rejected ones due again — but those of
// skip, at most MaxBatch of them and no more than the governor sizes the
// batch for, and keeps their data in cache for the call. Items found gone
// from the source (Load leaves them out) up to the last item taken go in
// the batch's Gone, to be rejected by its save, the cursor going past them;
// those left for a later batch do not, the cursor stopping before them.
func (b *backfill) selectBatch(ctx context.Context, after store.Cursor, lane store.Lane, cache map[string]json.RawMessage, skip batch) (selection, error) {
	sel := selection{After: after}
	passed := returning(skip)
	// Enough that MaxBatch are left when every item of skip that a
	// read may return comes back.
	next, err := b.set.rec.NextItems(ctx, b.ID, b.set.now(), b.MaxBatch+len(passed), sel.After, lane)
	if err != nil {
		return sel, err
	}
	if len(passed) > 0 {
		next = slices.DeleteFunc(next, func(it store.Item) bool { return passed[it.Key] })
	}
	if len(next) == 0 {
		return sel, nil
	}
	keys := make([]string, len(next))
	for i, it := range next {
		keys[i] = it.Key
	}
	data, err := b.Load(ctx, keys)
	if err != nil {
		return selection{}, fmt.Errorf("load items: %w", err)
	}
	var items []Item
	var rejects, at []int // each of items' rejects so far, and where it is in next
	for i, it := range next {
		if d, ok := data[it.Key]; ok { // else gone from the source since it was found
			items = append(items, Item{Key: it.Key, Data: d})
			rejects = append(rejects, it.Rejects)
			at = append(at, i)
		}
	}
	if len(items) == 0 {
		// None is there any more: a batch of items gone, with no call.
		sel.Batch.gone(next, data)
		sel.After = lastPending(next, sel.After)
		return sel, nil
	}
	// A batch carries at most MaxBatch items, however many came back:
	// those after it go in a later batch.
	items = items[:min(len(items), b.MaxBatch)]
	n, tooLarge, err := b.size(items)
	if err != nil {
		return selection{}, err
	}
	if n == 0 {
		// Alone, the first item does not fit a limit: it is parked, and
		// the rest go in the next batch.
		sel.Batch.TooLarge = []store.Outcome{{Key: items[0].Key, Reason: tooLarge}}
		sel.Batch.gone(next[:at[0]], data)
		sel.After = lastPending(next[:at[0]+1], sel.After)
		return sel, nil
	}
	for _, it := range items[:n] {
		sel.Batch.Keys = append(sel.Batch.Keys, it.Key)
		cache[it.Key] = it.Data
	}
	sel.Batch.Rejects = rejects[:n]
	sel.Batch.gone(next[:at[n-1]], data)
	sel.After = lastPending(next[:at[n-1]+1], sel.After)
	return sel, nil
}

// returning is the items of skip, a batch selected before the cursor a
// read starts from, that the read may still return: those rejected before
// (gone or not), which NextItems returns when due again wherever they are,
// and those parked as too large, whose state the batch does not say. Its
// pending items lie at or before the cursor, which NextItems reads after;
// so a batch of pending items returns nothing, and the next read asks for
// MaxBatch items, not twice as many.
func returning(skip batch) map[string]bool {
	var passed map[string]bool
	add := func(k string) {
		if passed == nil {
			passed = map[string]bool{}
		}
		passed[k] = true
	}
	for j, k := range skip.Keys {
		if j >= len(skip.Rejects) || skip.Rejects[j] > 0 {
			add(k)
		}
	}
	for _, o := range skip.TooLarge {
		add(o.Key)
	}
	for j, k := range skip.Gone {
		if j >= len(skip.GoneRejects) || skip.GoneRejects[j] > 0 {
			add(k)
		}
	}
	return passed
}

// lastPending is the cursor past the last pending item of items (in the
// order NextItems returned them), or after when none of them is pending.
func lastPending(items []store.Item, after store.Cursor) store.Cursor {
	for _, it := range slices.Backward(items) {
		if it.State == store.ItemPending {
			return it.After()
		}
	}
	return after
}

// request builds and completes the call for items.
func (b *backfill) request(items []Item) (*llm.ChatRequest, error) {
	req, err := b.Request(items)
	if err != nil {
		return nil, engine.NonRetriable(fmt.Errorf("build the request of %d items: %w", len(items), err))
	}
	return b.provider.Client.ApplyDefaults(req)
}

// size returns how many of items the next call carries: the governor's
// batch size for a call costing a base plus one item's share per item (the
// average item of items, rounded up), shrunk while the request's real cost
// does not fit a limit (items larger than the average). 0 means the first
// item alone does not fit: the string says which limit.
func (b *backfill) size(items []Item) (int, string, error) {
	cost := func(n int) (governor.Cost, error) {
		req, err := b.request(items[:n])
		if err != nil {
			return governor.Cost{}, err
		}
		return b.provider.Estimator.Cost(req), nil
	}
	// The whole batch is priced first: most often it is the call made, and
	// its estimate is kept for pricing the call (the estimator caches it).
	// The cost of one item and of what every call carries (the
	// instructions) come from it and the first item alone, so the
	// tokenizer goes over the first item twice and every other item once.
	n := len(items)
	c, err := cost(n)
	if err != nil {
		return 0, "", err
	}
	if n > 1 {
		one, err := cost(1)
		if err != nil {
			return 0, "", err
		}
		k := int64(n - 1)
		each := func(a, b int64) int64 { return (max(a-b, 0) + k - 1) / k } // rounded up: never under
		item := governor.Cost{Requests: each(c.Requests, one.Requests), Input: each(c.Input, one.Input), Output: each(c.Output, one.Output)}
		base := governor.Cost{Requests: max(one.Requests-item.Requests, 0), Input: max(one.Input-item.Input, 0), Output: max(one.Output-item.Output, 0)}
		if m := min(max(b.provider.Governor.BatchSize(b.set.now(), b.Flow, base, item, len(items), b.Within), 1), n); m < n {
			n = m
			if c, err = cost(n); err != nil {
				return 0, "", err
			}
		}
	}
	for {
		err = b.caller.Check(c)
		if err == nil {
			return n, "", nil
		}
		if n == 1 {
			var tl *governor.TooLargeError
			if errors.As(err, &tl) {
				b.provider.Governor.Inside(govkey.Key{}).RefusedFlow(b.Flow, tl.Limit)
			}
			return 0, err.Error(), nil
		}
		n /= 2
		if c, err = cost(n); err != nil {
			return 0, "", err
		}
	}
}
