package driver

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/sluice-dev/sluice/internal/store"
)

// StartJob implements store.Store.
func (b Backfills) StartJob(ctx context.Context, name string, at time.Time) error {
	op, err := named("start job", " ", "job name", name, store.MaxKeyBytes)
	if err != nil {
		return err
	}
	if err := checkTime("time", at); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if _, err := b.conn.Exec(ctx, b.sql["start_job"], name, at.UnixMilli()); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// Job implements store.Store.
func (b Backfills) Job(ctx context.Context, name string) (store.Job, error) {
	op, err := named("read job", " ", "job name", name, store.MaxKeyBytes)
	if err != nil {
		return store.Job{}, err
	}
	jobs, err := b.readJobs(ctx, b.sql["job"], name)
	if err != nil {
		return store.Job{}, fmt.Errorf("%s: %w", op, err)
	}
	if len(jobs) == 0 {
		return store.Job{}, fmt.Errorf("%s: %w", op, store.ErrNoJob)
	}
	return jobs[0], nil
}

// Jobs implements store.Store.
func (b Backfills) Jobs(ctx context.Context) ([]store.Job, error) {
	jobs, err := b.readJobs(ctx, b.sql["jobs"])
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	return jobs, nil
}

// readJobs returns the jobs q selects: the columns of name,
// monitoring_since, last_progress_at, last_run_at, last_status,
// consecutive_failures, last_error, pending, rejected, saved, parked,
// alert.
func (b Backfills) readJobs(ctx context.Context, q string, args ...any) ([]store.Job, error) {
	out := []store.Job{}
	err := b.conn.Query(ctx, q, args, func(r Row) error {
		var j store.Job
		var since int64
		var progress, run sql.NullInt64
		if err := r.Scan(&j.Name, &since, &progress, &run, &j.LastStatus, &j.ConsecutiveFailures, &j.LastError,
			&j.Pending, &j.Rejected, &j.Saved, &j.Parked, &j.Alert); err != nil {
			return err
		}
		j.MonitoringSince, j.LastProgressAt, j.LastRunAt = time.UnixMilli(since).UTC(), fromNull(progress), fromNull(run)
		out = append(out, j)
		return nil
	})
	return out, err
}

// RecordJobRun implements store.Store.
func (b Backfills) RecordJobRun(ctx context.Context, name string, at time.Time, failure string) error {
	op, err := named("record run of job", " ", "job name", name, store.MaxKeyBytes)
	if err != nil {
		return err
	}
	if err := checkTime("time", at); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	status := "ok"
	if failure != "" {
		status = "failed"
	}
	if _, err := b.conn.Exec(ctx, b.sql["record_job_run"], name, at.UnixMilli(), status, text(failure, store.MaxReasonBytes)); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// SetJobAlert implements store.Store.
func (b Backfills) SetJobAlert(ctx context.Context, name, from, to string) (bool, error) {
	op, err := named("set alert of job", " ", "job name", name, store.MaxKeyBytes)
	if err != nil {
		return false, err
	}
	for _, a := range []string{from, to} {
		if a == "" {
			continue // no alert
		}
		if err := checkName("alert", a, store.MaxKeyBytes); err != nil {
			return false, fmt.Errorf("%s: %w", op, err)
		}
	}
	set := false
	err = b.conn.Query(ctx, b.sql["set_job_alert"], []any{name, from, to}, func(Row) error {
		set = true
		return nil
	})
	if err == nil && !set {
		// Another alert than from, or no job at all?
		var jobs []store.Job
		if jobs, err = b.readJobs(ctx, b.sql["job"], name); err == nil && len(jobs) == 0 {
			err = store.ErrNoJob
		}
	}
	if err != nil {
		return false, fmt.Errorf("%s: %w", op, err)
	}
	return set, nil
}

// RecordBackfillRun implements store.Store.
func (b Backfills) RecordBackfillRun(ctx context.Context, r store.BackfillRun) error {
	op, err := named("record backfill run", " ", "run ID", r.RunID, store.MaxRunIDBytes)
	if err != nil {
		return err
	}
	rejected, err := checkRun(r)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	_, err = b.conn.Exec(ctx, b.sql["record_backfill_run"], r.RunID, r.Backfill, nullMillis(r.StartedAt), r.EndedAt.UnixMilli(),
		r.Selected, r.Retried, r.Saved, r.Parked, rejected, text(r.Stopped, store.MaxReasonBytes))
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// checkRun checks r and returns its Rejected as stored: a JSON object of
// reasons, cut, to counts.
func checkRun(r store.BackfillRun) (string, error) {
	if err := checkName("backfill name", r.Backfill, store.MaxKeyBytes); err != nil {
		return "", err
	}
	if err := checkTime("end", r.EndedAt); err != nil {
		return "", err
	}
	for _, f := range []struct {
		name string
		n    int
	}{{"Selected", r.Selected}, {"Retried", r.Retried}, {"Saved", r.Saved}, {"Parked", r.Parked}} {
		if f.n < 0 {
			return "", fmt.Errorf("%s %d is negative", f.name, f.n)
		}
	}
	rejected := make(map[string]int, len(r.Rejected))
	for reason, n := range r.Rejected {
		if n < 0 {
			return "", fmt.Errorf("count %d of Rejected[%s] is negative", n, quote(reason))
		}
		k := text(reason, store.MaxReasonBytes)
		rejected[k] += min(n, math.MaxInt-rejected[k]) // saturates
	}
	b, err := json.Marshal(rejected)
	return string(b), err
}

// BackfillRuns implements store.Store.
func (b Backfills) BackfillRuns(ctx context.Context, backfill string, limit int) ([]store.BackfillRun, error) {
	op := "list backfill runs"
	if backfill != "" {
		if err := checkName("backfill name", backfill, store.MaxKeyBytes); err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		op += " of " + backfill
	}
	if limit < 1 {
		return nil, fmt.Errorf("%s: limit %d is under 1", op, limit)
	}
	var out []store.BackfillRun
	err := b.conn.Query(ctx, b.sql["backfill_runs"], []any{backfill, limit}, func(row Row) error {
		var r store.BackfillRun
		var started sql.NullInt64
		var ended int64
		var rejected string
		if err := row.Scan(&r.RunID, &r.Backfill, &started, &ended, &r.Selected, &r.Retried, &r.Saved, &r.Parked, &rejected, &r.Stopped); err != nil {
			return err
		}
		r.StartedAt, r.EndedAt = fromNull(started), time.UnixMilli(ended).UTC()
		if err := json.Unmarshal([]byte(rejected), &r.Rejected); err != nil {
			return fmt.Errorf("run %s: rejected: %w", r.RunID, err)
		}
		if len(r.Rejected) == 0 {
			r.Rejected = nil
		}
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return out, nil
}
