package jsonwalk

import (
	"bytes"
	"encoding/json"
	"testing"
)

var seeds = []string{
	`{"a":1,"b":"x","c":[1,{"d":"}"}],"e":{"f":null},"g":true}`,
	` { "a" : "\"]}" , "a" : 2 , "\u0062" : "\ud83d\ude00" } `,
	"{\"\xff\":1}", `{}`, `[]`, `[1, "a", {"b":[2]}, null]`, `null`, `"s"`, ``, `{`, `{"a":1} x`,
}

// FuzzObject: Object passes the keys and raw values encoding/json decodes
// into a map[string]json.RawMessage (the last of a key written twice), and
// refuses what it refuses.
func FuzzObject(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got := map[string]json.RawMessage{}
		ok := Object(data, func(k, v []byte) { got[string(k)] = bytes.Clone(v) })
		var want map[string]json.RawMessage
		err := json.Unmarshal(data, &want)
		if ok != (err == nil && want != nil) {
			t.Fatalf("%q: walked %v, encoding/json: %v %v", data, ok, want, err)
		}
		if !ok {
			return
		}
		if len(got) != len(want) {
			t.Fatalf("%q: %d keys, want %d", data, len(got), len(want))
		}
		for k, v := range want {
			if !bytes.Equal(got[k], v) {
				t.Fatalf("%q: %q is %q, want %q", data, k, got[k], v)
			}
		}
	})
}

// FuzzElements: Elements passes the raw elements encoding/json decodes
// into a []json.RawMessage.
func FuzzElements(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var want []json.RawMessage
		if !json.Valid(data) {
			return // Elements reads valid JSON only
		}
		err := json.Unmarshal(data, &want)
		var got []json.RawMessage
		ok := Elements(data, func(e []byte) { got = append(got, e) })
		if ok != (err == nil && want != nil) {
			t.Fatalf("%q: walked %v, encoding/json: %v %v", data, ok, want, err)
		}
		if ok && len(got) != len(want) {
			t.Fatalf("%q: %d elements, want %d", data, len(got), len(want))
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("%q: element %d is %q, want %q", data, i, got[i], want[i])
			}
		}
	})
}
