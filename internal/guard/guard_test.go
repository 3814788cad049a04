package guard

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// serve runs h behind NewServer on a loopback port and returns its address.
func serve(t *testing.T, h http.Handler, c Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if c.Addr == "" {
		c.Addr = ln.Addr().String()
	}
	srv := NewServer(h, c)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

func ok(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	_, _ = io.WriteString(w, "ok")
}

func TestRequestChecks(t *testing.T) {
	t.Parallel()
	addr := serve(t, http.HandlerFunc(ok), Config{Hosts: []string{"sluice.internal"}})
	_, port, _ := net.SplitHostPort(addr)
	for _, tc := range []struct {
		name, method, host, origin, ctype string
		want                              int
	}{
		{"loopback GET", "GET", "127.0.0.1:" + port, "", "", 200},
		{"localhost GET", "GET", "localhost:" + port, "", "", 200},
		{"ipv6 loopback", "GET", "[::1]:" + port, "", "", 200},
		{"configured host", "GET", "sluice.internal", "", "", 200},
		{"rebound name", "GET", "attacker.example:" + port, "", "", http.StatusMisdirectedRequest},
		{"rebound name on POST", "POST", "attacker.example", "", "application/json", http.StatusMisdirectedRequest},
		{"json POST", "POST", "127.0.0.1", "", "application/json", 200},
		{"json with charset", "POST", "127.0.0.1", "", "application/json; charset=utf-8", 200},
		{"text/plain POST (a form a page can send)", "POST", "127.0.0.1", "", "text/plain", http.StatusUnsupportedMediaType},
		{"form POST", "POST", "127.0.0.1", "", "application/x-www-form-urlencoded", http.StatusUnsupportedMediaType},
		{"POST without a type", "POST", "127.0.0.1", "", "", http.StatusUnsupportedMediaType},
		{"cross-site origin", "POST", "127.0.0.1", "https://attacker.example", "application/json", http.StatusForbidden},
		{"null origin", "GET", "127.0.0.1", "null", "", http.StatusForbidden},
		{"same-machine origin", "POST", "127.0.0.1", "http://localhost:3000", "application/json", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, "http://"+addr+"/x", strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			req.Host = tc.host
			if tc.origin != "" {
				req.Header.Set("Origin", tc.origin)
			}
			if tc.ctype != "" {
				req.Header.Set("Content-Type", tc.ctype)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d (%s), want %d", resp.StatusCode, b, tc.want)
			}
			if tc.want != 200 && !strings.Contains(string(b), `"error"`) {
				t.Fatalf("refusal without an error body: %s", b)
			}
		})
	}
}

func TestAnyHostOffLoopbackWithoutHosts(t *testing.T) {
	t.Parallel()
	if allowedHosts(Config{Addr: "0.0.0.0:8080"}) != nil {
		t.Fatal("off loopback with no Hosts, every Host should be accepted")
	}
	if allowedHosts(Config{Addr: "0.0.0.0:8080", Hosts: []string{"a.example"}}) == nil {
		t.Fatal("configured Hosts should be checked off loopback too")
	}
}

