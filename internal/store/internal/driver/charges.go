package driver

import (
	"context"
	"fmt"
	"io/fs"
	"sort"
	"time"

	"github.com/sluice-dev/sluice/internal/store"
)

// QuotaCharges is the part of store.Store on the governor's charges, the
// same for both drivers but for their statements, how they run them, how a
// time goes to them and how a batch of charges does. A driver's Store
// embeds it, made by NewCharges.
type QuotaCharges struct {
	conn  Conn
	sql   map[string]string // by file name without .sql
	stamp func(time.Time) any
	batch func(charges []store.Charge) ([]any, error)
}

// chargeStatements are the files of a driver's sql folder that NewCharges
// reads, each in the driver's dialect, with the parameters listed.
var chargeStatements = []string{
	"upsert_charges", // key, then what batch gives
	"charges",        // key, since; returns id, flow, at, requests, input, output
	"prune_charges",  // key, before
}

// NewCharges returns the charges' table on a driver's database: conn runs
// the statements in the sql folder of fsys (see chargeStatements), stamp
// turns a time into a parameter for the table's column of times (which
// the driver truncates to the millisecond in UTC), and batch turns
// charges, each ID once and sorted by ID, into the parameters of
// upsert_charges.sql after the key.
func NewCharges(conn Conn, fsys fs.FS, stamp func(time.Time) any, batch func(charges []store.Charge) ([]any, error)) (QuotaCharges, error) {
	q, err := readStatements(fsys, chargeStatements)
	if err != nil {
		return QuotaCharges{}, fmt.Errorf("read the charges' statements: %w", err)
	}
	return QuotaCharges{conn: conn, sql: q, stamp: stamp, batch: batch}, nil
}

// UpsertCharges implements store.Store. The batch goes to the database as
// one statement, whatever its size.
func (c QuotaCharges) UpsertCharges(ctx context.Context, key string, charges []store.Charge) error {
	if err := checkCharges(key, charges); err != nil {
		return fmt.Errorf("upsert charges: %w", err)
	}
	if len(charges) == 0 {
		return nil
	}
	batch, err := c.batch(lastByID(charges))
	if err == nil {
		_, err = c.conn.Exec(ctx, c.sql["upsert_charges"], append([]any{key}, batch...)...)
	}
	if err != nil {
		return fmt.Errorf("upsert charges: %w", err)
	}
	return nil
}

// Charges implements store.Store.
func (c QuotaCharges) Charges(ctx context.Context, key string, since time.Time) ([]store.Charge, error) {
	var out []store.Charge
	err := c.conn.Query(ctx, c.sql["charges"], []any{key, c.stamp(since)}, func(r Row) error {
		var ch store.Charge
		if err := r.Scan(&ch.ID, &ch.Flow, timestamp{&ch.At}, &ch.Cost.Requests, &ch.Cost.Input, &ch.Cost.Output, &ch.Cost.Money); err != nil {
			return err
		}
		out = append(out, ch)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read charges: %w", err)
	}
	return out, nil
}

// PruneCharges implements store.Store.
func (c QuotaCharges) PruneCharges(ctx context.Context, key string, before time.Time) (int64, error) {
	n, err := c.conn.Exec(ctx, c.sql["prune_charges"], key, c.stamp(before))
	if err != nil {
		return 0, fmt.Errorf("prune charges: %w", err)
	}
	return n, nil
}

// checkCharges returns an error naming the first charge a driver must not
// store: an empty key or ID would make a charge impossible to settle later.
func checkCharges(key string, charges []store.Charge) error {
	if key == "" {
		return fmt.Errorf("empty key")
	}
	for i, c := range charges {
		if c.ID == "" {
			return fmt.Errorf("charge %d (flow %q) has an empty ID", i, c.Flow)
		}
	}
	return nil
}

// lastByID returns charges with only the last one given for each ID, sorted
// by ID. A single multi-row upsert cannot touch a row twice, and writers that
// lock rows in the same order cannot deadlock each other.
func lastByID(charges []store.Charge) []store.Charge {
	last := make(map[string]int, len(charges))
	for i, c := range charges {
		last[c.ID] = i
	}
	out := make([]store.Charge, 0, len(last))
	for i, c := range charges {
		if last[c.ID] == i {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
