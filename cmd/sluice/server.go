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
	// refuse words an error about flag's value; nil: "--flag: err". The
	// gateway's names the key of its config file when the value came from it.
	refuse func(flag string, err error) error
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
	refuse := s.refuse
	if refuse == nil {
		refuse = func(flag string, err error) error { return fmt.Errorf("--%s: %w", flag, err) }
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"header-timeout", s.header}, {"body-timeout", s.body}, {"write-timeout", s.write}, {"idle-timeout", s.idle}} {
		if d.v <= 0 {
			return c, refuse(d.flag, fmt.Errorf("%s is not positive", d.v))
		}
	}
	if err := c.Validate(); err != nil {
		return c, refuse("allowed-hosts", err)
	}
	return c, nil
}
