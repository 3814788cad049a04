package gateway

import (
	"net/http"

	"github.com/sluice-dev/sluice/llm"
)

// scrubWriter passes a response through the provider key's llm.Scrubber,
// which removes the key in each form it can take in a JSON body, a header
// or a URL. It is the one place the gateway does this: every byte and
// header a client receives passes through it (Gateway.ServeHTTP), whatever
// part of the upstream's answer — a completion, an error's message, type
// or code, a request id, a stream event, a model list — the provider
// echoed the key in. (The llm client has already removed it from what it
// returned; this covers what the gateway writes of its own too.) Each
// Write is scrubbed whole: the gateway writes a body, an error or a stream
// event in one Write, so a key is never split across two.
type scrubWriter struct {
	http.ResponseWriter
	s           scrubber
	wroteHeader bool
}

func (w *scrubWriter) WriteHeader(code int) {
	if !w.wroteHeader {
		w.wroteHeader = true
		w.s.Header(w.ResponseWriter.Header())
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *scrubWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if _, err := w.ResponseWriter.Write(w.s.Bytes(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (w *scrubWriter) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

// Unwrap lets http.ResponseController reach the connection.
func (w *scrubWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// scrubber removes every provider key the gateway holds — the single
// upstream's and each routed target's — as each key's llm.Scrubber does.
type scrubber []*llm.Scrubber

func newScrubber(keys ...string) scrubber {
	var s scrubber
	for _, k := range keys {
		if sc := llm.NewScrubber(k); sc != nil {
			s = append(s, sc)
		}
	}
	return s
}

// Bytes returns p with every key removed; p itself when it holds none.
func (s scrubber) Bytes(p []byte) []byte {
	for _, sc := range s {
		p = sc.Bytes(p)
	}
	return p
}

// String returns v with every key removed.
func (s scrubber) String(v string) string {
	for _, sc := range s {
		v = sc.String(v)
	}
	return v
}

// Header removes every key from every value of h, in place.
func (s scrubber) Header(h http.Header) {
	for _, sc := range s {
		sc.Header(h)
	}
}