// A client that sends its body slower than BodyTimeout is cut off; a
// handler that waits long after reading its body keeps its context.
func TestBodyDeadline(t *testing.T) {
	t.Parallel()
	type result struct {
		readErr error
		ctxErr  error
	}
	got := make(chan result, 2)
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		if err == nil {
			// A long wait after the body, as for admission: three body timeouts.
			select {
			case <-time.After(600 * time.Millisecond):
			case <-r.Context().Done():
			}
		}
		got <- result{err, r.Context().Err()}
		_, _ = io.WriteString(w, "done")
	}), Config{BodyTimeout: 200 * time.Millisecond})

	// A slow body: headers promise 100 bytes, 10 arrive, then nothing.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n0123456789")
	select {
	case r := <-got:
		if r.readErr == nil {
			t.Fatal("a body that never finished was read without error")
		}
		var ne net.Error
		if !errors.As(r.readErr, &ne) || !ne.Timeout() {
			t.Fatalf("read error %v, want a timeout", r.readErr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the slow body was not cut off")
	}
	// And the connection is answered or closed, not held.
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("the connection of a cut-off body was held open: %v", err)
	}

	// A whole body, then a wait longer than the body timeout.
	resp, err := http.Post("http://"+addr+"/", "application/json", strings.NewReader(`{"a":1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	r := <-got
	if r.readErr != nil || r.ctxErr != nil {
		t.Fatalf("after a whole body: read %v, context %v; the wait after the body must not be cut", r.readErr, r.ctxErr)
	}
}

// A stream to a client that stops reading ends within WriteTimeout of its
// buffers filling, and the handler's writes report it.
func TestWriteDeadline(t *testing.T) {
	t.Parallel()
	done := make(chan error, 1)
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := []byte(strings.Repeat("x", 64<<10))
		for i := 0; i < 1<<14; i++ { // up to 1 GiB: far past any socket buffer
			if _, err := w.Write(chunk); err != nil {
				done <- err
				return
			}
			if err := http.NewResponseController(w).Flush(); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}), Config{WriteTimeout: 300 * time.Millisecond})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /stream HTTP/1.1\r\nHost: localhost\r\n\r\n")
	if _, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil {
		t.Fatal(err)
	}
	// Read nothing more.
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("1 GiB was written to a client that reads nothing")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the writer to a client that stopped reading was never cut off")
	}
}

func TestCheckBind(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		addr string
		auth bool
		ok   bool
	}{
		{"127.0.0.1:8080", false, true},
		{"localhost:0", false, true},
		{"[::1]:80", false, true},
		{"127.9.9.9:1", false, true},
		{"0.0.0.0:8080", false, false},
		{":8080", false, false},
		{"192.0.2.1:80", false, false},
		{"0.0.0.0:8080", true, true},
		{"no-port", true, false},
	} {
		err := CheckBind(tc.addr, tc.auth, "set SLUICE_API_TOKEN")
		if (err == nil) != tc.ok {
			t.Errorf("CheckBind(%q, %v) = %v, want ok=%v", tc.addr, tc.auth, err, tc.ok)
		}
		if err != nil && tc.addr != "no-port" && !strings.Contains(err.Error(), "SLUICE_API_TOKEN") {
			t.Errorf("error %q does not say what to do", err)
		}
	}
}

func TestCheckToken(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		token string
		ok    bool
	}{
		{"x", false},
		{"0123456789abcde", false},
		{"0123456789abcdef", true},
		{"0123456789abcdef ", false},
		{"0123456789\tabcdef", false},
		{"0123456789abcdef\x00", false},
	} {
		err := CheckToken("SLUICE_API_TOKEN", tc.token)
		if (err == nil) != tc.ok {
			t.Errorf("CheckToken(%q) = %v, want ok=%v", tc.token, err, tc.ok)
		}
		if err != nil && len(tc.token) > 8 && strings.Contains(err.Error(), strings.TrimSpace(tc.token)) {
			t.Errorf("error %q echoes the token", err)
		}
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	if err := (Config{BodyTimeout: -1}).Validate(); err == nil || !strings.Contains(err.Error(), "body timeout") {
		t.Fatalf("negative body timeout: %v", err)
	}
	if err := (Config{Hosts: []string{"a.example:80"}}).Validate(); err == nil {
		t.Fatal("a host with a port was accepted")
	}
	if err := (Config{}).Validate(); err != nil {
		t.Fatal(err)
	}
}

// Paths whose handler checks a CSRF token of its own may take forms; every
// other path, and every other content type, is refused as before, and the
// Origin check holds on both.
func TestFormsWhereTheHandlerChecksCSRF(t *testing.T) {
	t.Parallel()
	addr := serve(t, http.HandlerFunc(ok), Config{Forms: func(r *http.Request) bool { return !strings.HasPrefix(r.URL.Path, "/v1/") }})
	for _, tc := range []struct {
		name, path, origin, ctype string
		want                      int
	}{
		{"a form to the dashboard", "/runs/x/cancel", "", "application/x-www-form-urlencoded", 200},
		{"a form to the API", "/v1/events", "", "application/x-www-form-urlencoded", http.StatusUnsupportedMediaType},
		{"text/plain to the dashboard", "/send", "", "text/plain", http.StatusUnsupportedMediaType},
		{"multipart to the dashboard", "/send", "", "multipart/form-data; boundary=x", http.StatusUnsupportedMediaType},
		{"a cross-site form", "/runs/x/cancel", "https://attacker.example", "application/x-www-form-urlencoded", http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest("POST", "http://"+addr+tc.path, strings.NewReader("a=b"))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", tc.ctype)
			if tc.origin != "" {
				req.Header.Set("Origin", tc.origin)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.want)
			}
		})
	}
}
