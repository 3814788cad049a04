package driver

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// checkName returns an error when s cannot be stored as what (an item key,
// a backfill's name…): empty, over limit bytes, or not UTF-8 without NUL.
// PostgreSQL refuses the last two where SQLite takes them, so both drivers
// refuse them first.
func checkName(what, s string, limit int) error {
	switch {
	case s == "":
		return fmt.Errorf("empty %s", what)
	case len(s) > limit:
		return fmt.Errorf("%s of %d bytes is over the limit of %d: %s", what, len(s), limit, quote(s))
	case !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%s %s is not UTF-8 without NUL", what, quote(s))
	}
	return nil
}

// text returns s as a text column bounded to limit bytes holds it: invalid
// UTF-8 and NUL bytes replaced by U+FFFD, then cut on a rune boundary.
func text(s string, limit int) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
	return cut(s, limit)
}

// quote quotes s for an error message, cut to its first 48 bytes so that
// an over-long value is not repeated whole.
func quote(s string) string {
	if c := cut(s, 48); c != s {
		return strconv.Quote(c) + "…"
	}
	return strconv.Quote(s)
}

// cut returns at most the first limit bytes of s, without splitting a rune
// of valid UTF-8.
func cut(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	i := limit
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}
