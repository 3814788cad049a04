package governor_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/governor"
)

// A call that can never fit is refused before it is made, naming the limit.
func ExampleGovernor_Check() {
	g, _ := governor.New(governor.Config{Key: "groq", Limits: governor.Limits{governor.TPM: 8000, governor.OTPM: 1000}})
	err := g.Check(governor.Cost{Requests: 1, Input: 550, Output: 1252})
	var tl *governor.TooLargeError
	if errors.As(err, &tl) {
		fmt.Println(tl.Limit, tl.Need, tl.Max)
		fmt.Println(err)
	}
	// Output:
	// otpm 1252 1000
	// request can never fit: needs 1,252 output tokens, OTPM limit is 1,000; lower max_tokens: max_tokens ≤ 1,000 fits
}

// Two flows share a key by weight, in tokens; the explicit clock makes it
// reproducible.
func ExampleGovernor_Advance() {
	g, _ := governor.New(governor.Config{
		Limits: governor.Limits{governor.TPM: 6000},
		Flows:  []governor.FlowConfig{{Name: "summary", Weight: 2}, {Name: "title", Weight: 1}},
	})
	start := time.Date(2026, 10, 18, 0, 0, 0, 0, time.UTC)
	costs := map[string]governor.Cost{
		"summary": {Requests: 1, Input: 700, Output: 300},
		"title":   {Requests: 1, Input: 150, Output: 50},
	}
	tokens := map[string]int64{}
	lines := map[string][]*governor.Reservation{}
	for now := start; now.Before(start.Add(30 * time.Minute)); now = now.Add(time.Second) {
		// Both flows are backlogged: each keeps calls waiting.
		for flow, c := range costs {
			for len(lines[flow]) < 40 {
				r, _ := g.Reserve(now, flow, c)
				lines[flow] = append(lines[flow], r)
			}
		}
		g.Advance(now)
		for flow, line := range lines {
			for len(line) > 0 && line[0].Admitted() {
				tokens[flow] += line[0].Cost().Tokens()
				line = line[1:]
			}
			lines[flow] = line
		}
	}
	fmt.Printf("summary:title = %.1f\n", float64(tokens["summary"])/float64(tokens["title"]))
	// Output: summary:title = 2.0
}

// Limits are written the way providers' pages list them.
func ExampleLimits_UnmarshalText() {
	var ls governor.Limits
	err := ls.UnmarshalText([]byte("rpm=30,tpm=8000,tpd=200000,otpm=1000"))
	fmt.Println(ls, err)
	err = ls.UnmarshalText([]byte("tpm=8k"))
	fmt.Println(err)
	// Output:
	// rpm=30,tpm=8000,tpd=200000,otpm=1000 <nil>
	// limit tpm: value "8k" is not a positive whole number
}
