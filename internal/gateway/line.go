package gateway

import (
	"fmt"
	"sync"
)

// line bounds the requests waiting for admission, so a key saturated for
// hours cannot make the gateway hold an unbounded number of connections
// and prompts: by count per flow, by count for the key, and by the bytes
// of their bodies. A request enters after its body is read and before it
// is priced, and leaves when admitted or answered.
type line struct {
	mu       sync.Mutex
	n        int
	bytes    int64
	perFlow  map[string]int
	maxN     int
	maxFlow  int
	maxBytes int64
}

func newLine(c Config) *line {
	return &line{perFlow: map[string]int{}, maxN: c.MaxWaiting, maxFlow: c.MaxFlowWaiting, maxBytes: c.MaxWaitingBytes}
}

// enter takes a place in line for a request of size bytes, or says which
// bound is full.
func (l *line) enter(flow string, size int64) (full string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var msg string
	switch {
	case l.perFlow[flow] >= l.maxFlow:
		msg = fmt.Sprintf("the wait line of flow %q is full: %d requests wait, the bound per flow is %d (max_flow_waiting)", flow, l.perFlow[flow], l.maxFlow)
	case l.n >= l.maxN:
		msg = fmt.Sprintf("the wait line of the key is full: %d requests wait, the bound is %d (max_waiting)", l.n, l.maxN)
	case l.bytes+size > l.maxBytes && l.n > 0:
		msg = fmt.Sprintf("the wait line of the key is full: its %d waiting requests hold %d bytes, and this one's %d would pass the bound of %d bytes (max_waiting_bytes)", l.n, l.bytes, size, l.maxBytes)
	}
	if msg != "" {
		return msg
	}
	l.n++
	l.bytes += size
	l.perFlow[flow]++
	return ""
}

func (l *line) leave(flow string, size int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n--
	l.bytes -= size
	if l.perFlow[flow]--; l.perFlow[flow] == 0 {
		delete(l.perFlow, flow)
	}
}
