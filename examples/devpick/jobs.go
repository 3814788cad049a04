package devpick

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/sluice-dev/sluice/jobs"
	"github.com/sluice-dev/sluice/llm"
)

// The jobs' names: the backfills' IDs and their governor flows, as GET
// /v1/flows and the dashboard show them.
const (
	Analysis = "analysis"
	Summary  = "summary"
	Title    = "title"
)

// Limits are the limits of DevPick's key in the seed: Groq's free tier for
// the model (RPM 30, RPD 1,000, TPM 8,000, TPD 200,000) and the
// organisation's output tokens per minute (OTPM 1,000), in the form
// governor.Limits.UnmarshalText and `sluice sim-provider --limits` read.
const Limits = "rpm=30,rpd=1000,tpm=8000,tpd=200000,otpm=1000"

// Job is one of the three LLM jobs, with the numbers of the seed's cost
// estimate.
type Job struct {
	Name string
	// Label is how the seed's log names the job ("English title backfill").
	Label string
	// Column is the output column of Table (sluice's; the naive
	// scheduler's is Column + "_naive").
	Column string
	// ItemMaxTokens is the max_tokens each item of a batch adds to a
	// request, and the longest output (in tokens) its saver accepts.
	ItemMaxTokens int
	// MaxBatch is the most items one of sluice's calls carries; the
	// governor sizes each batch to fit every limit, up to it.
	MaxBatch int
	// English: the saver refuses an output with Japanese (or any CJK)
	// characters. The analysis is for the Japanese site: any language.
	English bool
	// Priority is the job's governor flow priority (new articles first).
	Priority int

	prompt   string // the system message of every request
	withBody bool   // the item is the whole article, not one field
	pending  string // the condition an article needs the job on, with %[1]s the columns' suffix
}

// Jobs are the three jobs, in the order the seed's scheduler runs them.
var Jobs = []Job{
	{
		Name: Analysis, Label: "Article analysis", Column: "analysis",
		ItemMaxTokens: 360, MaxBatch: 5, Priority: 1, withBody: true,
		pending: "analysis%[1]s IS NULL",
		prompt: "You analyse new articles for DevPick, a curated news site for software developers. " +
			"For each article below give: its main topics as three to five tags, the readers it is for " +
			"(beginners, practitioners, specialists), what a reader learns from it, whether it reports " +
			"first-hand experience or restates other sources, and a one-line verdict on whether it deserves " +
			"a place on the front page. Keep each analysis under two hundred and fifty words. " + batchRule,
	},
	{
		Name: Summary, Label: "English summary backfill", Column: "summary_en",
		ItemMaxTokens: 260, MaxBatch: 5, English: true,
		pending: "summary_en%[1]s IS NULL",
		prompt: "Translate each Japanese summary and its key points below into natural English for the " +
			"English edition of a developer news site. Keep product names as they are, keep the key points " +
			"as short sentences, and write at most one hundred and fifty words per article. " + batchRule,
	},
	{
		Name: Title, Label: "English title backfill", Column: "title_en",
		ItemMaxTokens: 60, MaxBatch: 10, English: true,
		pending: "title_en%[1]s IS NULL AND summary_en%[1]s IS NOT NULL",
		prompt: "Translate each Japanese article title below into a natural English headline for the English " +
			"edition of a developer news site. Keep product and version names exactly as written, use " +
			"headline capitalisation, drop decorative brackets such as 【2026年版】 but keep what they say " +
			"when it matters (a year, part one or part two), do not add words that are not in the original, " +
			"and never answer in Japanese. Each headline is one line of at most fifteen words. " + batchRule,
	},
}

// batchRule is how every prompt asks for one answer per item.
const batchRule = "Answer with one block per article, in the order given, each starting on a new line with the " +
	"article's number in square brackets, as [1], [2], and nothing else."

// eligible is the SQL condition an article needs the job on, for the
// pipeline whose columns end in suffix.
func (j Job) eligible(suffix string) string { return fmt.Sprintf(j.pending, suffix) }

// JobByName returns the job named name.
func JobByName(name string) (Job, bool) {
	for _, j := range Jobs {
		if j.Name == name {
			return j, true
		}
	}
	return Job{}, false
}

