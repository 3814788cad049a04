package devpick

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-dev/sluice/llm"
)

// NaiveShape is how the seed's scheduler runs one job: it takes up to
// PerRun eligible articles, newest first, and sends them PerRequest at a
// time, each request Gap after the previous one was sent.
type NaiveShape struct {
	PerRun, PerRequest int
	Gap                time.Duration
}

// NaiveShapes are the seed's shapes before its fixes: the analysis 15
// articles 5 per request 10 s apart, the English summaries 30 five at a
// time 10 s apart, the English titles 10 in one request.
var NaiveShapes = map[string]NaiveShape{
	Analysis: {PerRun: 15, PerRequest: 5, Gap: 10 * time.Second},
	Summary:  {PerRun: 30, PerRequest: 5, Gap: 10 * time.Second},
	Title:    {PerRun: 10, PerRequest: 10, Gap: 10 * time.Second},
}

// NaiveConfig configures the seed's own scheduler.
type NaiveConfig struct {
	// DB holds Table (Seed, Arrive). Required. The scheduler writes the
	// _naive columns only.
	DB *sql.DB
	// BaseURL, APIKey and Profile reach the provider directly (Profile
	// default llm.Groq). No governor stands in between.
	BaseURL, APIKey string
	Profile         llm.Profile
	// Transport carries the requests (default http.DefaultTransport): a
	// test on a virtual clock gives one over an in-memory network.
	Transport http.RoundTripper
	// Model is the model every request names (default "sim-model").
	Model string
	// Every is the period of the scheduled job (default 30 min).
	Every time.Duration
	// Now is the clock (default time.Now) and Sleep waits d of its time
	// (default: a timer of d), so the scheduler runs in compressed time
	// when both run faster than the wall clock.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
	// Log receives one line per job per run, as the seed's log has them
	// (default: none).
	Log io.Writer
	// Order is the order the jobs run in each period (default Analysis,
	// Summary, Title; the seed's fix swapped the last two).
	Order []string
	// Shapes override NaiveShapes per job.
	Shapes map[string]NaiveShape
	// Strict: as Config.Strict.
	Strict bool
}

// NaiveStats is what one job of the naive scheduler did since it started.
type NaiveStats struct {
	Runs        int // periods in which the job ran (did not back off)
	Backoffs    int // periods it aborted with rate_limit_backoff, without a call
	RateLimited int // runs a 429 aborted (and set the shared rate_limited_until)
	Failed      int // runs another error aborted
	Requests    int // requests it sent
	Selected    int
	Retried     int // selected articles whose output had been rejected before
	Saved       int
	// Rejected counts outputs the saver refused, by reason.
	Rejected map[string]int
	// Refused counts the provider's refusals by status, kind and limit:
	// "429 too large (otpm)" for a request that can never fit, "429 rate
	// limited (tpm)" for one that did not fit at that moment.
	Refused map[string]int
	// Done and Remaining are the job's counts in Table after its last run
	// (Progress of NaivePipeline).
	Done, Remaining int
	LastError       string
	LastLine        string // the job's last log line, without the time
}

// Naive is DevPick's scheduler as the seed describes it, before its fixes:
// every period one scheduled job runs the analysis, the English summaries
// and the English titles one after another; one shared rate_limited_until
// is set to now + retry-after by any 429, and every job checks it first and
// does nothing while it has not passed; no request sets max_tokens; calls
// go to the provider directly with llm's client.
type Naive struct {
	cfg    NaiveConfig
	client *llm.Client
	order  []Job

	mu      sync.Mutex
	until   time.Time // the shared rate_limited_until
	stats   map[string]*NaiveStats
	rejects map[string]map[string]int // job → article → outputs rejected
}

