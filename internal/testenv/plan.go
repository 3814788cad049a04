package testenv

import (
	"context"
	"database/sql"
	"strings"
	"testing"
)

// QueryPlan is SQLite's plan of q with args, its steps joined by "; ", as
// EXPLAIN QUERY PLAN gives them: for a test that a query searches an
// index instead of reading a whole table.
func QueryPlan(t testing.TB, db *sql.DB, q string, args ...any) string {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+q, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "; ")
}
