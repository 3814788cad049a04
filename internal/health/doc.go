// Package health judges long jobs (backfills) by their progress, never by
// the age of what they have left, and says so over HTTP, to a webhook and
// to readiness checks.
//
// # Judging
//
// Evaluate is pure: a job's record (store.Job), its stall threshold, what
// its governor flow waits for (Quota), a Sampler of its processed count
// and the time give its View — a State among progressing,
// waiting-for-quota, failing, stalled, idle and done, with the figures it
// was judged by. Evaluate documents which state wins when several apply.
//
// A job is stalled when eligible items remain and none was processed for
// the threshold since the last progress, or since monitoring began if it
// never progressed. A backfill that starts on years of old items is
// progressing as long as it processes some; one that is waiting for quota,
// or failing, for longer than the threshold is stalled, and its view still
// names the limit and the last error.
//
// # Monitoring
//
// A Monitor polls a Source (the store) every interval, keeps a Sampler per
// job, judges every job, and on each change into and out of stalled logs a
// line and POSTs an Alert to a webhook. Several processes may monitor the
// same jobs: each change is recorded in the job's record with a
// compare-and-set (Source.SetJobAlert) first, and only the process that
// made it alerts. Ready reports stalled jobs, or a store it could not
// read, for /readyz.
//
// # One schema
//
// Flow is the shape of GET /v1/flows for the jobs of the event and run API
// and for the gateway's flows alike.
package health
