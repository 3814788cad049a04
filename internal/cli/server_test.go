package cli

import (
	"errors"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
)

// TestUnreachableNamesTheAddressAndTheFix: a request to a closed port is
// explained with the address and the command that starts a server there;
// other errors pass unchanged.
func TestUnreachableNamesTheAddressAndTheFix(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	base := "http://" + addr
	_, err = http.Get(base + "/v1/flows")
	if err == nil {
		t.Fatal("a request to a closed port succeeded")
	}
	got := Unreachable(err, base)
	for _, want := range []string{"no sluice server answers at " + base, "connection refused", "sluice serve --addr " + addr, "--url"} {
		if !strings.Contains(got.Error(), want) {
			t.Errorf("%q: want %q in it", got, want)
		}
	}
	if !errors.Is(got, syscall.ECONNREFUSED) {
		t.Errorf("%v: the refusal is no longer in the chain", got)
	}
	other := errors.New("HTTP 500")
	if got := Unreachable(other, base); got != other {
		t.Errorf("another error became %v", got)
	}
}
