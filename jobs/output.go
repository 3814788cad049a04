package jobs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/llm"
)

// SavesTable is the table sluice keeps in the team's database when a
// job's output statement runs there rather than in sluice's own: each
// item's key is written in the transaction that saves its output, so a
// batch saved just before a crash is not saved again.
const SavesTable = "sluice_job_saves"

const savesSchema = `CREATE TABLE IF NOT EXISTS ` + SavesTable + ` (
    job        TEXT NOT NULL,
    item_key   TEXT NOT NULL,
    saved_at   TEXT NOT NULL,
    PRIMARY KEY (job, item_key)
)`

// markSaved records an item's key in SavesTable, unless it is there.
const markSaved = `INSERT INTO ` + SavesTable + ` (job, item_key, saved_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`

// savedKeys lists which of keys j has saved on db, by SavesTable.
func (j *job) savedKeys(ctx context.Context, db *sql.DB, keys []string) (map[string]bool, error) {
	const query = `SELECT item_key FROM ` + SavesTable + ` WHERE job = $1 AND item_key IN `
	out := map[string]bool{}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		marks := make([]string, n)
		args := []any{j.Name}
		for i := range n {
			marks[i] = fmt.Sprintf("$%d", i+2)
			args = append(args, keys[i])
		}
		rows, err := db.QueryContext(ctx, query+`(`+strings.Join(marks, ", ")+`)`, args...)
		if err != nil {
			return nil, fmt.Errorf("the items saved already: %w", err)
		}
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				rows.Close()
				return nil, err
			}
			out[k] = true
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, err
		}
		keys = keys[n:]
	}
	return out, nil
}

// saved is one item's output as the output takes it.
type saved struct {
	Job         string `json:"job"`
	Key         string `json:"key"`
	Output      string `json:"output"`
	Model       string `json:"model"`
	Tokens      int    `json:"tokens"`
	ProcessedAt string `json:"processed_at"`
	// delivery names the delivery for SavesTable and the Idempotency-Key:
	// the item's key, or for an event's job the event's ID.
	delivery string
}

func (j *job) savedOf(key, output, model string, at time.Time) saved {
	output = strings.TrimSpace(output)
	return saved{Job: j.Name, Key: key, Output: output, Model: model, Tokens: llm.CountTokens(model, output),
		ProcessedAt: at.UTC().Format("2006-01-02T15:04:05.000Z07:00"), delivery: key}
}

// args are the output statement's parameters for s, in order.
func (j *job) args(s saved, at time.Time) []any {
	out := make([]any, len(j.outParams))
	for i, p := range j.outParams {
		switch p {
		case "key":
			out[i] = s.Key
		case "output":
			out[i] = s.Output
		case "model":
			out[i] = s.Model
		case "tokens":
			out[i] = s.Tokens
		case "processed_at":
			out[i] = s.ProcessedAt
		case "processed_at_ms":
			out[i] = at.UnixMilli()
		case "job":
			out[i] = s.Job
		}
	}
	return out
}

// execer is a transaction of either kind: sluice's (sluice.Tx) or one on
// the team's database.
type execer func(ctx context.Context, q string, args ...any) error

// saveIn runs the output statement for s in tx.
func (j *job) saveIn(ctx context.Context, exec execer, s saved, at time.Time) error {
	if err := exec(ctx, j.outSQL, j.args(s, at)...); err != nil {
		return fmt.Errorf("output statement of item %s: %w", s.Key, err)
	}
	return nil
}

