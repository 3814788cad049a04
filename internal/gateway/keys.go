package gateway

import "strings"

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
	depth, inStr, isKey, expectKey, start := 0, false, false, false, 0
	for i := 0; i < len(body); i++ {
		c := body[i]
		if inStr {
			switch c {
			case '\\':
				if isKey {
					return false
				}
				i++ // the escaped byte cannot end the string
			case '"':
				inStr = false
				if isKey {
					key := string(body[start:i]) // no allocation: compared only
					for _, k := range readKeys {
						if key != k && strings.EqualFold(key, k) {
							return false
						}
					}
				}
			}
			continue
		}
		switch c {
		case '"':
			inStr, isKey, start = true, depth == 1 && expectKey, i+1
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
	return true
}
