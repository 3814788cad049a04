package gateway

import (
	"net"
	"net/http"
	"time"
)

// defaultHTTPClient is the upstream client: like llm's, but with room for
// every waiting caller's connection at once.
func defaultHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = 10 * time.Second
	t.ResponseHeaderTimeout = 10 * time.Minute // a long completion answers only when done
	t.MaxIdleConnsPerHost = 64                 // every waiting caller may be sent at once
	return &http.Client{Transport: t}
}
