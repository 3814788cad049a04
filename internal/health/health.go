package health

import (
	"fmt"
	"math"
	"time"

	"github.com/sluice-dev/sluice/internal/store"
)

// State is what a flow is doing, as Evaluate judges it.
type State string

// The states of a flow. A job is in exactly one; see Evaluate for which
// wins when several apply.
const (
	// Progressing: items remain and one was processed within the threshold
	// (or, for a job that never processed one, monitoring began within it).
	Progressing State = "progressing"
	// WaitingForQuota: its governor flow has calls waiting; WaitingOn names
	// the limit and WaitingUntil when it can go.
	WaitingForQuota State = "waiting-for-quota"
	// Failing: its last run failed; ConsecutiveFailures and LastError say
	// how often and why.
	Failing State = "failing"
	// Stalled: eligible items remain and none was processed for the
	// threshold. Never judged by an item's age.
	Stalled State = "stalled"
	// Idle: the job has no items at all, eligible or processed.
	Idle State = "idle"
	// Done: nothing is eligible and every item the job was given is
	// processed (saved or parked). It turns progressing again when new
	// items become eligible.
	Done State = "done"
)

// DefaultThreshold is how long a job with eligible items may go without
// processing one before it is stalled, when nothing else is configured.
const DefaultThreshold = 2 * time.Hour

// Flow is one flow's health as GET /v1/flows answers it, for a job and for
// a gateway's flow alike. Times are UTC and encode as RFC 3339; a field
// that does not apply is left out.
type Flow struct {
	Name  string `json:"name"`
	State State  `json:"state"`
	// Done counts the items processed (saved or parked); for a gateway
	// flow, the calls admitted.
	Done int64 `json:"done"`
	// Remaining counts the items still eligible (pending or rejected and
	// waiting to be retried); for a gateway flow, the calls waiting.
	Remaining int64 `json:"remaining"`
	// RatePerHour is how many items were processed per hour over the last
	// measured window (left out when none was, or it was not measured).
	RatePerHour float64 `json:"rate_per_hour,omitempty"`
	// ETA is when the remaining items will be done at that rate (left out
	// when the rate is 0 or nothing remains).
	ETA time.Time `json:"eta,omitzero"`
	// LastProgressAt is when an item was last processed (a gateway flow:
	// a call last admitted).
	LastProgressAt      time.Time `json:"last_progress_at,omitzero"`
	ConsecutiveFailures int       `json:"consecutive_failures,omitempty"`
	LastError           string    `json:"last_error,omitempty"`
	// WaitingOn names what holds the flow's first waiting call back ("tpm",
	// "tpd pacing", "a provider pause", "its turn"), and WaitingUntil when
	// that ends as far as the governor knows; both left out when nothing
	// waits.
	WaitingOn    string    `json:"waiting_on,omitempty"`
	WaitingUntil time.Time `json:"waiting_until,omitzero"`
	// InFlight counts a backfill's calls going now (waiting in the
	// governor's line included), InFlightTarget how many it would keep
	// going — what the governor admits times the latency it observes, with
	// headroom — and LimitedBy what keeps it from more: "quota" (its calls
	// wait in the governor's line), "in_flight" (its InFlight setting
	// holds it under what the governor would admit), "items" (fewer of its
	// shares have eligible items), "latency" (it keeps the most calls
	// going a backfill may, and none waits), "growing" (it is still
	// growing towards what the governor admits). As the process answering
	// sees them; left out for a job no process here runs.
	InFlight       int    `json:"in_flight,omitempty"`
	InFlightTarget int    `json:"in_flight_target,omitempty"`
	LimitedBy      string `json:"limited_by,omitempty"`
}

// InFlight is how many calls a backfill keeps going, and why no more, as
// the Flow fields of the same names say.
type InFlight struct {
	Calls, Target int
	LimitedBy     string
}

// WithInFlight adds f to v: its Flow's fields, and, for a job that
// progresses while its InFlight setting holds it under what the governor
// would admit, a word in its Reason, so that a job running far below its
// quota says so.
func (v View) WithInFlight(f InFlight) View {
	if f.Target <= 0 {
		return v
	}
	v.InFlight, v.InFlightTarget, v.LimitedBy = f.Calls, f.Target, f.LimitedBy
	if f.LimitedBy == "in_flight" && v.State == Progressing {
		v.Reason += fmt.Sprintf("; its InFlight setting holds it to %d calls at once, where the quota would admit about %d", f.Calls, f.Target)
	}
	return v
}

// View is a job's health as Evaluate judges it: its Flow, and why.
type View struct {
	Flow
	// Reason says why the job is in its state, with the figures it was
	// judged by.
	Reason string
	// Since is, for a stalled job, when it crossed the threshold; for any
	// other, when it last processed an item (or monitoring began, if it
	// never did). Alerts carry it.
	Since time.Time
}

// Quota is what a job's governor flow waits for at one moment.
type Quota struct {
	Waiting bool
	// Limit names what holds its first waiting call back, as
	// governor.Blocker.String does ("tpm", "tpd pacing", "its turn").
	Limit string
	// Until is when it can go as far as the governor knows (zero: unknown).
	Until time.Time
}

