package gateway

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/llm"
)

// imagesBody is a chat request with n image parts given by URL.
func imagesBody(n int) string {
	var b strings.Builder
	b.WriteString(`{"model":"sim-model","max_tokens":50,"messages":[{"role":"user","content":[{"type":"text","text":"Describe each."}`)
	for i := range n {
		fmt.Fprintf(&b, `,{"type":"image_url","image_url":{"url":"https://img.example/%d.png","detail":"low"}}`, i)
	}
	b.WriteString(`]}]}`)
	return b.String()
}

// TestImagesArePriced: 20,000 image parts (1.7 MB) are priced at 85 tokens
// or more each, so a key with a TPM of 30,000 answers 413 at once, naming
// the limit and the tokens the request needs, and the provider never sees
// the request; one image goes through.
func TestImagesArePriced(t *testing.T) {
	t.Parallel()
	b := setup(t, forecast.ModelConfig{Profile: llm.OpenAI, Limits: limits("tpm=30000")}, Config{Limits: limits("tpm=30000")})

	resp, body := b.do(t, "POST", "/v1/chat/completions", imagesBody(1), nil)
	if resp == nil || resp.StatusCode != 200 {
		t.Fatalf("one image: %s", body)
	}
	big := imagesBody(20_000)
	if len(big) < 1_500_000 {
		t.Fatalf("the body is %d bytes", len(big))
	}
	resp, body = b.do(t, "POST", "/v1/chat/completions", big, nil)
	if resp == nil || resp.StatusCode != 413 {
		t.Fatalf("20,000 images were not refused as never fitting: %.300s", body)
	}
	err := llm.OpenAI.Classify(resp.StatusCode, resp.Header, body)
	tl, ok := errors.AsType[*llm.TooLargeError](err)
	if !ok || tl.Limit != governor.TPM {
		t.Fatalf("20,000 images: classified as %T %v", err, err)
	}
	if tl.Requested < 20_000*85 {
		t.Errorf("20,000 images priced at %d tokens, want at least %d: %s", tl.Requested, 20_000*85, body)
	}
	if st := b.model.Stats(); st.Requests != 1 {
		t.Errorf("the upstream was called %d times, want only for the one image", st.Requests)
	}
}
