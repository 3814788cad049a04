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
	s           *llm.Scrubber
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
