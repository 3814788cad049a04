package llm

import (
	"strings"
	"sync"

	"github.com/tiktoken-go/tokenizer"
)

// The tokenizer's codec splits a text into pieces with a regular
// expression and encodes each piece on its own; its matcher allocates a
// match object, and the text as runes, for every piece, which is most of
// what pricing a request allocates. For ASCII text on cl100k_base, the
// common case, countPieces splits the text itself, by the same rules, and
// counts each piece once: a piece's count depends on its text alone, and
// the same words come back in every request, so the counts of recent
// pieces are remembered.

// pieceCacheSize bounds the pieces whose counts are remembered: when it is
// full it is emptied, so a long run of new words costs no more than the
// codec would.
const pieceCacheSize = 4096

// pieceCounts remembers the token counts of pieces of cl100k_base.
type pieceCounts struct {
	mu     sync.Mutex
	counts map[string]int
}

var cl100kPieces pieceCounts

// countCl100k counts the tokens of text with cl100k_base, splitting it
// itself when it is ASCII without control characters other than tab and
// newline; false if it is not, for the codec to count.
func countCl100k(text string) (int, bool) {
	for i := 0; i < len(text); i++ {
		if c := text[i]; c >= 0x7f || c < 0x20 && c != '\t' && c != '\n' {
			return 0, false
		}
	}
	p := &cl100kPieces
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for rest := text; rest != ""; {
		k := cl100kPiece(rest)
		piece := rest[:k]
		rest = rest[k:]
		c, ok := p.counts[piece]
		if !ok {
			var err error
			if c, err = cl100k().Count(piece); err != nil {
				return 0, false
			}
			if p.counts == nil || len(p.counts) >= pieceCacheSize {
				p.counts = map[string]int{}
			}
			p.counts[strings.Clone(piece)] = c // not the text's: it would keep it
		}
		n += c
	}
	return n, true
}

// The byte classes of the split, for ASCII: letters (\p{L}), digits
// (\p{N}), whitespace (\s: space, tab and newline, the only ones
// countCl100k lets through) and the rest, punctuation.
func isLetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }
func isDigit(c byte) bool  { return c >= '0' && c <= '9' }
func isSpace(c byte) bool  { return c == ' ' || c == '\t' || c == '\n' }
func isPunct(c byte) bool  { return !isLetter(c) && !isDigit(c) && !isSpace(c) }

// cl100kPiece is the length of the first piece of s (ASCII, not empty) as
// cl100k_base's pattern splits it: the first of its alternatives that
// matches at the start of s, each as the regular expression matches it.
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//	 ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
func cl100kPiece(s string) int {
	c := s[0]
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if c == '\'' && len(s) > 1 {
		switch a := s[1] | 0x20; {
		case a == 's' || a == 't' || a == 'm' || a == 'd':
			return 2
		case len(s) > 2 && (a == 'r' && s[2]|0x20 == 'e' || a == 'v' && s[2]|0x20 == 'e' || a == 'l' && s[2]|0x20 == 'l'):
			return 3
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if isLetter(c) {
		return letters(s, 1)
	}
	if c != '\n' && !isDigit(c) && len(s) > 1 && isLetter(s[1]) {
		return letters(s, 2)
	}
	// \p{N}{1,3}
	if isDigit(c) {
		n := 1
		for n < 3 && n < len(s) && isDigit(s[n]) {
			n++
		}
		return n
	}
	//  ?[^\s\p{L}\p{N}]+[\r\n]*
	start := 0
	if c == ' ' && len(s) > 1 && isPunct(s[1]) {
		start = 1
	}
	if isPunct(s[start]) {
		n := start + 1
		for n < len(s) && isPunct(s[n]) {
			n++
		}
		for n < len(s) && s[n] == '\n' {
			n++
		}
		return n
	}
	// c is whitespace: the run of it.
	end := 1
	for end < len(s) && isSpace(s[end]) {
		end++
	}
	// \s*[\r\n]+: up to the run's last newline.
	if nl := strings.LastIndexByte(s[:end], '\n'); nl >= 0 {
		return nl + 1
	}
	// \s+(?!\S): the whole run at the end of s, else all of it but the
	// last, which the next piece takes with what follows.
	if end == len(s) {
		return end
	}
	if end > 1 {
		return end - 1
	}
	// \s+
	return end
}

// letters is the length of the run of letters of s from i on, i included.
func letters(s string, i int) int {
	for i < len(s) && isLetter(s[i]) {
		i++
	}
	return i
}

// cl100kName is the encoding countCl100k counts.
const cl100kName = string(tokenizer.Cl100kBase)
