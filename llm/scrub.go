package llm

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/sluice-dev/sluice/internal/redact"
)

// Bounds of the provider text a Client keeps (see Scrubber.Error): enough
// to diagnose, not enough to flood a log, a page or a database row. A
// longer text is cut at a character boundary and ends with TruncatedMark,
// the mark included in the bound.
const (
	// MaxMessageBytes bounds an error's Message.
	MaxMessageBytes = 1024
	// MaxFieldBytes bounds an error's Type and Code, and a completion's
	// (or a stream chunk's) ID and Model.
	MaxFieldBytes = 128
)

// TruncatedMark ends a field the Scrubber cut to its bound.
const TruncatedMark = "…[truncated]"

// Scrubber cleans what a provider sent before sluice keeps or shows it: a
// provider, or a proxy before it, may echo the key it received, and its
// text reaches logs, terminals, pages, API answers and the database.
//
// It removes the key in each form it can take: as sent, JSON-escaped (with
// and without "/" escaped) and URL-escaped (query and path), longest
// first, each replaced by "[redacted]"; a key shorter than 6 bytes, too
// short to replace everywhere without corrupting ordinary text, is removed
// only where it follows "Bearer ". Bytes, String and Header remove the key
// and change nothing else, for what is passed on as the provider sent it
// (a completion, a stream event, a header). Text and Error also clean the
// text for people: they drop control characters and terminal escape
// sequences and the characters that reorder text on a screen (bidi
// overrides), turn line breaks and tabs into spaces, replace invalid UTF-8
// with U+FFFD, and bound each field's length.
//
// A nil *Scrubber has no key: its Text and Error still clean and bound. A
// Client makes one from its Config.APIKey and applies it to every error,
// header, body and stream event it returns. A Scrubber is safe for
// simultaneous use by multiple goroutines.
type Scrubber struct {
	forms []string // longest first
	bs    [][]byte // forms as bytes
}

// NewScrubber returns a Scrubber for key, or nil when key is empty.
func NewScrubber(key string) *Scrubber {
	if key == "" {
		return nil
	}
	secret := key
	if len(key) < redact.MinKeyLen {
		secret = "Bearer " + key
	}
	esc, _ := json.Marshal(secret) // a string: cannot fail
	js := string(esc[1 : len(esc)-1])
	s := &Scrubber{}
	for _, f := range []string{secret, js, strings.ReplaceAll(js, "/", `\/`), url.QueryEscape(secret), url.PathEscape(secret)} {
		if !slices.Contains(s.forms, f) {
			s.forms = append(s.forms, f)
		}
	}
	// Longest first: a form that holds another is replaced whole.
	slices.SortStableFunc(s.forms, func(a, b string) int { return len(b) - len(a) })
	for _, f := range s.forms {
		s.bs = append(s.bs, []byte(f))
	}
	return s
}

// Bytes returns p with the key removed; p itself when it holds none.
func (s *Scrubber) Bytes(p []byte) []byte {
	if s == nil {
		return p
	}
	for _, f := range s.bs {
		if bytes.Contains(p, f) {
			p = bytes.ReplaceAll(p, f, []byte(redact.KeyMark))
		}
	}
	return p
}

// String returns v with the key removed.
func (s *Scrubber) String(v string) string {
	if s == nil {
		return v
	}
	for _, f := range s.forms {
		if strings.Contains(v, f) {
			v = strings.ReplaceAll(v, f, redact.KeyMark)
		}
	}
	return v
}

// Header removes the key from every value of h, in place.
func (s *Scrubber) Header(h http.Header) {
	if s == nil {
		return
	}
	for _, vs := range h {
		for i, v := range vs {
			vs[i] = s.String(v)
		}
	}
}

// Text returns v cleaned for a person, a log or a database: without the
// key, control characters or escape sequences, and at most limit bytes
// long (cut with TruncatedMark; limit <= 0 means no bound).
func (s *Scrubber) Text(v string, limit int) string {
	// The key is removed before the text is cleaned, in case it holds a
	// character cleaning drops, and after, in case dropping joined it up;
	// before the cut, which could leave part of it.
	return truncate(s.String(clean(s.String(v))), limit)
}

