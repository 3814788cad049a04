// Package sluice runs LLM pipelines and long backfills durably under a
// provider's rate limits.
//
// # Functions and steps
//
// An App holds functions. A function runs when its trigger fires — a named
// event sent with App.Send, or a cron schedule — and its body is made of
// steps. How a function is configured and how a run ended are described by
// the types of package run (run.Function, run.Summary, run.StepError):
//
//	app, _ := sluice.New(ctx, sluice.Config{DatabaseURL: "sluice.db"})
//	sluice.Register(app, run.Function{
//		ID:          "summarize-doc",
//		Event:       "doc/uploaded",
//		Retries:     5,
//		Idempotency: "event.data.documentId",
//	}, func(ctx *sluice.Context, ev sluice.Event[Doc]) (string, error) {
//		text, err := sluice.Step(ctx, "fetch", func(context.Context) (string, error) { return load(ev.Data.ID) })
//		...
//	})
//	app.Start(ctx)
//	sent, _ := app.Send(ctx, "doc/uploaded", "upload-1", Doc{ID: "d1"})
//	summary, err := sluice.Result[string](ctx, app, sent[0].RunID)
//
// A step's result is recorded when it succeeds; if the process dies, the run
// resumes where it stopped and finished steps are not run again — a
// finished LLM call is never billed twice. Durable execution comes from DBOS
// Transact (SQLite by default, PostgreSQL by URL).
//
// # Retries by class
//
// A failing step is retried by what its error means: a rate limit waits the
// retry-after the provider gave, as a durable sleep; a request too large for
// a limit, an exhausted quota, other 4xx and errors wrapped with
// NonRetriable fail at once; 5xx, timeouts and resets back off
// exponentially with jitter. RetryAfter lets a step say how long to wait.
// Each attempt is recorded, so a run shows how many each step took.
//
// # Governed LLM calls
//
// LLM makes a chat call inside one durable step: it reserves the call's
// cost (requests, input and output tokens) with the provider key's governor,
// waits for room, calls, and settles with the usage the provider reports. A
// long wait for quota becomes a durable sleep. Every function draws on the
// key through a flow, so several functions share one key fairly.
//
// The governor's charges are kept in the app's database under the
// provider's name, so an app started after a restart knows what the key
// spent in the last day and does not spend the day's budget twice. Limits a
// provider reveals only in its errors (Groq's OTPM in "request too large",
// RPM and TPD in a 429) become the governor's: the next call that cannot
// fit is refused before it is sent.
//
// # Flow control
//
// Per function: Concurrency (globally or per process, optionally per key),
// Throttle (start at most N runs per period; the excess waits), RateLimit
// (accept at most N events per period; the excess is dropped and recorded),
// Priority (higher starts sooner), Timeout, and an Idempotency key read
// from the event.
package sluice
