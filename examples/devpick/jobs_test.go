package devpick

import (
	"context"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/internal/sim"
	"github.com/sluice-dev/sluice/llm"
)

// The savers refuse an answer in Japanese, one longer than the job's
// bound and an empty one, each with its reason; the analysis, which is for
// the Japanese site, takes Japanese.
func TestSaverRejects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	it := sluice.Item[Article]{Key: ArticleID(1), Data: Generate(1)}
	for _, c := range []struct {
		job, output, reason string
	}{
		{Title, "Go 1.26の新機能まとめ", ReasonNotEnglish},
		{Title, "What's New in Go 1.26 【2026】", ReasonNotEnglish},
		{Title, "ＧＯ　ＮＥＷＳ", ReasonNotEnglish},   // full-width Latin
		{Title, "1.26 2026", ReasonNotEnglish}, // no word at all
		{Summary, "An English summary. 要点は以下のとおりです。", ReasonNotEnglish},
		{Title, sim.Words(61, 1), ReasonTooLong},
		{Summary, sim.Words(261, 2), ReasonTooLong},
		{Analysis, sim.Words(361, 3), ReasonTooLong},
		{Summary, " \n\t", ReasonEmpty},
		{Analysis, "", ReasonEmpty},
	} {
		j, _ := JobByName(c.job)
		// A rejection never reaches the transaction: nil stands for it.
		err := j.saver("sim-model")(ctx, nil, it, c.output)
		if want := sluice.Reject(c.reason); err == nil || err.Error() != want.Error() {
			t.Errorf("%s saver on %q: %v, want %v", c.job, c.output, err, want)
		}
	}
	analysis, _ := JobByName(Analysis)
	if r := analysis.Check("sim-model", "カテゴリ: Go / 対象読者: 実務者"); r != "" {
		t.Errorf("the analysis refused a Japanese analysis: %s", r)
	}
	title, _ := JobByName(Title)
	if r := title.Check("sim-model", "What's New in Go 1.26: A Practical Guide (Part 2)"); r != "" {
		t.Errorf("the title saver refused an English headline: %s", r)
	}
}

// The provider simulator answers a request with between half its
// max_tokens and all of them, as unmarked English words: for every batch
// size the pipeline sends, every item's share of such an answer is
// accepted.
func TestSimulatorAnswersAccepted(t *testing.T) {
	t.Parallel()
	for _, j := range Jobs {
		for n := 1; n <= j.MaxBatch; n++ {
			max := int64(n * j.ItemMaxTokens)
			for _, total := range []int64{(max + 1) / 2, (3*max + 3) / 4, max} {
				for seed := uint64(0); seed < 5; seed++ {
					outs := split(sim.Words(total, seed), n, false)
					for i, o := range outs {
						if r := j.Check("sim-model", o); r != "" {
							t.Fatalf("%s: batch of %d, answer of %d tokens: item %d refused (%s): %q", j.Name, n, total, i, r, o)
						}
					}
					if got := strings.Join(outs, " "); got != sim.Words(total, seed) {
						t.Fatalf("%s: the split of a batch of %d lost or reordered words", j.Name, n)
					}
				}
			}
		}
	}
}

func TestSplit(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		answer string
		n      int
		strict bool
		want   []string
	}{
		{"markers", "[1] First headline\n[2] Second one\n[3] Third", 3, true, []string{"First headline", "Second one", "Third"}},
		{"markers with blocks and echoed keys", "[1] (a000000007) One.\nMore of one.\n\n[2] Two.", 2, true, []string{"One.\nMore of one.", "Two."}},
		{"numbered lines", "1. Alpha\n2) Beta\n3: Gamma", 3, true, []string{"Alpha", "Beta", "Gamma"}},
		{"one item", "[1] Only this", 1, true, []string{"Only this"}},
		{"one item unmarked", "  Just text  ", 1, true, []string{"Just text"}},
		{"markers out of order, strict", "[2] B\n[1] A", 2, true, []string{"", ""}},
		{"markers missing, strict", "[1] A and B together", 2, true, []string{"", ""}},
		{"preamble, strict", "Here you are:\n[1] A\n[2] B", 2, true, []string{"", ""}},
		{"unmarked words shared evenly", "a b c d e f g", 3, false, []string{"a b", "c d", "e f g"}},
		{"fewer words than items", "a", 2, false, []string{"", "a"}},
	} {
		got := split(c.answer, c.n, c.strict)
		if strings.Join(got, "|") != strings.Join(c.want, "|") || len(got) != c.n {
			t.Errorf("%s: split(%q, %d) = %q, want %q", c.name, c.answer, c.n, got, c.want)
		}
	}
}

// The requests carry the seed's token shapes: the instruction and each
// item about the sizes of DevPick's cost estimate.
func TestRequestShapes(t *testing.T) {
	t.Parallel()
	est, err := llm.NewEstimator(llm.EstimatorConfig{})
	if err != nil {
		t.Fatal(err)
	}
	// Input tokens of the prompt and of one item, as the seed estimates them.
	want := map[string][2]int64{Analysis: {150, 600}, Summary: {100, 300}, Title: {150, 40}}
	items := make([]Article, 20)
	for i := range items {
		items[i] = Generate(int64(i + 1))
	}
	for _, j := range Jobs {
		one := est.PromptTokens(j.request("sim-model", items[:1], true))
		all := est.PromptTokens(j.request("sim-model", items, true))
		perItem := (all - one) / int64(len(items)-1)
		prompt := one - perItem
		w := want[j.Name]
		if perItem < w[1]*3/4 || perItem > w[1]*5/4 {
			t.Errorf("%s: %d input tokens per item, want about %d", j.Name, perItem, w[1])
		}
		if prompt < w[0]/2 || prompt > w[0]*3/2 {
			t.Errorf("%s: %d tokens of instructions, want about %d", j.Name, prompt, w[0])
		}
	}
}
