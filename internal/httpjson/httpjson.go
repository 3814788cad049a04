// Package httpjson writes JSON answers to HTTP requests, in one form for
// every server sluice runs: the gateway, the event and run API, the guard
// in front of both, and the provider simulator.
package httpjson

import (
	"encoding/json"
	"net/http"
	"time"
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

// Clock names the clock of an answer's times, in every answer that
// carries times of an app (or a gateway): its clock's time as the answer
// was made, and how many times as fast as the wall clock it runs (1: at
// its pace). A client tells a simulated clock by them (clock.Label), and
// reads the answer's times relative to Now rather than to its own clock.
// Embedded in an answer, its fields sit beside the answer's own.
type Clock struct {
	Now   time.Time `json:"now"`
	Speed float64   `json:"speed"`
}

// ClockOf is the Clock of an app whose clock reads now and runs speed
// times as fast as the wall clock (0, the default, and less are 1).
func ClockOf(now time.Time, speed float64) Clock {
	if !(speed > 1) { // NaN too: it would not encode
		speed = 1
	}
	return Clock{Now: now.UTC(), Speed: speed}
}
