// Package jsonwalk reads JSON objects and arrays that json.Valid accepts
// by walking their bytes, for the paths where encoding/json's reflection
// (a decoder, a map and a copy of every value per object) costs several
// times the walk: every request a proxy serves. It reads what encoding/json
// reads: each key unquoted as it unquotes them, each value's bytes as a
// json.RawMessage would hold them.
package jsonwalk

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// Object calls f with every key of the JSON object data, unquoted, and
// the raw value that follows it, without the white space around it, in the
// order they are written; a key written twice is passed twice. It reports
// false, calling f for nothing, when data is not valid JSON or not an
// object. Key and value are mostly parts of data: f must copy them to keep
// them.
func Object(data []byte, f func(key, value []byte)) bool {
	if !json.Valid(data) {
		return false
	}
	i := skipSpace(data, 0)
	if data[i] != '{' {
		return false
	}
	i = skipSpace(data, i+1)
	for data[i] != '}' {
		end := valueEnd(data, i) // the key: a string
		key := UnquoteBytes(data[i:end])
		i = skipSpace(data, skipSpace(data, end)+1) // past the colon
		end = valueEnd(data, i)
		f(key, data[i:end])
		if i = skipSpace(data, end); data[i] == ',' {
			i = skipSpace(data, i+1)
		}
	}
	return true
}

// Elements calls f with every element of the JSON array v, raw, without
// the white space around it, in order. v must be valid JSON (a value
// Object passed, say); it reports false, calling f for nothing, when v is
// not an array.
func Elements(v []byte, f func(elem []byte)) bool {
	i := skipSpace(v, 0)
	if i >= len(v) || v[i] != '[' {
		return false
	}
	for i = skipSpace(v, i+1); v[i] != ']'; {
		end := valueEnd(v, i)
		f(v[i:end])
		if i = skipSpace(v, end); v[i] == ',' {
			i = skipSpace(v, i+1)
		}
	}
	return true
}

// Unquote returns the string a valid JSON string literal s holds. One
// without escapes and in valid UTF-8 is its bytes; any other is left to
// encoding/json, which replaces invalid UTF-8 and lone surrogates.
func Unquote(s []byte) string {
	if in, ok := plainString(s); ok {
		return string(in)
	}
	var out string
	_ = json.Unmarshal(s, &out) // valid: it cannot fail
	return out
}

// UnquoteBytes is Unquote without a copy of a string that has nothing to
// unquote.
func UnquoteBytes(s []byte) []byte {
	if in, ok := plainString(s); ok {
		return in
	}
	return []byte(Unquote(s))
}

// plainString returns what is between the quotes of a valid JSON string
// literal when that is the string itself: no escape, valid UTF-8.
func plainString(s []byte) ([]byte, bool) {
	in := s[1 : len(s)-1]
	return in, bytes.IndexByte(in, '\\') < 0 && utf8.Valid(in)
}

// IsString reports whether the raw JSON value v is a string.
func IsString(v []byte) bool { return len(v) > 0 && v[0] == '"' }

func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// valueEnd returns the index just past the valid JSON value that starts
// at data[i].
func valueEnd(data []byte, i int) int {
	switch data[i] {
	case '"':
		for i++; ; i++ {
			switch data[i] {
			case '\\':
				i++ // the escaped byte cannot end the string
			case '"':
				return i + 1
			}
		}
	case '{', '[':
		depth := 0
		for ; ; i++ {
			switch data[i] {
			case '"':
				i = valueEnd(data, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
	}
	for i < len(data) { // a number, true, false or null
		switch data[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
}