// request is the call for a batch of articles. maxTokens is false for the
// seed's own scheduler, whose requests set none.
func (j Job) request(model string, items []Article, maxTokens bool) *llm.ChatRequest {
	var b strings.Builder
	for i, a := range items {
		if i > 0 {
			b.WriteString("\n\n")
		}
		fmt.Fprintf(&b, "[%d] (%s) ", i+1, a.ID)
		switch j.Name {
		case Analysis:
			b.WriteString(a.TitleJA + "\n" + a.BodyJA)
		case Summary:
			b.WriteString(a.SummaryJA)
		default:
			b.WriteString(a.TitleJA)
		}
	}
	req := &llm.ChatRequest{
		Model: model,
		Messages: []llm.Message{
			{Role: "system", Content: j.prompt},
			{Role: "user", Content: b.String()},
		},
	}
	if maxTokens {
		req.MaxTokens = j.ItemMaxTokens * len(items)
	}
	return req
}

// marker is the start of an item's block in an answer: [3], 3. 3) or 3:
// at the start of a line, and the article's key in parentheses if the
// model repeats it.
var marker = regexp.MustCompile(`(?m)^[ \t]*(?:\[(\d{1,3})\]|(\d{1,3})[.):])[ \t]*(?:\(a\d+\)[ \t]*)?`)

// split divides a batch's answer into n outputs, one per item in order.
// A batch of one is the whole answer. An answer with exactly the markers
// [1] to [n], once each and in order, is cut at them. Otherwise, unless
// strict, its words are shared out in order, evenly: the answer of a model
// that ran the blocks together, and what the provider simulator gives
// (generated English words, no markers). With strict, such an answer gives
// every item an empty output, which its saver rejects.
func split(answer string, n int, strict bool) []string {
	out := make([]string, n)
	if n <= 0 {
		return out
	}
	if n == 1 {
		out[0] = stripMarker(answer)
		return out
	}
	if locs := marker.FindAllStringSubmatchIndex(answer, -1); len(locs) == n {
		ok := true
		for i, loc := range locs {
			num := submatch(answer, loc, 1)
			if num == "" {
				num = submatch(answer, loc, 2)
			}
			if k, err := strconv.Atoi(num); err != nil || k != i+1 {
				ok = false
				break
			}
		}
		if ok && strings.TrimSpace(answer[:locs[0][0]]) == "" {
			for i, loc := range locs {
				end := len(answer)
				if i+1 < n {
					end = locs[i+1][0]
				}
				out[i] = strings.TrimSpace(answer[loc[1]:end])
			}
			return out
		}
	}
	if strict {
		return out
	}
	words := strings.Fields(answer)
	for i := range n {
		out[i] = strings.Join(words[i*len(words)/n:(i+1)*len(words)/n], " ")
	}
	return out
}

func submatch(s string, loc []int, g int) string {
	if loc[2*g] < 0 {
		return ""
	}
	return s[loc[2*g]:loc[2*g+1]]
}

// stripMarker removes a leading [1] from a batch of one's answer.
func stripMarker(s string) string {
	if loc := marker.FindStringIndex(s); loc != nil && strings.TrimSpace(s[:loc[0]]) == "" {
		s = s[loc[1]:]
	}
	return strings.TrimSpace(s)
}

// The reasons a saver refuses an output.
const (
	ReasonEmpty      = "empty"
	ReasonNotEnglish = "not English"
	ReasonTooLong    = "too long"
)

// Check returns why output is refused for job j ("" when it is accepted):
// empty, not English (for the English jobs: any Han, kana, Hangul or
// full-width character, or no Latin letter at all), or too long (more than
// ItemMaxTokens tokens of model's encoding: no more than the item's share of
// the request's max_tokens).
func (j Job) Check(model, output string) string {
	output = strings.TrimSpace(output)
	if output == "" {
		return ReasonEmpty
	}
	if j.English && !english(output) {
		return ReasonNotEnglish
	}
	// Counted as it stood in the answer, after a space: a share cut out of
	// a batch's answer does not cost a token more for starting a text.
	if llm.CountTokens(model, " "+output) > j.ItemMaxTokens {
		return ReasonTooLong
	}
	return ""
}

func english(s string) bool { return jobs.English(s) }
