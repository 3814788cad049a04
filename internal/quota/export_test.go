package quota

import "context"

// LeaseOnce runs one turn of a cluster Ledger's grant loop, as its tick or
// a waiting call does once Start has begun it: it reports the leases' use
// and takes a lease for what waits. A test that moves the clock itself
// turns the loop itself, when it chooses, instead of Start.
func (l *Ledger) LeaseOnce(ctx context.Context) { l.lease.once(ctx) }

// BudgetKey is the store's key of the leases of flow's own budget on key.
func BudgetKey(key, flow string) string { return budgetKey(key, flow) }