// NewNaive checks cfg and returns the scheduler.
func NewNaive(cfg NaiveConfig) (*Naive, error) {
	if cfg.DB == nil {
		return nil, errors.New("devpick: NaiveConfig.DB is required")
	}
	cfg.Profile = cmp.Or(cfg.Profile, llm.Groq)
	cfg.Model = cmp.Or(cfg.Model, "sim-model")
	cfg.Every = cmp.Or(cfg.Every, 30*time.Minute)
	if cfg.Every < 0 {
		return nil, fmt.Errorf("devpick: NaiveConfig.Every %s is negative", cfg.Every)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Transport == nil {
		cfg.Transport = http.DefaultTransport
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleep
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if cfg.Order == nil {
		cfg.Order = []string{Analysis, Summary, Title}
	}
	shapes := maps.Clone(NaiveShapes)
	maps.Copy(shapes, cfg.Shapes)
	cfg.Shapes = shapes
	n := &Naive{cfg: cfg, stats: map[string]*NaiveStats{}, rejects: map[string]map[string]int{}}
	for _, name := range cfg.Order {
		j, ok := JobByName(name)
		if !ok {
			return nil, fmt.Errorf("devpick: NaiveConfig.Order: unknown job %q", name)
		}
		if s := shapes[name]; s.PerRun < 0 || s.PerRequest < 1 || s.Gap < 0 {
			return nil, fmt.Errorf("devpick: naive shape of %s: %+v: want PerRun ≥ 0, PerRequest ≥ 1, Gap ≥ 0", name, s)
		}
		n.order = append(n.order, j)
		n.stats[name] = &NaiveStats{Rejected: map[string]int{}, Refused: map[string]int{}}
		n.rejects[name] = map[string]int{}
	}
	// The client reads the retry-after of every 429 for the shared
	// rate_limited_until, including Groq's 900 s on a request too large,
	// which llm's error for it does not carry (waiting never helps it).
	client, err := llm.NewClient(llm.Config{
		BaseURL: cfg.BaseURL, APIKey: cfg.APIKey, Profile: cfg.Profile, Now: cfg.Now,
		HTTPClient: &http.Client{Transport: retryAfterRecorder{cfg.Transport}},
	})
	if err != nil {
		return nil, fmt.Errorf("devpick: %w", err)
	}
	n.client = client
	if err := CreateSchema(context.Background(), cfg.DB); err != nil {
		return nil, err
	}
	return n, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run runs the scheduled job now and then every Every (of Now's time, from
// the start of the last) until ctx ends, which it returns.
func (n *Naive) Run(ctx context.Context) error {
	for {
		start := n.cfg.Now()
		if err := n.Tick(ctx); err != nil {
			return err
		}
		if err := n.cfg.Sleep(ctx, start.Add(n.cfg.Every).Sub(n.cfg.Now())); err != nil {
			return err
		}
	}
}

// Tick runs the scheduled job once: each job in Order, one after another.
// A job's failure (a 429, another error of the provider, an output
// refused) is its log line, not Tick's error; Tick returns an error only
// when ctx ends or the database fails.
func (n *Naive) Tick(ctx context.Context) error {
	for _, j := range n.order {
		if err := n.runJob(ctx, j); err != nil {
			return err
		}
	}
	return nil
}

// RateLimitedUntil returns the shared rate_limited_until.
func (n *Naive) RateLimitedUntil() time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.until
}

// Stats returns each job's figures, by job name.
func (n *Naive) Stats() map[string]NaiveStats {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[string]NaiveStats, len(n.stats))
	for name, s := range n.stats {
		c := *s
		c.Rejected, c.Refused = maps.Clone(s.Rejected), maps.Clone(s.Refused)
		out[name] = c
	}
	return out
}

// runJob is one job's run within a period.
func (n *Naive) runJob(ctx context.Context, j Job) error {
	now := n.cfg.Now()
	n.mu.Lock()
	until := n.until
	st := n.stats[j.Name]
	n.mu.Unlock()
	if now.Before(until) {
		n.mu.Lock()
		st.Backoffs++
		n.mu.Unlock()
		n.logf(j, "aborted=rate_limit_backoff(%s)", until.UTC().Format("2006-01-02T15:04:05"))
		return n.count(ctx, j)
	}
	shape := n.cfg.Shapes[j.Name]
	items, err := n.selectItems(ctx, j, shape.PerRun)
	if err != nil {
		return err
	}
	var (
		saved    int
		retried  int
		rejected = map[string]int{}
		aborted  string
	)
	n.mu.Lock()
	st.Runs++
	st.Selected += len(items)
	for _, a := range items {
		if n.rejects[j.Name][a.ID] > 0 {
			retried++
		}
	}
	st.Retried += retried
	n.mu.Unlock()

	var sentAt time.Time
	for start := 0; start < len(items) && aborted == ""; start += shape.PerRequest {
		if start > 0 {
			if err := n.cfg.Sleep(ctx, sentAt.Add(shape.Gap).Sub(n.cfg.Now())); err != nil {
				return err
			}
		}
		sentAt = n.cfg.Now()
		batch := items[start:min(start+shape.PerRequest, len(items))]
		text, err := n.call(ctx, j, batch)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			aborted = n.failed(j, st, err)
			break
		}
		outs := split(text, len(batch), n.cfg.Strict)
		for i, a := range batch {
			if reason := j.Check(n.cfg.Model, outs[i]); reason != "" {
				rejected[reason]++
				n.mu.Lock()
				n.rejects[j.Name][a.ID]++
				st.Rejected[reason]++
				n.mu.Unlock()
				continue
			}
			if err := n.save(ctx, j, a.ID, outs[i]); err != nil {
				return err
			}
			saved++
		}
	}
	n.mu.Lock()
	st.Saved += saved
	n.mu.Unlock()
	if err := n.count(ctx, j); err != nil {
		return err
	}
	line := fmt.Sprintf("selected=%d retried=%d saved=%d rejected=%s", len(items), retried, saved, formatCounts(rejected))
	if aborted != "" {
		line += " aborted=" + aborted
	}
	n.logf(j, "%s", line)
	return nil
}

// count reads j's done and remaining articles into its stats.
func (n *Naive) count(ctx context.Context, j Job) error {
	counts, err := Progress(ctx, n.cfg.DB, NaivePipeline)
	if err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.stats[j.Name].Done, n.stats[j.Name].Remaining = counts[j.Name].Done, counts[j.Name].Remaining
	return nil
}

// failed records a failed call and returns the run's aborted= reason. Any
// 429 sets the shared rate_limited_until to now + its retry-after, as the
// seed's code did, whatever the 429 was for.
func (n *Naive) failed(j Job, st *NaiveStats, err error) string {
	var (
		rl *llm.RateLimitError
		tl *llm.TooLargeError
		se *llm.StatusError
		ov *llm.OverloadedError
	)
	status, kind := 0, ""
	switch {
	case errors.As(err, &rl):
		status, kind = rl.Status, "rate limited"
	case errors.As(err, &tl):
		status, kind = tl.Status, "too large"
	case errors.As(err, &ov):
		status, kind = ov.Status, "overloaded"
	case errors.As(err, &se):
		status, kind = se.Status, "error"
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	st.LastError = err.Error()
	if kind != "" {
		key := fmt.Sprintf("%d %s", status, kind)
		if l, ok := llm.LimitOf(err); ok {
			key += " (" + l.String() + ")"
		}
		st.Refused[key]++
	}
	if status != http.StatusTooManyRequests {
		st.Failed++
		return "error"
	}
	wait, _ := llm.RetryAfter(err)
	if rec, ok := retryAfterOf(err); ok {
		wait = max(wait, rec)
	}
	st.RateLimited++
	if u := n.cfg.Now().Add(wait); u.After(n.until) {
		n.until = u
	}
	return "rate_limited"
}

// logf writes a line of job j, stamped with the time it ends at, as the
// seed's log is.
func (n *Naive) logf(j Job, format string, args ...any) {
	line := j.Label + ": " + fmt.Sprintf(format, args...)
	n.mu.Lock()
	n.stats[j.Name].LastLine = line
	n.mu.Unlock()
	fmt.Fprintf(n.cfg.Log, "%s %s\n", n.cfg.Now().Format("15:04:05"), line)
}

// selectItems returns up to limit articles eligible for j, newest first.
func (n *Naive) selectItems(ctx context.Context, j Job, limit int) ([]Article, error) {
	if limit <= 0 {
		return nil, nil
	}
	rows, err := n.cfg.DB.QueryContext(ctx, `SELECT id FROM `+Table+` WHERE `+j.eligible("_naive")+
		` ORDER BY published_at DESC, id DESC LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("devpick: naive %s: select: %w", j.Name, err)
	}
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return nil, fmt.Errorf("devpick: naive %s: select: %w", j.Name, err)
		}
		keys = append(keys, k)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("devpick: naive %s: select: %w", j.Name, err)
	}
	byKey, err := loadArticles(ctx, n.cfg.DB, keys, j.withBody)
	if err != nil {
		return nil, err
	}
	out := make([]Article, 0, len(keys))
	for _, k := range keys {
		if a, ok := byKey[k]; ok {
			out = append(out, a)
		}
	}
	return out, nil
}

// call sends the batch's request, without max_tokens, and returns the
// answer's text. llm's Chat refuses a request without max_tokens (the
// providers reserve a large default for it, the seed's failure), so the
// request is encoded here and sent as it is.
func (n *Naive) call(ctx context.Context, j Job, batch []Article) (string, error) {
	n.mu.Lock()
	n.stats[j.Name].Requests++
	n.mu.Unlock()
	body, err := json.Marshal(j.request(n.cfg.Model, batch, false))
	if err != nil {
		return "", err
	}
	var rec retryAfter
	raw, err := n.client.ChatRaw(context.WithValue(ctx, retryAfterKey{}, &rec), body)
	if err != nil {
		if d, ok := rec.get(); ok {
			err = &recordedWait{err: err, wait: d}
		}
		return "", err
	}
	var resp llm.ChatResponse
	if err := json.Unmarshal(raw.Body, &resp); err != nil {
		return "", fmt.Errorf("devpick: decode the answer: %w", err)
	}
	return resp.Text(), nil
}

func (n *Naive) save(ctx context.Context, j Job, id, output string) error {
	c := j.Column + "_naive"
	_, err := n.cfg.DB.ExecContext(ctx, `UPDATE `+Table+` SET `+c+` = $1, `+c+`_at = $2, `+c+`_saves = `+c+`_saves + 1 WHERE id = $3`,
		strings.TrimSpace(output), n.cfg.Now().UnixMilli(), id)
	if err != nil {
		return fmt.Errorf("devpick: naive %s: save %s: %w", j.Name, id, err)
	}
	n.mu.Lock()
	delete(n.rejects[j.Name], id)
	n.mu.Unlock()
	return nil
}

// formatCounts prints counts by reason as the seed's log does: {} or
// {not English=2 too long=1}.
func formatCounts(m map[string]int) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// retryAfterRecorder keeps the Retry-After header of a 429 for the call
// whose context carries a *retryAfter.
type retryAfterRecorder struct{ base http.RoundTripper }

type retryAfterKey struct{}

type retryAfter struct {
	mu  sync.Mutex
	d   time.Duration
	set bool
}

func (r *retryAfter) get() (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.d, r.set
}

func (t retryAfterRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusTooManyRequests {
		return resp, err
	}
	if rec, ok := req.Context().Value(retryAfterKey{}).(*retryAfter); ok {
		if s, perr := strconv.ParseFloat(strings.TrimSpace(resp.Header.Get("Retry-After")), 64); perr == nil && s > 0 {
			rec.mu.Lock()
			rec.d, rec.set = time.Duration(s*float64(time.Second)), true
			rec.mu.Unlock()
		}
	}
	return resp, nil
}

// recordedWait is a call's error with the retry-after its 429 carried.
type recordedWait struct {
	err  error
	wait time.Duration
}

func (e *recordedWait) Error() string { return e.err.Error() }
func (e *recordedWait) Unwrap() error { return e.err }

func retryAfterOf(err error) (time.Duration, bool) {
	var rw *recordedWait
	if errors.As(err, &rw) {
		return rw.wait, true
	}
	return 0, false
}
