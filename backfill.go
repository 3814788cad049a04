package sluice

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/sluice-dev/sluice/internal/backfill"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/llm"
	"github.com/sluice-dev/sluice/run"
)

// Backfill works through the items a source says still need it — articles
// without an English title, say — asking the LLM about a batch of them per
// call and saving each item's output, for as long as items are eligible and
// the key's quota allows. Every item, run and job is recorded, and the
// backfill's health (progressing, waiting for quota, failing, stalled,
// idle, done) is judged by its progress.
//
// Pending (or Backfill.PendingSQL), Load, Request and Save (or Deliver)
// are required.
type Backfill[T any] struct {
	run.Backfill
	// Pending lists the keys of the items that still need the backfill,
	// those after the key after, in increasing order, at most limit: the
	// app's own view of what is left (WHERE title_en IS NULL).
	Pending func(ctx context.Context, after string, limit int) ([]string, error)
	// Load returns the items keys names, by key. A key it leaves out is an
	// item no longer there: it is rejected without a call as "no longer in
	// the source", tried again after RetryAfter (in case it comes back)
	// and parked after MaxRejects such rejections, so that an item deleted
	// from the app's table does not count as work left for ever.
	Load func(ctx context.Context, keys []string) (map[string]T, error)
	// Request builds the one call that asks about a batch of items.
	Request func(items []Item[T]) (*llm.ChatRequest, error)
	// Parse splits a response into one output per item, in the items'
	// order. The default, for batches of one item, is the reply's content.
	Parse func(resp *llm.ChatResponse, items []Item[T]) ([]string, error)
	// Save saves one item's output in tx, the transaction that records the
	// item as done: the save and the record commit together, once. Return
	// Reject(reason) to refuse the output; any other error fails the save
	// of the whole batch, which is retried.
	Save func(ctx context.Context, tx Tx, item Item[T], output string) error
	// Deliver, instead of Save, hands a batch's outputs to a place outside
	// the app's database — another database, an HTTP endpoint — in a step
	// of its own, before the items are recorded. It returns, per item in
	// order, "" for an output delivered, or the reason it refused it (a
	// rejection, as Save's Reject). A crash before the step is recorded
	// runs it again with the same batch: Deliver must be idempotent by item
	// key (an idempotency key, a row of delivered keys written in the same
	// transaction as the outputs).
	Deliver func(ctx context.Context, items []Item[T], outputs []string) ([]string, error)
}

// Item is one item of a backfill.
type Item[T any] struct {
	Key  string
	Data T
}

// Reject is what a backfill's Save returns to refuse an item's output for
// reason ("not English", "too long", "empty"): the item is counted under
// the reason, tried again after RetryAfter, and parked with the reason
// after MaxRejects refusals — never dropped silently, never retried
// forever.
func Reject(reason string) error { return backfill.Reject(reason) }

// RegisterBackfill adds a backfill to app. Register before Start.
func RegisterBackfill[T any](app *App, b Backfill[T]) error {
	if b.Load == nil || b.Request == nil || (b.Save == nil) == (b.Deliver == nil) {
		return fmt.Errorf("backfill %s: Load, Request and one of Save and Deliver are required", b.ID)
	}
	p := app.caller(b.Provider)
	if p == nil {
		return fmt.Errorf("backfill %s: unknown provider or route %q", b.ID, cmp.Or(b.Provider, app.first))
	}
	typed := func(items []backfill.Item) ([]Item[T], error) {
		out := make([]Item[T], len(items))
		for i, it := range items {
			out[i].Key = it.Key
			if err := json.Unmarshal(it.Data, &out[i].Data); err != nil {
				return nil, fmt.Errorf("item %s: decode its data: %w", it.Key, err)
			}
		}
		return out, nil
	}
	c := backfill.Config{
		Backfill: b.Backfill,
		Pending:  b.Pending,
		Load: func(ctx context.Context, keys []string) (map[string]json.RawMessage, error) {
			items, err := b.Load(ctx, keys)
			if err != nil {
				return nil, err
			}
			out := make(map[string]json.RawMessage, len(items))
			for k, v := range items {
				raw, err := json.Marshal(v)
				if err != nil {
					return nil, fmt.Errorf("item %s: encode its data: %w", k, err)
				}
				out[k] = raw
			}
			return out, nil
		},
		Request: func(items []backfill.Item) (*llm.ChatRequest, error) {
			t, err := typed(items)
			if err != nil {
				return nil, err
			}
			return b.Request(t)
		},
	}
	if b.Save != nil {
		c.Save = func(ctx context.Context, tx dbos.Tx, item backfill.Item, output string) error {
			t, err := typed([]backfill.Item{item})
			if err != nil {
				return err
			}
			return b.Save(ctx, tx, t[0], output)
		}
	} else {
		c.Deliver = func(ctx context.Context, items []backfill.Item, outputs []string) ([]string, error) {
			t, err := typed(items)
			if err != nil {
				return nil, err
			}
			return b.Deliver(ctx, t, outputs)
		}
	}
	if b.Parse != nil {
		c.Parse = func(resp *llm.ChatResponse, items []backfill.Item) ([]string, error) {
			t, err := typed(items)
			if err != nil {
				return nil, err
			}
			return b.Parse(resp, t)
		}
	}
	if w := b.AlertWebhook; w != "" && !strings.HasPrefix(w, "http://") && !strings.HasPrefix(w, "https://") {
		return fmt.Errorf("backfill %s: alert webhook %q: want an http:// or https:// URL", b.ID, w)
	}
	if err := app.backfills.Add(c, p); err != nil {
		return err
	}
	if b.AlertWebhook != "" {
		app.webhooks[b.ID] = b.AlertWebhook
	}
	app.thresholds[b.ID] = cmp.Or(b.StallAfter, backfill.DefaultStallAfter)
	flow := cmp.Or(b.Flow, b.ID)
	gov := p.Primary().Governor // a route's health reads its first target's
	app.quotas[b.ID] = func(now time.Time) health.Quota { return health.QuotaOf(gov, flow, now) }
	app.counters[b.ID] = func(now time.Time) health.Counters { return health.CountersOf(gov, flow, now) }
	app.inFlight[b.ID] = func() health.InFlight {
		st, _ := app.backfills.InFlight(b.ID)
		return health.InFlight{Calls: st.InFlight, Target: st.Target, LimitedBy: st.LimitedBy}
	}
	return nil
}
