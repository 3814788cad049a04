// Package engine runs sluice functions durably on DBOS Transact: a function
// is a DBOS workflow, a step is a DBOS step (a finished step is never re-run
// after a crash), each function has its own DBOS queue for concurrency,
// throttling and priority, cron triggers are DBOS schedules, the run ID is the
// idempotency key, and DBOS's recovery resumes runs after a crash. The engine
// adds what DBOS does not have: event triggers, retries by error class with
// durable waits between attempts, a rate limit that drops excess events, and
// governed LLM steps that draw on a provider key's quota.
//
// # Retries
//
// Each attempt of a step is its own DBOS step, and the wait before the next
// attempt is a durable DBOS sleep, so a retry-after of fifteen minutes
// survives a restart and per-step attempt counts are visible in the run. The
// error of a failed attempt is recorded as a *run.StepError, whose class survives
// replay: NonRetriable errors end the run at once, RetryAfter errors wait what
// they say, other errors back off exponentially with jitter.
package engine
