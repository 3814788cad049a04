package store

import (
	"net/url"
	"regexp"
	"strings"
)

// Mark replaces every secret in a URL, and in an error that might quote
// one: "xxxxx", as url.URL.Redacted writes it.
const Mark = "xxxxx"

// queryPassword matches password=… and sslpassword=… in a query string or a
// key/value connection string.
var queryPassword = regexp.MustCompile(`(?i)(password=)[^&#\s]*`)

// Redact returns dbURL with any password replaced by "xxxxx":
// "postgres://user:secret@host/db?sslpassword=k" becomes
// "postgres://user:xxxxx@host/db?sslpassword=xxxxx". It errs on the side of
// hiding: in a URL too malformed to parse, everything between the first ":"
// after the user name and the last "@" is hidden.
func Redact(dbURL string) string {
	if u, err := url.Parse(dbURL); err == nil && u.Scheme != "" && !strings.Contains(u.Opaque+u.Host+u.Path+u.RawQuery+u.Fragment, "@") {
		return queryPassword.ReplaceAllString(u.Redacted(), "${1}"+Mark)
	}
	// url.Parse failed, or read part of the user info as host, port or path
	// (as it does for an unescaped "/" in a password): hide by position.
	s := dbURL
	if i, j, ok := userPassword(s); ok {
		s = s[:i] + Mark + s[j:]
	}
	return queryPassword.ReplaceAllString(s, "${1}"+Mark)
}

// Secrets returns the passwords written in dbURL, as written and unescaped,
// so a driver can scrub them from the errors of a library that might quote
// the URL.
func Secrets(dbURL string) []string {
	var out []string
	add := func(s string) {
		if s == "" || s == Mark {
			return
		}
		out = append(out, s)
		if d, err := url.PathUnescape(s); err == nil && d != s {
			out = append(out, d)
		}
	}
	if i, j, ok := userPassword(dbURL); ok {
		add(dbURL[i:j])
	}
	for _, m := range queryPassword.FindAllString(dbURL, -1) {
		_, pw, _ := strings.Cut(m, "=")
		add(pw)
	}
	return out
}

// userPassword finds the password of "scheme://user:password@…" (or of
// "scheme:user:password@…") by position alone: s[i:j], from after the first
// ":" following the user name to the last "@".
func userPassword(s string) (i, j int, ok bool) {
	start := -1
	if k := strings.Index(s, "://"); k >= 0 {
		start = k + 3
	} else if scheme, _, found := strings.Cut(s, ":"); found && isScheme(scheme) {
		start = len(scheme) + 1
	}
	if start < 0 {
		return 0, 0, false
	}
	rest := s[start:]
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return 0, 0, false
	}
	c := strings.Index(rest[:at], ":")
	if c < 0 {
		return 0, 0, false
	}
	return start + c + 1, start + at, true
}

func isScheme(s string) bool {
	for i, r := range s {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z':
		case i > 0 && ('0' <= r && r <= '9' || r == '+' || r == '-' || r == '.'):
		default:
			return false
		}
	}
	return s != ""
}
