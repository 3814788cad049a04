package llm

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/jsonwalk"
)

// oddUsage is why a provider's usage was read as not reported: the field
// and what was wrong with its value, which is said.
type oddUsage struct {
	field, what string
	said        []byte
}

// readUsage reads a provider's usage object, raw, as every answer's usage
// is read: plain, streamed, walked or decoded. Each field is matched
// regardless of case, as encoding/json matches it, the last of a field
// named twice winning, and a null count is 0. A count is a JSON number
// that is a whole number from 0 to 2^63−1 in any form JSON writes it
// (10, 10.0, 1e3). A usage with a count that is not — a fraction, a
// negative number, one too large, a string — or that is not an object,
// is read as not reported (nil), and the oddity returned: the answer it
// came with is still the provider's answer, and the call's charge stands
// as reserved, as for an answer without usage. Failing the call instead
// would have a caller buy the same answer again.
func readUsage(v []byte) (*Usage, *oddUsage) {
	if len(v) == 0 || string(v) == "null" {
		return nil, nil
	}
	u := new(Usage)
	var odd *oddUsage
	note := func(field string, v []byte, what string) {
		if what != "" && odd == nil {
			odd = &oddUsage{field: field, what: what, said: v}
		}
	}
	walked := jsonwalk.Object(v, func(k, v []byte) {
		var (
			dst   *int64
			field string
		)
		switch {
		case strings.EqualFold(string(k), "prompt_tokens"):
			dst, field = &u.PromptTokens, "prompt_tokens"
		case strings.EqualFold(string(k), "completion_tokens"):
			dst, field = &u.CompletionTokens, "completion_tokens"
		case strings.EqualFold(string(k), "total_tokens"):
			dst, field = &u.TotalTokens, "total_tokens"
		case strings.EqualFold(string(k), "prompt_tokens_details"):
			if string(v) == "null" {
				u.PromptTokensDetails = nil
				return
			}
			// Named twice, the second is read into the first, as
			// encoding/json reads into a pointer it has set.
			d := u.PromptTokensDetails
			if d == nil {
				d = new(PromptTokensDetails)
			}
			if !jsonwalk.Object(v, func(k, v []byte) {
				if strings.EqualFold(string(k), "cached_tokens") {
					n, what := readCount(v)
					d.CachedTokens = n
					note("cached_tokens", v, what)
				}
			}) {
				note("prompt_tokens_details", v, "not an object")
			}
			u.PromptTokensDetails = d
			return
		default:
			return
		}
		n, what := readCount(v)
		*dst = n
		note(field, v, what)
	})
	if !walked {
		return nil, &oddUsage{field: "usage", what: "not an object", said: v}
	}
	if odd != nil {
		return nil, odd
	}
	return u, nil
}

// readCount reads a token count, a valid JSON value: null is 0; a number
// is its value when that is a whole number from 0 to 2^63−1, whether
// written 10, 10.0, 1e3 or 0.1e2. Anything else says what is wrong with it.
func readCount(v []byte) (int64, string) {
	if string(v) == "null" {
		return 0, ""
	}
	if n, err := strconv.ParseInt(string(v), 10, 64); err == nil {
		if n < 0 {
			return 0, "negative"
		}
		return n, ""
	}
	if len(v) == 0 || v[0] != '-' && (v[0] < '0' || v[0] > '9') {
		return 0, "not a number"
	}
	// A number with a fraction or an exponent, or one too large for int64:
	// read as digits and a power of ten, never as a float, so that no
	// rounding makes a fraction whole, and never computed, so that an
	// exponent of a billion costs nothing.
	s := string(v)
	neg := s[0] == '-'
	if neg {
		s = s[1:]
	}
	mant, exp, _ := strings.Cut(strings.ToLower(s), "e")
	whole, frac, _ := strings.Cut(mant, ".")
	e := 0
	if exp != "" {
		x, err := strconv.ParseInt(exp, 10, 32)
		if err != nil { // out of range: a huge or tiny power
			x = 1 << 30
			if exp[0] == '-' {
				x = -x
			}
		}
		e = int(x)
	}
	e -= len(frac)
	digits := strings.TrimLeft(whole+frac, "0")
	if digits == "" {
		return 0, "" // zero, however written
	}
	if neg {
		return 0, "negative"
	}
	for strings.HasSuffix(digits, "0") {
		digits, e = digits[:len(digits)-1], e+1
	}
	if e < 0 {
		return 0, "not a whole number"
	}
	if len(digits)+e > 19 {
		return 0, "too large"
	}
	n, err := strconv.ParseInt(digits+strings.Repeat("0", e), 10, 64)
	if err != nil {
		return 0, "too large"
	}
	return n, ""
}

// usage reads an answer's usage (readUsage) and logs an oddity in it.
func (c *Client) usage(v []byte) *Usage {
	u, odd := readUsage(v)
	if odd != nil {
		c.notes.log(c, odd)
	}
	return u
}

// notices logs each kind of oddity in a provider's answers at most once
// every governor.NoticeEvery: a provider that sends one sends it with
// every answer, and one line says as much as a line per call. The kinds
// are named by the client, never by the provider, so they are few.
type notices struct {
	mu   sync.Mutex
	last map[string]time.Time
}

func (n *notices) log(c *Client, odd *oddUsage) {
	now := c.cfg.Now()
	kind := odd.field + " " + odd.what
	n.mu.Lock()
	last, seen := n.last[kind]
	due := !seen || now.Sub(last) >= governor.NoticeEvery
	if due {
		if n.last == nil {
			n.last = make(map[string]time.Time)
		}
		n.last[kind] = now
	}
	n.mu.Unlock()
	if !due {
		return
	}
	said := odd.said
	if len(said) > MaxFieldBytes {
		said = said[:MaxFieldBytes] // Text bounds it; the copy need not be larger
	}
	c.cfg.Logger.LogAttrs(context.Background(), slog.LevelWarn, "llm: read a provider's usage as not reported: its charge stands as reserved",
		slog.String("field", odd.field), slog.String("problem", odd.what),
		slog.String("said", c.scrub.Text(string(said), MaxFieldBytes)),
		slog.String("base_url", c.scrub.String(c.cfg.BaseURL)),
		slog.Duration("logged_at_most_every", governor.NoticeEvery))
}
