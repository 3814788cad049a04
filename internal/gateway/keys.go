package gateway

import (
	"bytes"
	"strings"
)

// readKeys are the top-level fields the gateway's fast reader reads.
var readKeys = [...]string{"model", "messages", "max_tokens", "max_completion_tokens", "stream",
	"n", "tools", "functions", "tool_choice", "response_format"}

// readKeysExact reports whether every top-level key of the JSON object in
// body that encoding/json would read as one of readKeys is spelled exactly
// so. encoding/json matches keys regardless of case (and folds "K" and "ſ"
// too); a provider does not: a "Max_Tokens" read by the fast reader would
// price a request by a number the provider never sees, and a "messAges"
// would pass a request the provider refuses.
// Any escape in a top-level key also reports false: the whole decoder,
// which reads keys exactly, then decides. One pass over the bytes, no
// allocation.
func readKeysExact(body []byte) bool {
	exact, _ := scanKeys(body)
	return exact
}

// scanKeys reports what readKeysExact does, and whether a top-level key
// is max_tokens or max_completion_tokens, spelled so. A string is crossed
// from quote to quote with bytes.IndexByte rather than byte by byte: most
// of a request's bytes are its messages' text.
func scanKeys(body []byte) (exact, named bool) {
	depth, expectKey := 0, false
	for i := 0; i < len(body); i++ {
		switch body[i] {
		case '"':
			start := i + 1
			end, escaped := stringEnd(body, start)
			if depth == 1 && expectKey {
				if escaped {
					return false, named
				}
				if end < 0 {
					return true, named // unterminated: the decoders refuse it
				}
				key := string(body[start:end]) // no allocation: compared only
				for _, k := range readKeys {
					if key != k && strings.EqualFold(key, k) {
						return false, named
					}
				}
				named = named || key == "max_tokens" || key == "max_completion_tokens"
			}
			if end < 0 {
				return true, named
			}
			i = end
		case '{':
			depth++
			if depth == 1 {
				expectKey = true
			}
		case '[':
			depth++
		case '}', ']':
			depth--
		case ',':
			if depth == 1 {
				expectKey = true
			}
		case ':':
			if depth == 1 {
				expectKey = false
			}
		}
	}
	return true, named
}

// stringEnd returns the index of the quote that ends the JSON string whose
// first byte is at start (-1 when none does), and whether a backslash
// escape came before it.
func stringEnd(body []byte, start int) (end int, escaped bool) {
	for j := start; j < len(body); {
		q := bytes.IndexByte(body[j:], '"')
		if q < 0 {
			return -1, escaped || bytes.IndexByte(body[j:], '\\') >= 0
		}
		b := bytes.IndexByte(body[j:j+q], '\\')
		if b < 0 {
			return j + q, escaped
		}
		escaped = true
		j += b + 2 // the escaped byte cannot end the string
	}
	return -1, escaped
}
