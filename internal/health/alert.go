package health

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/sluice-dev/sluice/internal/store"
)

// Alert is the body of the webhook's POST: a job that became stalled, or
// stopped being stalled (State is then its new state).
type Alert struct {
	Job    string `json:"job"`
	State  State  `json:"state"`
	Reason string `json:"reason"`
	// Since is when the job crossed the threshold (stalled), or when it last
	// processed an item (recovered).
	Since time.Time `json:"since,omitzero"`
	At    time.Time `json:"at"` // when the monitor saw the change
}

// alert records that job j is alerted in state to, and when this process
// is the one that changed the record, logs the change and sends it to the
// webhook in the background. A process that loses the change, or cannot
// record it, sends nothing: the record is unchanged for a failure, so the
// next poll tries again.
func (m *Monitor) alert(ctx context.Context, j store.Job, to string, v View, now time.Time) {
	won, err := m.cfg.Source.SetJobAlert(ctx, j.Name, j.Alert, to)
	if err != nil {
		m.cfg.Logger.Warn("sluice: cannot record a job's alert; trying again at the next poll",
			"job", j.Name, "state", v.State, "err", err)
		return
	}
	if !won {
		return
	}
	a := Alert{Job: j.Name, State: v.State, Reason: v.Reason, Since: v.Since, At: now.UTC()}
	if v.State == Stalled {
		m.cfg.Logger.Warn("sluice: job stalled", "job", a.Job, "reason", a.Reason, "since", a.Since)
	} else {
		a.Reason = "no longer stalled: " + a.Reason
		m.cfg.Logger.Info("sluice: job recovered", "job", a.Job, "state", a.State, "reason", a.Reason, "since", a.Since)
	}
	url := m.webhookOf(a.Job)
	if url == "" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.isStopped() {
		m.cfg.Logger.Error("sluice: alert not sent: the monitor is stopping", "job", a.Job, "state", a.State)
		return
	}
	// A job's alerts are delivered in order: a recovery never reaches the
	// webhook before the stall it ends, even while that one is retried.
	prev, done := m.sending[a.Job], make(chan struct{})
	m.sending[a.Job] = done
	m.alerts.Add(1)
	go func() {
		defer m.alerts.Done()
		defer func() {
			m.mu.Lock()
			defer m.mu.Unlock()
			if m.sending[a.Job] == done {
				delete(m.sending, a.Job)
			}
			close(done)
		}()
		if prev != nil {
			<-prev
		}
		if n, err := m.deliver(url, a); err != nil {
			m.cfg.Logger.Error("sluice: alert not delivered", "job", a.Job, "state", a.State, "attempts", n, "err", err)
		}
	}()
}

// maxRetryPause bounds the pause between two attempts of one alert.
const maxRetryPause = time.Minute

// webhookOf is where job's alerts go: its own webhook, else the app's.
func (m *Monitor) webhookOf(job string) string {
	if u := m.cfg.Webhooks[job]; u != "" {
		return u
	}
	return m.cfg.Webhook
}

// deliver posts a to the webhook at url until it takes it, it refuses it for good
// (a 4xx other than 408 and 429), Config.RetryFor has passed, or the
// monitor stops. It returns the attempts made and the last error.
func (m *Monitor) deliver(url string, a Alert) (int, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-m.stopped:
			cancel()
		case <-ctx.Done():
		}
	}()
	body, err := json.Marshal(a)
	if err != nil {
		return 0, err
	}
	start, pause := m.cfg.Now(), m.cfg.RetryBase
	for n := 1; ; n++ {
		err := m.post(ctx, url, body)
		if err == nil {
			return n, nil
		}
		if se, ok := err.(*statusError); ok && !se.retryable() {
			return n, err
		}
		// Take off a random part of up to half the pause, so that processes
		// that failed together do not retry together.
		wait := pause - time.Duration(rand.Int64N(int64(pause)/2+1))
		if m.cfg.Now().Add(wait).Sub(start) > m.cfg.RetryFor {
			return n, fmt.Errorf("gave up after %s: %w", m.cfg.RetryFor, err)
		}
		select {
		case <-m.cfg.After(wait):
		case <-ctx.Done():
			return n, fmt.Errorf("the monitor stopped: %w", err)
		}
		pause = min(pause*2, maxRetryPause)
	}
}

// statusError is a webhook answer other than 2xx.
type statusError struct{ code int }

func (e *statusError) Error() string { return fmt.Sprintf("the webhook answered HTTP %d", e.code) }

func (e *statusError) retryable() bool {
	return e.code == http.StatusRequestTimeout || e.code == http.StatusTooManyRequests || e.code >= 500
}

func (m *Monitor) post(ctx context.Context, url string, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.WebhookTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := m.cfg.HTTPClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	// Read a little of the answer so the connection can be kept.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return &statusError{code: resp.StatusCode}
	}
	return nil
}
