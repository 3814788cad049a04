package engine

import (
	"fmt"
	"strconv"
	"strings"
)

// ReservedEventPrefix begins the names of the events sluice sends itself
// (a backfill's next run, a cron tick): a client may not send them, or it
// could start a backfill's run under an ID of its own choosing.
const ReservedEventPrefix = "sluice/"

// CheckClientEvent is CheckEvent for an event a client sent (the HTTP
// API, the dashboard's form): its name may not be one of sluice's own,
// and its data may not hold a lone UTF-16 surrogate.
func CheckClientEvent(ev Event) error {
	if err := CheckEvent(ev); err != nil {
		return err
	}
	if strings.HasPrefix(ev.Name, ReservedEventPrefix) {
		return invalid(`event "name"`, "%s begins %q, which only sluice's own events may", quote(ev.Name), ReservedEventPrefix)
	}
	if at, ok := LoneSurrogate(ev.Data); ok {
		return invalid(`event "data"`, "%s", LoneSurrogateProblem(ev.Data, at))
	}
	return nil
}

// LoneSurrogate reports the offset in the JSON text b of the first \u
// escape of a UTF-16 surrogate that is not one half of a pair. encoding/json
// reads each such escape as U+FFFD, so two events that differ only there
// would be read as one: the second's key taken for the first's, and the
// event dropped as already seen. b must be valid JSON.
func LoneSurrogate(b []byte) (int, bool) {
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' || i+1 >= len(b) {
			continue
		}
		if b[i+1] != 'u' {
			i++ // an escape of one character, which may be a backslash
			continue
		}
		r, ok := hex4(b, i+2)
		switch {
		case !ok || r < 0xD800 || r > 0xDFFF:
		case r >= 0xDC00: // a low half with no high half before it
			return i, true
		default: // a high half: a low half must follow at once
			lo, ok := hex4(b, i+8)
			if i+7 >= len(b) || b[i+6] != '\\' || b[i+7] != 'u' || !ok || lo < 0xDC00 || lo > 0xDFFF {
				return i, true
			}
			i += 6
		}
		i += 5
	}
	return 0, false
}

// LoneSurrogateProblem says what is wrong with the escape at offset at of
// b, which LoneSurrogate found.
func LoneSurrogateProblem(b []byte, at int) string {
	return fmt.Sprintf("has the escape %s at byte %d, half of a UTF-16 surrogate pair without its other half: "+
		"a JSON string must hold whole characters", b[at:min(at+6, len(b))], at)
}

// hex4 reads the four hexadecimal digits of b at i.
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[i:i+4]), 16, 16)
	return rune(n), err == nil
}
