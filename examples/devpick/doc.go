// Package devpick is DevPick's English backfill on sluice, with DevPick's
// own scheduler beside it for comparison.
//
// # The story
//
// DevPick, a curated news site for software developers, opened an English
// edition and runs three LLM jobs on one Groq free-tier key (30 requests
// and 8,000 tokens a minute, 1,000 requests and 200,000 tokens a day, 1,000
// output tokens a minute for the organisation): the analysis of new
// articles (about 1,050 tokens each, about 100 a day), an English-summary
// backfill of old articles (about 550 tokens each) and an English-title
// backfill (about 80 tokens each plus a 150-token instruction) of articles
// whose English summary is done. A job every 30 minutes ran the three one
// after another; any 429 wrote one shared "rate limited until" time, and
// every job checked it first and did nothing while it had not passed. The
// summaries used up each minute's allowance and tripped it, and the
// titles, always run right after, found it set: 17 runs in a row without
// a title, 1,412 left, while the stall alarm — judged by the oldest pending
// item's age — was taken for a false alarm. Swapping the two jobs moved the
// starvation to the summaries. Then, with no max_tokens on any request,
// Groq expected up to 2,048 output tokens of a single call, more than the
// 1,000 a minute allowed, and refused it as "Request too large … output
// tokens per minute" with a 900 s retry-after: the shared backoff waited,
// and the same request was refused again.
//
// # On sluice
//
// Register adds the three jobs to an App as backfills (sluice.Backfill) on
// the app's own articles table (Table, in the app's SQLite file; OpenDB
// opens it as sluice does, Seed and Arrive fill it):
//
//   - analysis: a backfill over articles without an analysis, on a flow of
//     priority 1 (Flows, for sluice.Config.Flows). It is a backfill rather
//     than a function per new-article event because the SDK does more for a
//     backfill: it lists its own work from the table (Arrive only inserts a
//     row; nothing has to send an event, and nothing is lost if none is
//     sent), batches several articles per call sized by the governor to
//     every limit, saves each article exactly once in the transaction that
//     records it, counts, retries and parks rejected outputs, and is judged
//     by its progress like the other two (GET /v1/flows, /readyz, the
//     dashboard). AnalysisPoll bounds how long a new article waits to be
//     seen;
//   - summary: a backfill over articles without summary_en;
//   - title: a backfill over articles with summary_en and without
//     title_en, whoever saved the summary (the summaries DevPick had saved
//     before, SeedSummaries, included); with Config.TitleAfterSummary it
//     runs After the summary backfill instead, and an article becomes
//     eligible for its title the moment that backfill saves its summary.
//
// Their IDs and flows are analysis, summary and title. Every call goes
// through the key's quota governor, which admits it only when it fits
// every limit at once and shares the key between the flows by weight in
// tokens, so the light title calls are admitted between the heavy summary
// calls instead of after them, and a call waits its turn in line instead of
// tripping anybody's backoff. Every request sets max_tokens for its batch
// (Job.ItemMaxTokens per article), so the governor knows its cost and
// shrinks a batch that would not fit OTPM instead of sending it. Each
// answer is split into one output per article (marked blocks [1], [2] …;
// see Config.Strict for unmarked answers) and the saver refuses an output
// that is empty, not English (summary and title: any CJK character), or
// longer than the job's ItemMaxTokens, with that reason: the backfill
// retries the article later and parks it after MaxRejects refusals.
//
// # The seed's scheduler
//
// Naive runs the same three jobs on the same articles as DevPick did before
// its fixes: every period (30 minutes) the analysis, then the summaries (30
// a run, 5 a request, 10 s apart), then the titles (10 in one request); one
// shared rate_limited_until set to now + retry-after by any 429 and checked
// first by every job (aborted=rate_limit_backoff(…)); no max_tokens; calls
// straight to the provider with package llm's client. It writes the
// columns suffixed _naive of the same rows, so both pipelines can run side
// by side on one set of articles, and logs one line per job per run in the
// seed's format:
//
//	07:01:59 English summary backfill: selected=30 retried=0 saved=5 rejected={} aborted=rate_limited
//	07:01:59 English title backfill: aborted=rate_limit_backoff(2026-10-18T07:02:49)
//
// Its clock and period are injectable (NaiveConfig.Now, Sleep, Every), so
// it runs in compressed time; Progress reads each job's done and remaining
// articles for either pipeline.
package devpick