// deliverSQL saves the accepted outputs of a batch in one transaction on
// the team's database db, each with its key in SavesTable: an item whose
// key is there already was saved by an earlier try of the same batch and
// is not saved again. refused holds, per item, why its output is refused
// ("" accepted); it is returned as the outcome.
func (j *job) deliverSQL(ctx context.Context, db *sql.DB, items []saved, refused []string, at time.Time) ([]string, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("begin the output's transaction: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	for i, s := range items {
		if refused[i] != "" {
			continue
		}
		res, err := tx.ExecContext(ctx, markSaved, j.Name, s.delivery, s.ProcessedAt)
		if err != nil {
			return nil, fmt.Errorf("record item %s in %s: %w", s.Key, SavesTable, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return nil, err
		} else if n == 0 {
			continue // saved by an earlier try of this batch
		}
		if err := j.saveIn(ctx, func(ctx context.Context, q string, args ...any) error {
			_, err := tx.ExecContext(ctx, q, args...)
			return err
		}, s, at); err != nil {
			return nil, err
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("commit the output's transaction: %w", err)
	}
	return refused, nil
}

// IdempotencyKey is the Idempotency-Key header of every delivery of item
// key of job (for a job run per event, of the event's ID): the same on
// every try.
func IdempotencyKey(job, key string) string {
	h := sha256.Sum256([]byte(job + "\x00" + key))
	return job + "-" + hex.EncodeToString(h[:16])
}

// HTTP delivery's retries: each item is posted up to postTries times, the
// pause doubling from postPause up to maxPostPause (or the endpoint's
// Retry-After, at most maxPostPause), before the step fails and is retried
// as steps are.
const (
	postTries    = 6
	postPause    = 200 * time.Millisecond
	maxPostPause = 10 * time.Second
	// maxAnswerBytes is what is read of an endpoint's answer.
	maxAnswerBytes = 64 << 10
)

// redactedURL is u without a password it holds, to name it in errors,
// which runs and logs keep.
func redactedURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "the output's URL"
	}
	return p.Redacted()
}

// errRefused is an endpoint's answer that no retry changes (a 4xx but 408,
// 409, 425 and 429): the item's output is refused, naming the status.
type errRefused struct{ code int }

func (e errRefused) Error() string { return fmt.Sprintf("the endpoint refused it: HTTP %d", e.code) }

// deliverHTTP posts each accepted output of a batch to the job's URL, at
// least once, with its IdempotencyKey.
func (j *job) deliverHTTP(ctx context.Context, client *http.Client, items []saved, refused []string) ([]string, error) {
	out := append([]string(nil), refused...)
	for i, s := range items {
		if refused[i] != "" {
			continue
		}
		err := j.post(ctx, client, s)
		var r errRefused
		switch {
		case errors.As(err, &r):
			out[i] = r.Error()
		case err != nil:
			return nil, fmt.Errorf("deliver item %s to %s: %w", s.Key, redactedURL(j.Output.URL), err)
		}
	}
	return out, nil
}

// post posts s until the endpoint takes it (2xx; 409, a conflict with a
// delivery it already has, too), refuses it for good, or postTries have
// failed.
func (j *job) post(ctx context.Context, client *http.Client, s saved) error {
	body, err := json.Marshal(s)
	if err != nil {
		return err
	}
	pause := postPause
	var last error
	for try := 1; try <= postTries; try++ {
		wait, err := j.postOnce(ctx, client, s, body)
		if err == nil {
			return nil
		}
		var r errRefused
		if errors.As(err, &r) {
			return err
		}
		last = err
		if try == postTries {
			break
		}
		if wait <= 0 {
			wait = pause/2 + rand.N(pause/2+1) // #nosec G404 -- spreading retries needs no secrecy
		}
		select {
		case <-time.After(min(wait, maxPostPause)):
		case <-ctx.Done():
			return ctx.Err()
		}
		pause = min(2*pause, maxPostPause)
	}
	return fmt.Errorf("%d tries: %w", postTries, last)
}

// postOnce makes one POST; on a failure worth retrying it returns the
// endpoint's Retry-After, if it gave one.
func (j *job) postOnce(ctx context.Context, client *http.Client, s saved, body []byte) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, j.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, j.Output.URL, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", IdempotencyKey(s.Job, s.delivery))
	if j.authToken != "" {
		req.Header.Set("Authorization", "Bearer "+j.authToken)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswerBytes))
	switch c := resp.StatusCode; {
	case c/100 == 2, c == http.StatusConflict:
		return 0, nil
	case c == http.StatusRequestTimeout, c == http.StatusTooEarly, c == http.StatusTooManyRequests, c >= 500:
		var wait time.Duration
		if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
			wait = time.Duration(min(secs, 3600)) * time.Second
		}
		return wait, fmt.Errorf("HTTP %d", c)
	default:
		return 0, errRefused{code: c}
	}
}
