package llm_test

import (
	"fmt"
	"net/http"

	"github.com/sluice-dev/sluice/llm"
)

// A proxy that echoes the Authorization header it received into an error:
// the error a Client returns has the key replaced and the terminal escape
// dropped. A Client does this itself; a program that reads a provider's
// answers some other way uses a Scrubber of its own.
func ExampleScrubber() {
	s := llm.NewScrubber("sk-live-0123456789")
	err := llm.OpenAI.Classify(http.StatusBadRequest, http.Header{},
		[]byte(`{"error":{"message":"bad header \u001b[31mBearer sk-live-0123456789","type":"invalid_request_error","code":"Bearer sk-live-0123456789"}}`))
	fmt.Println(s.Error(err))
	fmt.Println(s.String("X-Request-Id: req-sk-live-0123456789"))
	// Output:
	// llm: HTTP 400 (invalid_request_error Bearer [redacted]): bad header Bearer [redacted]
	// X-Request-Id: req-[redacted]
}
