package cli

import (
	"errors"
	"fmt"
	"net/url"
	"syscall"
)

// Unreachable explains an error from a request to a sluice server at base
// (a --url such as http://127.0.0.1:8288) when nothing listens there: the
// connection was refused, so no server runs at that address, and the
// error says which address that is and how to start one or point the
// command at another. Any other error is returned as it is.
func Unreachable(err error, base string) error {
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return err
	}
	addr := base
	if u, perr := url.Parse(base); perr == nil && u.Host != "" {
		addr = u.Host
	}
	return fmt.Errorf("no sluice server answers at %s (connection refused): start one with \"sluice serve --addr %s\" "+
		"(serve's address; \"sluice demo\" serves on 127.0.0.1:8288 too), or point --url at the server that runs: %w", base, addr, err)
}