// Evaluate judges job at now. threshold is how long it may go without
// processing an item while items remain (DefaultThreshold when not
// positive); q is what its governor flow waits for; rate measures its
// processed count (nil: no rate, no ETA).
//
// When several states apply, the first of these wins:
//
//  1. stalled: eligible items remain (Pending+Rejected > 0) and nothing was
//     processed for at least threshold since LastProgressAt, or since
//     MonitoringSince if the job never progressed (a job with neither time
//     recorded cannot be judged stalled). A stalled job still names the
//     limit it waits on and its failures and last error: waiting for quota
//     or failing for longer than the threshold is stalling.
//  2. failing: ConsecutiveFailures > 0.
//  3. waiting-for-quota: its governor flow has calls waiting.
//  4. progressing: eligible items remain.
//  5. done: nothing is eligible and Saved+Parked > 0.
//  6. idle: the job has no items.
//
// The age of the items never counts: a backfill that starts on a year of
// old items is progressing as long as it processes some.
func Evaluate(job store.Job, threshold time.Duration, q Quota, rate *Sampler, now time.Time) View {
	if threshold <= 0 {
		threshold = DefaultThreshold
	}
	eligible := addSat(max(job.Pending, 0), max(job.Rejected, 0))
	processed := addSat(max(job.Saved, 0), max(job.Parked, 0))
	v := View{Flow: Flow{Name: job.Name, Done: processed, Remaining: eligible, LastProgressAt: utc(job.LastProgressAt)}}
	if job.ConsecutiveFailures > 0 {
		v.ConsecutiveFailures, v.LastError = job.ConsecutiveFailures, job.LastError
	}
	if q.Waiting {
		v.WaitingOn, v.WaitingUntil = q.Limit, utc(q.Until)
		if v.WaitingOn == "" {
			v.WaitingOn = "quota"
		}
	}
	if rate != nil {
		// The ETA is the remaining items at the rate the flow reports, as
		// every surface computes the time left (package progress).
		r := math.Round(rate.PerHour()*10) / 10
		v.RatePerHour, v.ETA = r, eta(now, eligible, r)
	}
	ref, never := job.LastProgressAt, job.LastProgressAt.IsZero()
	if never {
		ref = job.MonitoringSince
	}
	v.Since = utc(ref)
	quiet := now.Sub(ref)
	switch {
	case eligible > 0 && !ref.IsZero() && quiet >= threshold:
		v.State, v.Since = Stalled, utc(ref.Add(threshold))
		if never {
			v.Reason = fmt.Sprintf("no item processed since monitoring began %s ago (%s); %d eligible remain",
				round(quiet), stamp(ref), eligible)
		} else {
			v.Reason = fmt.Sprintf("no item processed for %s (since %s); %d eligible remain", round(quiet), stamp(ref), eligible)
		}
		if q.Waiting {
			v.Reason += "; " + waiting(v.Flow)
		}
		if v.ConsecutiveFailures > 0 {
			v.Reason += "; " + failures(v.Flow)
		}
	case job.ConsecutiveFailures > 0:
		v.State, v.Reason = Failing, failures(v.Flow)
	case q.Waiting:
		v.State, v.Reason = WaitingForQuota, waiting(v.Flow)
	case eligible > 0:
		v.State = Progressing
		if never {
			v.Reason = fmt.Sprintf("no item processed yet; monitoring began %s ago, within the %s threshold; %d eligible remain",
				round(quiet), round(threshold), eligible)
		} else {
			v.Reason = fmt.Sprintf("last processed an item %s ago; %d eligible remain", round(quiet), eligible)
		}
	case processed > 0:
		v.State, v.Reason = Done, fmt.Sprintf("all %d items processed", processed)
	default:
		v.State, v.Reason = Idle, "no items"
	}
	return v
}

func failures(f Flow) string {
	s := fmt.Sprintf("%d consecutive failed runs", f.ConsecutiveFailures)
	if f.LastError != "" {
		s += ", the last: " + f.LastError
	}
	return s
}

func waiting(f Flow) string {
	s := "waiting on " + f.WaitingOn
	if !f.WaitingUntil.IsZero() {
		s += " until " + stamp(f.WaitingUntil)
	}
	return s
}

// maxETA bounds how far ahead an ETA is given: a rate of a few items a
// year is as good as none.
const maxETA = 10 * 365 * 24 * time.Hour

// eta is when remaining items are done at perHour; zero when there is no
// rate, nothing remains, or it is further than maxETA.
func eta(now time.Time, remaining int64, perHour float64) time.Time {
	if remaining <= 0 || !(perHour > 0) {
		return time.Time{}
	}
	hours := float64(remaining) / perHour
	if hours > maxETA.Hours() {
		return time.Time{}
	}
	return now.Add(time.Duration(hours * float64(time.Hour))).UTC()
}

func utc(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC()
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func round(d time.Duration) time.Duration { return d.Round(time.Second) }

func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
