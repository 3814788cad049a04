package driver

import (
	"context"
	"io/fs"
	"time"

	"github.com/sluice-dev/sluice/internal/store"
)

// Tables is all of store.Store that is the same for both drivers, and the
// schema under it: a driver's Store embeds it, made by NewTables, and adds
// what only the driver can do (its handle, its locks, its name).
type Tables struct {
	// QuotaCharges gives UpsertCharges, Charges and PruneCharges.
	QuotaCharges
	// EngineTables gives CountStart, RecordDroppedEvent, DroppedEvents,
	// RecordCancel, RecordRunEnd and RunEnds.
	EngineTables
	// Backfills gives the methods on backfills' items, jobs and runs.
	Backfills
	// History gives the methods on config versions and flows' samples.
	History
	// Leases gives the methods on leases of a provider key's capacity.
	Leases

	schema Schema
}

// Dialect is how what a driver's statements take differs from one
// database to the other beyond their text.
type Dialect struct {
	// Time turns a time into a parameter for the charges' and the
	// migrations' columns of times (the other tables keep BIGINT Unix
	// milliseconds on both).
	Time func(time.Time) any
	// Charges turns charges, each ID once and sorted by ID, into the
	// parameters of upsert_charges.sql after the key.
	Charges func(charges []store.Charge) ([]any, error)
	// RunIDs turns a list of run IDs into the one parameter of
	// run_ends.sql.
	RunIDs func(ids []string) (any, error)
}

// NewTables returns the tables on a driver's database: conn runs the
// statements of the sql folder of fsys and the migrations of its
// migrations folder, which d says how to pass what they take.
func NewTables(conn Conn, fsys fs.FS, d Dialect) (t Tables, err error) {
	t.schema, err = NewSchema(conn, fsys, d.Time)
	if err == nil {
		t.QuotaCharges, err = NewCharges(conn, fsys, d.Time, d.Charges)
	}
	if err == nil {
		t.EngineTables, err = NewEngineTables(conn, fsys, d.RunIDs)
	}
	if err == nil {
		t.Backfills, err = NewBackfills(conn, fsys)
	}
	if err == nil {
		t.History, err = NewHistory(conn, fsys)
	}
	if err == nil {
		t.Leases, err = NewLeases(conn, fsys)
	}
	return t, err
}

// Migrate applies the migrations the database lacks (see Schema.Migrate).
func (t Tables) Migrate(ctx context.Context) error { return t.schema.Migrate(ctx) }

// Migrations returns the schema migrations applied to the database, in
// order.
func (t Tables) Migrations(ctx context.Context) ([]store.Migration, error) {
	return t.schema.Migrations(ctx)
}
