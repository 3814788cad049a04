package engine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Bounds on what a client names things with. They are checked before the
// database sees anything, so SQLite and PostgreSQL answer the same input
// the same way (PostgreSQL refuses a NUL in text and an index entry over
// about 2.7 KB; SQLite takes both).
const (
	// MaxEventNameBytes bounds an event's name.
	MaxEventNameBytes = 256
	// MaxEventIDBytes bounds an event's ID and every value that names a run
	// (an idempotency key) or a queue partition (a concurrency or throttle key).
	MaxEventIDBytes = 256
	// MaxRunIDBytes bounds a run ID: a function ID, a separator and an event
	// ID or idempotency key, and a re-run's suffix.
	MaxRunIDBytes = 512
)

// InvalidError is input refused before anything was stored or looked up.
// Its message names what is wrong and where.
type InvalidError struct {
	What    string // the field or parameter, e.g. `event "id"`
	Problem string
}

func (e *InvalidError) Error() string { return e.What + ": " + e.Problem }

func invalid(what, format string, args ...any) *InvalidError {
	return &InvalidError{What: what, Problem: fmt.Sprintf(format, args...)}
}

// checkText checks a client's identifier: at most limit bytes of UTF-8
// with no control characters. Empty is allowed; callers decide.
func checkText(what, s string, limit int) error {
	if len(s) > limit {
		return invalid(what, "%d bytes is over the limit of %d (it begins %s)", len(s), limit, quote(s))
	}
	if !utf8.ValidString(s) {
		return invalid(what, "is not valid UTF-8 (%s)", quote(s))
	}
	for i, r := range s {
		if unicode.IsControl(r) {
			return invalid(what, "has the control character %U at byte %d (%s)", r, i, quote(s))
		}
	}
	return nil
}

// Quote quotes s, a client's value, for an error message, cut to its
// first 48 bytes so that an over-long value is not repeated whole.
func Quote(s string) string { return quote(s) }

// quote is Quote.
func quote(s string) string {
	const show = 48
	if len(s) <= show {
		return strconv.Quote(s)
	}
	cut := show
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "…"
}

// CheckRunID checks a run ID a client sent, as every lookup by ID does.
func CheckRunID(id string) error {
	if id == "" {
		return invalid("run id", "is empty")
	}
	return checkText("run id", id, MaxRunIDBytes)
}

// CheckEvent checks an event's name, ID and data before anything else is
// done with it; Function.checkEvent then checks what each function reads.
func CheckEvent(ev Event) error {
	if ev.Name == "" {
		return invalid(`event "name"`, "is missing or empty")
	}
	if err := checkText(`event "name"`, ev.Name, MaxEventNameBytes); err != nil {
		return err
	}
	if err := checkText(`event "id"`, ev.ID, MaxEventIDBytes); err != nil {
		return err
	}
	data := bytes.TrimSpace(ev.Data)
	if len(data) > 0 && !bytes.Equal(data, []byte("null")) {
		if !json.Valid(data) {
			return invalid(`event "data"`, "is not valid JSON")
		}
		if data[0] != '{' {
			return invalid(`event "data"`, "must be a JSON object")
		}
	}
	return nil
}