// Error cleans, in place, the provider's text in err, one of the errors
// this package returns: Message with Text to MaxMessageBytes bytes, Type
// and Code to MaxFieldBytes bytes, and the key from a TransportError's
// text. It returns err.
func (s *Scrubber) Error(err error) error {
	msg := func(v string) string { return s.Text(v, MaxMessageBytes) }
	field := func(v string) string { return s.Text(v, MaxFieldBytes) }
	switch e := err.(type) {
	case *RateLimitError:
		e.Message = msg(e.Message)
	case *TooLargeError:
		e.Message = msg(e.Message)
	case *QuotaError:
		e.Type, e.Code, e.Message = field(e.Type), field(e.Code), msg(e.Message)
	case *OverloadedError:
		e.Message = msg(e.Message)
	case *StatusError:
		e.Type, e.Code, e.Message = field(e.Type), field(e.Code), msg(e.Message)
	case *TransportError:
		if s != nil && e.Err != nil {
			e.Err = redact.Error(e.Err, redact.KeyMark, s.forms...)
		}
	}
	return err
}

// clean drops control characters (C0, DEL, C1), terminal escape sequences
// (CSI, OSC, DCS and the other strings, two-character escapes) and
// bidirectional-override characters; turns tabs and line breaks into
// spaces; and replaces invalid UTF-8 with U+FFFD.
func clean(v string) string {
	if isClean(v) {
		return v
	}
	var b strings.Builder
	b.Grow(len(v))
	for i := 0; i < len(v); {
		r, n := utf8.DecodeRuneInString(v[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			b.WriteRune(utf8.RuneError)
		case r == '\t' || r == '\n' || r == '\r' || r == '\v' || r == '\f':
			b.WriteByte(' ')
		case r == 0x1b: // ESC
			n += escapeLen(v[i+n:])
		case r == 0x9b: // C1 CSI
			n += csiLen(v[i+n:])
		case r == 0x90 || r == 0x98 || r == 0x9d || r == 0x9e || r == 0x9f: // C1 DCS, SOS, OSC, PM, APC
			n += stringLen(v[i+n:])
		case r < 0x20 || (r >= 0x7f && r <= 0x9f) || isBidiControl(r):
		default:
			b.WriteString(v[i : i+n])
		}
		i += n
	}
	return b.String()
}

// isClean reports whether clean would return v unchanged: printable ASCII
// only, the common case, checked without building a copy.
func isClean(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c >= 0x7f {
			return false
		}
	}
	return true
}

// escapeLen is the length of the escape sequence after an ESC at the
// start of v.
func escapeLen(v string) int {
	if v == "" {
		return 0
	}
	switch v[0] {
	case '[':
		return 1 + csiLen(v[1:])
	case ']', 'P', 'X', '^', '_':
		return 1 + stringLen(v[1:])
	}
	// nF: intermediates, then a final byte; Fp, Fe, Fs: one byte.
	n := 0
	for n < len(v) && v[n] >= 0x20 && v[n] <= 0x2f {
		n++
	}
	if n < len(v) && v[n] >= 0x30 && v[n] <= 0x7e {
		n++
	}
	return n
}

// csiLen is the length of a control sequence's parameters, intermediates
// and final byte at the start of v.
func csiLen(v string) int {
	n := 0
	for n < len(v) && v[n] >= 0x20 && v[n] <= 0x3f {
		n++
	}
	if n < len(v) && v[n] >= 0x40 && v[n] <= 0x7e {
		n++
	}
	return n
}

// stringLen is the length of a control string (an OSC's title, say) and its
// terminator, BEL or ST (ESC \ or U+009C), at the start of v; the rest of v
// when it has none.
func stringLen(v string) int {
	for i := 0; i < len(v); i++ {
		switch {
		case v[i] == 0x07:
			return i + 1
		case v[i] == 0x1b && i+1 < len(v) && v[i+1] == '\\':
			return i + 2
		case strings.HasPrefix(v[i:], "\u009c"):
			return i + len("\u009c")
		}
	}
	return len(v)
}

// isBidiControl reports the characters that reorder text on a screen, so
// that what is shown is not what is stored.
func isBidiControl(r rune) bool {
	return r == 0x061c || r == 0x200e || r == 0x200f || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
}

// truncate cuts v to at most limit bytes at a character boundary, ending
// with TruncatedMark; limit <= 0 means no bound.
func truncate(v string, limit int) string {
	if limit <= 0 || len(v) <= limit {
		return v
	}
	mark := TruncatedMark
	if limit < 2*len(mark) {
		mark = "" // a bound this tight keeps the text rather than the mark
	}
	return cutAt(v, limit-len(mark)) + mark
}

// cutAt returns v's longest prefix of at most n bytes that ends at a
// character boundary.
func cutAt(v string, n int) string {
	if len(v) <= n {
		return v
	}
	for n > 0 && !utf8.RuneStart(v[n]) {
		n--
	}
	return v[:n]
}
