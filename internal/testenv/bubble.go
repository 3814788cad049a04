package testenv

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// InBubble runs f as synctest.Test does: in a bubble whose clock moves only
// when every goroutine in it waits for a timer or for another one, so a
// request in transit, a slow transaction or a loaded machine takes none of
// the clock's time. A goroutine reading a socket is never idle to the
// bubble: parties in it talk over a PipeNet made inside it.
//
// A goroutine that never waits — a loop that wakes itself — stops the
// bubble's clock for good, and the test would hang until go test's timeout;
// a watchdog outside the bubble ends it sooner, with every goroutine's
// stack, once the clock has stood still for two minutes of the wall clock.
func InBubble(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	var at atomic.Int64 // the bubble's clock, as its ticker last read it
	done := make(chan struct{})
	defer close(done)
	go watchBubble(t.Name(), &at, done)
	synctest.Test(t, func(t *testing.T) {
		tick := time.NewTicker(time.Second)
		stop, stopped := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(stopped)
			for {
				at.Store(time.Now().UnixNano())
				select {
				case <-stop:
					return
				case <-tick.C:
				}
			}
		}()
		t.Cleanup(func() { // the last: after f's own
			tick.Stop()
			close(stop)
			<-stopped
		})
		f(t)
	})
}

// watchBubble panics, with every goroutine's stack, once at has not moved
// for two minutes of the wall clock, until done.
func watchBubble(name string, at *atomic.Int64, done <-chan struct{}) {
	const still = 2 * time.Minute
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	last, since := at.Load(), time.Now()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		if v := at.Load(); v != last {
			last, since = v, time.Now()
			continue
		}
		if time.Since(since) > still {
			buf := make([]byte, 4<<20)
			_, _ = os.Stderr.Write(buf[:runtime.Stack(buf, true)])
			panic(fmt.Sprintf("%s: the bubble's clock stood still for %v of the wall clock: a goroutine in it never waits", name, still))
		}
	}
}

// PipeNet is an in-memory network for a bubble (see InBubble): each Dial
// is a net.Pipe whose other end the listener Listen returned last accepts.
// Make it inside the bubble; a server listens on it once at a time.
type PipeNet struct {
	conns chan net.Conn

	mu sync.Mutex
	ln *pipeListener // the open listener, if any
	tr *http.Transport
}

// NewPipeNet returns a PipeNet with no listener yet.
func NewPipeNet() *PipeNet { return &PipeNet{conns: make(chan net.Conn)} }

// Listen returns a new listener, the one later dials reach; the address is
// ignored.
func (n *PipeNet) Listen(string) (net.Listener, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.ln = &pipeListener{conns: n.conns, done: make(chan struct{})}
	return n.ln, nil
}

// Dial connects to the open listener: a net.DialContext for an
// http.Transport.
func (n *PipeNet) Dial(ctx context.Context, _, _ string) (net.Conn, error) {
	n.mu.Lock()
	ln := n.ln
	n.mu.Unlock()
	if ln == nil {
		return nil, net.ErrClosed
	}
	client, server := net.Pipe()
	select {
	case n.conns <- server:
		return client, nil
	case <-ln.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Transport is the PipeNet's one http.Transport, which dials it. Every
// goroutine of a bubble must have ended when its test does: close its idle
// connections in a cleanup.
func (n *PipeNet) Transport() *http.Transport {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.tr == nil {
		n.tr = &http.Transport{DialContext: n.Dial}
	}
	return n.tr
}

// ServePipe serves h over a new PipeNet until t ends, and returns the
// client that reaches it (any host name dials it). Call it inside a
// bubble: at t's end the server, and the client's idle connections, are
// closed, so no goroutine of theirs outlives the bubble.
func ServePipe(t testing.TB, h http.Handler) *http.Client {
	t.Helper()
	pn := NewPipeNet()
	ln, err := pn.Listen("")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln)
	}()
	tr := pn.Transport()
	t.Cleanup(func() {
		_ = srv.Close()
		tr.CloseIdleConnections()
		<-served
	})
	return &http.Client{Transport: tr}
}

type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr is a loopback address: a server that answers only requests naming a
// loopback host (sluice's own) answers those that come over the pipe.
func (l *pipeListener) Addr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8288}
}
