package llm

import (
	"bytes"
	"compress/zlib"
	"io"
)

// pdfPages counts a PDF's pages for pricing: its "/Type /Page" dictionaries,
// in its bytes and in every Flate-compressed stream, where a PDF 1.5 file
// keeps them inside object streams. A name is read with its #xx escapes, so
// "/Type/P#61ge" counts too. Anything that reads as a page counts, whether
// the page tree uses it or not: an overcount costs a reservation too many,
// an undercount a provider's 429.
//
// budget is how many bytes may still be inflated; it is lowered by what is.
// ok is false when the count cannot be trusted: no page found, or the budget
// ran out before every stream was read.
func pdfPages(data []byte, budget *int64) (pages int64, ok bool) {
	var sc pageScanner
	sc.Write(data)
	sc.end()
	for rest := data; ; {
		i := bytes.Index(rest, []byte("stream"))
		if i < 0 {
			break
		}
		start := i + len("stream")
		if i >= 3 && string(rest[i-3:i]) == "end" {
			rest = rest[start:]
			continue
		}
		// The data starts after the end of the keyword's line.
		switch {
		case bytes.HasPrefix(rest[start:], []byte("\r\n")):
			start += 2
		case bytes.HasPrefix(rest[start:], []byte("\n")), bytes.HasPrefix(rest[start:], []byte("\r")):
			start++
		}
		body := rest[start:]
		if j := bytes.Index(body, []byte("endstream")); j >= 0 {
			body = body[:j]
		}
		if isZlib(body) {
			zr, err := zlib.NewReader(bytes.NewReader(body))
			if err == nil {
				n, _ := io.Copy(&sc, io.LimitReader(zr, *budget+1))
				sc.end()
				*budget -= n
				if *budget < 0 {
					return sc.pages, false
				}
			}
		}
		rest = rest[start+len(body):]
	}
	return sc.pages, sc.pages > 0
}

// isZlib reports whether b starts with a zlib header for Deflate (RFC 1950),
// as a FlateDecode stream does.
func isZlib(b []byte) bool {
	return len(b) >= 2 && b[0]&0x0f == 8 && b[0]>>4 <= 7 && (uint16(b[0])<<8|uint16(b[1]))%31 == 0
}

// pageScanner counts "/Type /Page" name pairs in the bytes written to it, in
// any number of writes: a name may be split between two. Comments and white
// space may separate the two names; anything else between them does not
// make a pair.
type pageScanner struct {
	pages    int64
	afterTyp bool // the last name read was /Type, and nothing but space since
	inName   bool // reading a name into name
	name     [maxName]byte
	n        int  // bytes of name read; more than maxName: too long to matter
	hex      int  // in an escape: how many of its two hex digits are read, plus 1
	hexVal   byte // the escape's value so far
	comment  bool // in a comment, up to the end of its line
}

// maxName bounds the bytes of a name kept: /Type and /Page have 4.
const maxName = 4

func (s *pageScanner) Write(p []byte) (int, error) {
	for _, c := range p {
		if s.inName {
			if s.hex > 0 {
				if v, ok := unhex(c); ok {
					s.hexVal = s.hexVal<<4 | v
					if s.hex++; s.hex == 3 {
						s.appendName(s.hexVal)
						s.hex = 0
					}
					continue
				}
				// A broken escape: the name is not one of ours.
				s.hex, s.n = 0, maxName+1
			}
			if !pdfDelimiter(c) {
				if c == '#' {
					s.hex, s.hexVal = 1, 0
				} else {
					s.appendName(c)
				}
				continue
			}
			s.endName()
		}
		switch {
		case s.comment:
			s.comment = c != '\n' && c != '\r'
		case c == '/':
			s.inName, s.n = true, 0
		case c == '%':
			s.comment = true
		case pdfSpace(c):
		default:
			s.afterTyp = false
		}
	}
	return len(p), nil
}

func (s *pageScanner) appendName(c byte) {
	if s.n < maxName {
		s.name[s.n] = c
	}
	s.n = min(s.n+1, maxName+1)
}

// end closes a text: a name at its very end is read, and no pair goes on
// into the next.
func (s *pageScanner) end() {
	if s.inName {
		s.endName()
	}
	s.afterTyp, s.comment = false, false
}

// endName closes the name being read and counts a /Type /Page pair.
func (s *pageScanner) endName() {
	name := s.name[:min(s.n, maxName)]
	if s.n > maxName {
		name = nil
	}
	if s.afterTyp && string(name) == "Page" {
		s.pages++
	}
	s.afterTyp = string(name) == "Type"
	s.inName, s.hex = false, 0
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// pdfChars classes the bytes of a PDF: white space, and the delimiters that
// end a name with it.
var pdfChars = func() (t [256]uint8) {
	for _, c := range []byte("\x00\t\n\f\r ") {
		t[c] = pdfSpaceChar | pdfDelimiterChar
	}
	for _, c := range []byte("()<>[]{}/%") {
		t[c] = pdfDelimiterChar
	}
	return t
}()

const (
	pdfSpaceChar = 1 << iota
	pdfDelimiterChar
)

func pdfSpace(c byte) bool     { return pdfChars[c]&pdfSpaceChar != 0 }
func pdfDelimiter(c byte) bool { return pdfChars[c]&pdfDelimiterChar != 0 }
