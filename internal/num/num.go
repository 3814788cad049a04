// Package num formats numbers for people: the one place sluice's messages,
// headers' texts and reports write thousands separators.
package num

import "strconv"

// Group writes n with comma thousands separators: 1252 → "1,252",
// -1000000 → "-1,000,000".
func Group(n int64) string {
	s := strconv.FormatInt(n, 10)
	digits := len(s)
	if n < 0 {
		digits--
	}
	if digits <= 3 {
		return s
	}
	b := make([]byte, 0, len(s)+(digits-1)/3)
	if n < 0 {
		b = append(b, '-')
		s = s[1:]
	}
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			b = append(b, ',')
		}
		b = append(b, s[i])
	}
	return string(b)
}
