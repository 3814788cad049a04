// Package httpjson writes JSON answers to HTTP requests, in one form for
// every server sluice runs: the gateway, the event and run API, the guard
// in front of both, and the provider simulator.
package httpjson

import (
	"encoding/json"
	"net/http"
)

// Write answers with status and v as JSON: Content-Type application/json,
// compact, with <, > and & escaped (a body echoed into a page opens no tag)
// and a trailing newline. The values sluice answers with always encode; a
// failure to write is the client's going away, and the status line has
// been sent by then, so neither is returned.
func Write(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Error answers with status and message in sluice's JSON error shape,
// {"error": message}: the one every sluice server but the gateway (which
// speaks its provider's shape) and the simulator (which speaks the
// simulated provider's) uses.
func Error(w http.ResponseWriter, status int, message string) {
	Write(w, status, map[string]string{"error": message})
}
