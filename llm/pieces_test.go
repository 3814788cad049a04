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

// Many goroutines count at once, each text with words the others also
// count and words of its own: every count is the codec's (and, under the
// race detector, the remembered counts are shared safely).
func TestCountCl100kConcurrently(t *testing.T) {
	texts := make([]string, 64)
	for i := range texts {
		texts[i] = strings.Repeat("shared words, then ", 3) + "own" + strings.Repeat("x", i) + " tail " + strings.Repeat("y", i%7)
	}
	want := make([]int, len(texts))
	for i, text := range texts {
		n, err := cl100k().Count(text)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = n
	}
	errs := make(chan string, len(texts)*8)
	done := make(chan struct{})
	for g := range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range texts {
				j := (i + g*7) % len(texts)
				if got, ok := countCl100k(texts[j]); !ok || got != want[j] {
					errs <- texts[j]
				}
			}
		}()
	}
	for range 8 {
		<-done
	}
	close(errs)
	for text := range errs {
		t.Errorf("countCl100k(%q) did not count what the codec counts", text)
	}
}
