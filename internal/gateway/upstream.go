package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-dev/sluice/llm"
)

// maxResponse bounds a non-streamed upstream answer.
const maxResponse = 64 << 20

func defaultHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = 10 * time.Second
	t.ResponseHeaderTimeout = 10 * time.Minute // a long completion answers only when done
	t.MaxIdleConnsPerHost = 64                 // every waiting caller may be sent at once
	return &http.Client{Transport: t}
}

// plain is a finished non-streamed completion, as the provider sent it.
type plain struct {
	header http.Header
	body   []byte
	usage  *llm.Usage
}

// complete sends a non-streamed request and returns the provider's answer
// as received, so it is passed on byte for byte; only its usage is read.
// The streamed path goes through llm.Client, which must rewrite the request
// anyway (to ask for usage). Failures are classified like llm.Client's.
func (g *Gateway) complete(ctx context.Context, body []byte) (*plain, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.chatURL, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("chat request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "sluice-gateway")
	if g.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+g.cfg.APIKey)
	}
	resp, err := g.http.Do(req)
	if err != nil {
		return nil, transportError(ctx, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse+1))
	if err != nil {
		return nil, transportError(ctx, err)
	}
	if len(data) > maxResponse {
		return nil, &llm.TransportError{Kind: llm.Malformed, Err: fmt.Errorf("answer larger than %d bytes", maxResponse)}
	}
	if err := g.cfg.Profile.Classify(resp.StatusCode, resp.Header, data); err != nil {
		return nil, err
	}
	var c struct {
		Choices json.RawMessage `json:"choices"`
		Usage   *llm.Usage      `json:"usage"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, &llm.TransportError{Kind: llm.Malformed, Err: fmt.Errorf("chat completion body: %w", err)}
	}
	if len(c.Choices) == 0 {
		// A 2xx carrying an error object (some proxies do this) is that error.
		if err := g.cfg.Profile.Classify(http.StatusBadGateway, resp.Header, data); err != nil {
			var se *llm.StatusError
			if !errors.As(err, &se) || se.Message != "" {
				return nil, err
			}
		}
		return nil, &llm.TransportError{Kind: llm.Malformed, Err: errors.New("chat completion body has no choices")}
	}
	return &plain{header: resp.Header, body: data, usage: c.Usage}, nil
}

// transportError classifies a failure below HTTP; a caller that left is
// reported as such, there is nothing to retry.
func transportError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	kind := llm.Other
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		kind = llm.Timeout
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
		kind = llm.Reset
	}
	return &llm.TransportError{Kind: kind, Err: err}
}

// scrub removes the provider key from text that came from the provider,
// should it ever echo the key back.
func (g *Gateway) scrub(s string) string {
	if len(g.cfg.APIKey) < 6 {
		return s
	}
	return strings.ReplaceAll(s, g.cfg.APIKey, "[redacted]")
}