// checkEvent checks the event fields f reads (idempotency key, partition
// key, rate-limit key, priority) and its declared data type.
func (f *Function) checkEvent(ev eventData) error {
	role := func(what string) string { return fmt.Sprintf("the %s of function %s", what, f.ID) }
	if f.Idempotency != "" {
		if err := checkKeyField(ev, f.Idempotency, role("idempotency key")); err != nil {
			return err
		}
	}
	if pk := f.partitionKey(); pk != "" {
		if err := checkKeyField(ev, pk, role("concurrency key")); err != nil {
			return err
		}
	}
	if rl := f.RateLimit; rl != nil && rl.Key != "" {
		if err := checkFieldCase(ev, rl.Key, role("rate-limit key")); err != nil {
			return err
		}
		// Any value keys the limit (an object by its JSON), but its text is
		// stored: PostgreSQL refuses a NUL that SQLite keeps, and a text
		// past an index's bound.
		if k, ok := ev.field(rl.Key); ok {
			if err := checkText(fieldWhat(rl.Key, role("rate-limit key")), k, MaxEventKeyBytes); err != nil {
				return err
			}
		}
	}
	if f.Priority != "" {
		if err := checkFieldCase(ev, f.Priority, role("priority")); err != nil {
			return err
		}
		if v, ok := ev.value(f.Priority); ok && v != nil {
			what := fieldWhat(f.Priority, role("priority"))
			n, isNum := v.(json.Number)
			if !isNum {
				return invalid(what, "must be an integer")
			}
			if _, err := strconv.Atoi(n.String()); err != nil {
				return invalid(what, "%s is not an integer", quote(n.String()))
			}
		}
	}
	if f.Decode != nil {
		data := bytes.TrimSpace(ev.Data)
		if len(data) > 0 && !bytes.Equal(data, []byte("null")) {
			if err := f.Decode(data); err != nil {
				return invalid(`event "data"`, "does not decode as the event type of function %s: %v", f.ID, err)
			}
		}
	}
	return nil
}

// checkKeyField checks a field whose value names a run or a partition: when
// present it is a non-empty string or a number, bounded as an event ID. An
// absent field is allowed (the run is named by the event ID, the partition
// is the default one).
func checkKeyField(ev eventData, path, role string) error {
	if err := checkFieldCase(ev, path, role); err != nil {
		return err
	}
	v, ok := ev.value(path)
	if !ok || v == nil {
		return nil
	}
	what := fieldWhat(path, role)
	if v == "" {
		return invalid(what, "is empty: give it a value or leave it out")
	}
	_, err := KeyText(what, v)
	return err
}

// KeyText is the text of a key read from an event's data, decoded with
// numbers as json.Number: a string as it is, a number as written. It
// refuses any other value, an empty string, and text that could not name
// a run (over MaxEventIDBytes, not UTF-8, or with a control character);
// what names the field in the error. The fields a function reads as keys
// are checked by it, and so is the key of a YAML event job, which must
// be a key its output can take whichever database or endpoint receives it.
func KeyText(what string, v any) (string, error) {
	switch x := v.(type) {
	case string:
		if x == "" {
			return "", invalid(what, "is empty")
		}
		return x, checkText(what, x, MaxEventIDBytes)
	case json.Number:
		return x.String(), checkText(what, x.String(), MaxEventIDBytes)
	}
	return "", invalid(what, "must be a string or a number, not %s", jsonKind(v))
}

// checkFieldCase refuses data that holds, at any level of path, a key
// equal to the path's key there but for case, whether or not the exact key
// is there too. Sluice reads path by its exact keys, while a handler's
// typed data is decoded by encoding/json, which matches keys ignoring case
// and keeps the last match: the two would read different values, or
// sluice none (a run not named by its idempotency key) where the handler
// reads one. Keys repeated exactly are left alone: both take the last.
func checkFieldCase(ev eventData, path, role string) error {
	cur := ev.doc
	for _, k := range dataKeys(path) {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		// The least of several variants, so that the error is the same
		// every time the event is sent.
		variant, found := "", false
		for mk := range m {
			if mk != k && strings.EqualFold(mk, k) && (!found || mk < variant) {
				variant, found = mk, true
			}
		}
		if found {
			written := "is written"
			if _, exact := m[k]; exact {
				written = "is also written"
			}
			return invalid(fieldWhat(path, role),
				"%s %s %s in the data: the function's handler reads keys that differ only in case as one field, but sluice reads only %s, so the two could disagree; send the key only as %s",
				quote(k), written, quote(variant), quote(k), quote(k))
		}
		if cur, ok = m[k]; !ok {
			return nil
		}
	}
	return nil
}

// fieldWhat names an event field a function reads, for an error about it.
func fieldWhat(path, role string) string { return fmt.Sprintf("event field %q (%s)", path, role) }

// jsonKind names a decoded JSON value that is neither a string nor a
// number, for an error saying what a field held.
func jsonKind(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(x)
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	}
	return fmt.Sprintf("%T", v)
}
