package main

import (
	"flag"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/internal/guard"
)

// serverFlags are the bounds every sluice server takes: its deadlines and
// the host names it answers besides loopback ones.
type serverFlags struct {
	header, body, write, idle time.Duration
	hosts                     string
}

func addServerFlags(fs *flag.FlagSet) *serverFlags {
	s := &serverFlags{}
	fs.DurationVar(&s.header, "header-timeout", guard.DefaultHeaderTimeout, "longest a client may take to send a request's headers")
	fs.DurationVar(&s.body, "body-timeout", guard.DefaultBodyTimeout, "longest a client may take to send a request's body")
	fs.DurationVar(&s.write, "write-timeout", guard.DefaultWriteTimeout, "longest one write to a client may block (a client that stops reading a stream is cut off)")
	fs.DurationVar(&s.idle, "idle-timeout", guard.DefaultIdleTimeout, "longest a kept-alive connection waits for its next request")
	fs.StringVar(&s.hosts, "allowed-hosts", "", "comma-separated host names accepted in Host and Origin besides loopback ones (e.g. the name a reverse proxy uses)")
	return s
}

// config returns the guard configuration for a server on addr; errorf
// writes refusals in the server's own format (nil: {"error": …}).
func (s *serverFlags) config(addr string, errorf func(http.ResponseWriter, int, string)) (guard.Config, error) {
	c := guard.Config{Addr: addr, HeaderTimeout: s.header, BodyTimeout: s.body, WriteTimeout: s.write, IdleTimeout: s.idle, Error: errorf}
	for _, h := range strings.Split(s.hosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			c.Hosts = append(c.Hosts, h)
		}
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"header-timeout", s.header}, {"body-timeout", s.body}, {"write-timeout", s.write}, {"idle-timeout", s.idle}} {
		if d.v <= 0 {
			return c, fmt.Errorf("--%s %s: want a positive duration", d.flag, d.v)
		}
	}
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("--allowed-hosts: %w", err)
	}
	return c, nil
}
