package engine

import (
	"encoding/json"
	"testing"
)

// FuzzField: reading an idempotency, priority or rate-limit key out of an
// event never panics, reads a string field back exactly as it was sent,
// and finds nothing in data that is not JSON.
func FuzzField(f *testing.F) {
	f.Add([]byte(`{"documentId":"d1","n":3}`), "data.documentId", "d1")
	f.Add([]byte(`{"a":{"b":"c"}}`), "event.data.a.b", "x")
	f.Add([]byte(`not json`), "data.x", "")
	f.Add([]byte(`{"x":1e999}`), "data.x", "y")
	f.Add([]byte(`[1,2]`), "data.0", "z")
	f.Fuzz(func(t *testing.T, data []byte, path, value string) {
		ev := Event{Name: "n", ID: "i", Data: data}
		if v, ok := decodeEvent(ev).field(path); ok && !json.Valid(data) && path != "id" && path != "name" && path != "event.id" && path != "event.name" {
			t.Fatalf("field(%q) = %q from data that is not JSON: %q", path, v, data)
		}
		// A string field reads back as sent.
		raw, err := json.Marshal(map[string]string{"key": value})
		if err != nil {
			t.Fatal(err)
		}
		if v, ok := decodeEvent(Event{Data: raw}).field("event.data.key"); !ok || v != string([]rune(value)) {
			t.Fatalf("field(event.data.key) of %s = %q, %v; want %q", raw, v, ok, value)
		}
	})
}
