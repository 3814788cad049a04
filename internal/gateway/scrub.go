package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"

	"github.com/sluice-dev/sluice/internal/redact"
)

// scrubber removes the provider key, in each form it can take in a JSON
// body, a header or a URL, from what the gateway writes. It is the one
// place this happens: every byte and header a client receives passes
// through it (Gateway.ServeHTTP), whatever part of the upstream's answer —
// a completion, an error's message, type or code, a request id, a stream
// event, a model list — the provider echoed the key in.
type scrubber struct {
	forms [][]byte // the key as sent, JSON-escaped, URL-escaped; longest first
}

func newScrubber(key string) *scrubber {
	if len(key) < redact.MinKeyLen {
		return nil
	}
	s := &scrubber{forms: [][]byte{[]byte(key)}}
	esc, _ := json.Marshal(key)
	for _, f := range []string{string(esc[1 : len(esc)-1]), url.QueryEscape(key), url.PathEscape(key)} {
		if f != key && !s.has(f) {
			s.forms = append(s.forms, []byte(f))
		}
	}
	return s
}

func (s *scrubber) has(f string) bool {
	for _, g := range s.forms {
		if string(g) == f {
			return true
		}
	}
	return false
}

// bytes returns p without the key; p itself when it holds none.
func (s *scrubber) bytes(p []byte) []byte {
	if s == nil {
		return p
	}
	for _, f := range s.forms {
		if bytes.Contains(p, f) {
			p = bytes.ReplaceAll(p, f, []byte(redact.KeyMark))
		}
	}
	return p
}

func (s *scrubber) string(v string) string {
	if s == nil {
		return v
	}
	return string(s.bytes([]byte(v)))
}

// header scrubs every value of h in place.
func (s *scrubber) header(h http.Header) {
	if s == nil {
		return
	}
	for k, vs := range h {
		for i, v := range vs {
			vs[i] = s.string(v)
		}
		h[k] = vs
	}
}

// scrubWriter passes a response through a scrubber. Each Write is scrubbed
// whole: the gateway writes a body, an error or a stream event in one Write,
// so a key is never split across two.
type scrubWriter struct {
	http.ResponseWriter
	s           *scrubber
	wroteHeader bool
}

func (w *scrubWriter) WriteHeader(code int) {
	if !w.wroteHeader {
		w.wroteHeader = true
		w.s.header(w.ResponseWriter.Header())
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *scrubWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if _, err := w.ResponseWriter.Write(w.s.bytes(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (w *scrubWriter) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

// Unwrap lets http.ResponseController reach the connection.
func (w *scrubWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
