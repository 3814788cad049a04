package llm

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// The split of countCl100k counts what the codec counts, on texts made of
// the characters its rules treat apart: letters of either case, digits,
// spaces, tabs, newlines, apostrophes and the contractions, punctuation.
func TestCountCl100kMatchesCodec(t *testing.T) {
	parts := []string{"a", "Z", "word", "Words", " ", "  ", "\t", "\n", "\n\n", " \n", "7", "12345", "'", "'s", "'S", "'re", "'LL", "'ve", "'m", "'d", "'t",
		".", ",", "!?", "(", ")", "-", "_", "\"", "/", "#", "...", " the", "1.", "x'y"}
	texts := []string{"", " ", "\n", "hello world", "The quick brown fox.\n2. jumps over\n", "   leading and trailing   ", "a\t\tb\n \n  c", "don't I'LL we're", "1234567 89"}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		var b strings.Builder
		for range r.IntN(12) + 1 {
			b.WriteString(parts[r.IntN(len(parts))])
		}
		texts = append(texts, b.String())
	}
	for _, text := range texts {
		want, err := cl100k().Count(text)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := countCl100k(text)
		if !ok || got != want {
			t.Fatalf("countCl100k(%q) = %d, %v; the codec counts %d", text, got, ok, want)
		}
	}
}

// Text the split does not handle is left to the codec.
func TestCountCl100kLeavesOtherText(t *testing.T) {
	for _, text := range []string{"café", "a\rb", "a\vb", "\x00", "日本語"} {
		if _, ok := countCl100k(text); ok {
			t.Errorf("countCl100k(%q) counted it", text)
		}
		want, _ := cl100k().Count(text)
		if got := CountTokens("gpt-4", text); got != want {
			t.Errorf("CountTokens(%q) = %d, want %d", text, got, want)
		}
	}
}
