package ui

import (
	"maps"
	"slices"

	"github.com/sluice-dev/sluice/internal/metrics"
)

// clientRetryRow is a row of the flows page's table of the gateway's 429s:
// what one client key's requests in one flow did after them.
type clientRetryRow struct {
	Key string
	metrics.ClientRetries
}

// clientRetryRows are the rows of retries, by key, then flow and client.
func clientRetryRows(retries map[string][]metrics.ClientRetries) []clientRetryRow {
	var out []clientRetryRow
	for _, key := range slices.Sorted(maps.Keys(retries)) {
		for _, r := range retries[key] {
			out = append(out, clientRetryRow{Key: key, ClientRetries: r})
		}
	}
	return out
}
