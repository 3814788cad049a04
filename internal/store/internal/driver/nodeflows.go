package driver

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/store"
)

// RecordNodeFlows implements store.Store.
func (l Leases) RecordNodeFlows(ctx context.Context, key, node string, at time.Time, flows []store.NodeFlow) error {
	op, err := named("record the flows", " of ", "key", key, store.MaxKeyBytes)
	if err != nil {
		return err
	}
	if err := checkNodeFlows(node, at, flows); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	err = l.conn.InTx(ctx, func(tx store.Tx) error {
		for _, f := range flows {
			if _, err := tx.Exec(ctx, l.sql["record_node_flow"], key, node, f.Flow, f.Waiting, f.Admitted, f.Input, f.Output, at.UnixMilli()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// checkNodeFlows returns an error naming what of a node's flows must not
// be written down.
func checkNodeFlows(node string, at time.Time, flows []store.NodeFlow) error {
	if err := checkName("node", node, store.MaxKeyBytes); err != nil {
		return err
	}
	if err := checkTime("time", at); err != nil {
		return err
	}
	if len(flows) > store.MaxLeaseFlows {
		return fmt.Errorf("%d flows: at most %d", len(flows), store.MaxLeaseFlows)
	}
	seen := make(map[string]bool, len(flows))
	for _, f := range flows {
		if err := checkName("flow", f.Flow, store.MaxKeyBytes); err != nil {
			return err
		}
		if seen[f.Flow] {
			return fmt.Errorf("flow %q is given twice", f.Flow)
		}
		seen[f.Flow] = true
		for _, p := range []part{{"waiting", f.Waiting}, {"admitted", f.Admitted}, {"input", f.Input}, {"output", f.Output}} {
			if p.n < 0 || p.n > governor.MaxCost {
				return fmt.Errorf("flow %q: %s %d is out of range: want 0 to %d", f.Flow, p.name, p.n, int64(governor.MaxCost))
			}
		}
	}
	return nil
}

// NodeFlows implements store.Store.
func (l Leases) NodeFlows(ctx context.Context, key string, since time.Time) ([]store.NodeFlow, error) {
	op, err := named("read the flows", " of ", "key", key, store.MaxKeyBytes)
	if err != nil {
		return nil, err
	}
	if err := checkTime("time", since); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	var out []store.NodeFlow
	err = l.conn.Query(ctx, l.sql["node_flows"], []any{key, since.UnixMilli()}, func(r Row) error {
		var f store.NodeFlow
		var at int64
		if err := r.Scan(&f.Node, &f.Flow, &f.Waiting, &f.Admitted, &f.Input, &f.Output, &at); err != nil {
			return err
		}
		f.At = time.UnixMilli(at).UTC()
		out = append(out, f)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return out, nil
}
