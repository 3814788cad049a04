package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/cli"
)

// TestServePublicURL: --public-url (public_url: in the file) is refused
// unless it is an absolute http or https URL, and an https one marks the
// dashboard's session cookie Secure over the plain HTTP a TLS proxy
// speaks to serve.
func TestServePublicURL(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "serve.yaml")
	if err := os.WriteFile(file, []byte("addr: 127.0.0.1:0\npublic_url: sluice.example.com\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--public-url", "ftp://sluice.example.com"}, `--public-url: "ftp://sluice.example.com": want an absolute http:// or https:// URL`},
		{[]string{"--public-url", "https://me:pw@sluice.example.com"}, "--public-url: " + `"https://me:pw@sluice.example.com": want no user or password in the URL`},
		{[]string{"--config", file}, `public_url: "sluice.example.com": want an absolute http:// or https:// URL (line 2)`},
	} {
		var stderr bytes.Buffer
		env := &cli.Env{Stdout: io.Discard, Stderr: &stderr, Getenv: func(string) string { return "" }}
		args := append([]string{"serve", "--addr", "127.0.0.1:0", "--db", filepath.Join(dir, "s.db")}, tc.args...)
		if code := runMain(context.Background(), env, args); code != 1 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 1 and %q", tc.args, code, stderr.String(), tc.want)
		}
	}

	const tok = "public-url-test-token-0123456789"
	getenv := func(k string) string {
		if k == "SLUICE_API_TOKEN" {
			return tok
		}
		return ""
	}
	base := startServe(t, getenv, "--db", filepath.Join(dir, "p.db"), "--provider-url", "http://127.0.0.1:1/v1",
		"--public-url", "https://sluice.example.com")
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.PostForm(base+"/login", url.Values{"token": {tok}, "next": {"/"}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	var secure bool
	for _, c := range res.Cookies() {
		secure = secure || c.Name == "sluice_session" && c.Secure
	}
	if res.StatusCode != http.StatusSeeOther || !secure {
		t.Errorf("sign-in over plain HTTP with an https public URL: %d, cookies %v; want 303 and a Secure session cookie", res.StatusCode, res.Cookies())
	}
}
