package llm

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/sluice-dev/sluice/governor"
)

// The cached part of a prompt, as OpenAI and Groq report it, reaches the
// governor, which prices it at the cached price; the walk over an answer
// reads it as encoding/json does.
func TestUsageCachedTokens(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		body string
		want governor.Cost
	}{
		{`{"choices":[],"usage":{"prompt_tokens":1000,"completion_tokens":20,"total_tokens":1020,"prompt_tokens_details":{"cached_tokens":400}}}`,
			governor.Cost{Input: 1000, Output: 20, Cached: 400}},
		{`{"choices":[],"usage":{"prompt_tokens":1000,"completion_tokens":20,"prompt_tokens_details":null}}`,
			governor.Cost{Input: 1000, Output: 20}},
		{`{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":99,"audio_tokens":0}}}`,
			governor.Cost{Input: 10, Output: 2, Cached: 10}}, // never more than the prompt
		{`{"choices":[],"usage":{"prompt_tokens":10,"PROMPT_TOKENS_DETAILS":{"Cached_Tokens":3}}}`,
			governor.Cost{Input: 10, Cached: 3}},
	} {
		_, u, err := readAnswer([]byte(tc.body))
		if err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		var std struct{ Usage *Usage }
		if err := json.Unmarshal([]byte(tc.body), &std); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(u, std.Usage) {
			t.Errorf("%s: walked %+v, encoding/json %+v", tc.body, u, std.Usage)
		}
		if got := u.Governor(); got != tc.want {
			t.Errorf("%s: governor cost %+v, want %+v", tc.body, got, tc.want)
		}
	}
	// A count that is not a whole number is left to encoding/json, which says so.
	if _, _, err := readAnswer([]byte(`{"usage":{"prompt_tokens":1,"prompt_tokens_details":{"cached_tokens":"x"}}}`)); err == nil {
		t.Fatal("a cached_tokens that is a string was read without an error")
	}
}
