package llm

import (
	"cmp"
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/govkey"
)

// Feedback tells g how the call admitted by reservation r ended. It is the
// one place where a call's outcome becomes governor feedback: sluice's
// engine, its gateway and its bench all call it, and so can any other code
// that pairs a Client (or its own HTTP calls and [Profile.Classify]) with a
// governor. What a refusal means for the key is decided here alone: the
// governor takes it from Feedback, not from its own API. g must be the governor r came from; used is the usage the
// provider reported (zero: none), s what the response's headers said about
// the key (zero: no headers), err the call's error.
//
// The usage is first held to what the call could have used (see the
// governor's InputFactor): its output to what was reserved for it, its
// input to a multiple of the estimate it was admitted with, or to the
// key's minute allowance of input when that is more; what is cut is logged
// through the governor's [governor.Config].Logger. The headers are
// observed, whatever the outcome, against what the governor had charged
// when it admitted the call; after the call is settled when it succeeded,
// before anything else otherwise. Then:
//
//   - nil: the call is settled with used, then the headers observed: the
//     call the provider just accepted floors what they may say about the
//     limits ([governor.LearnFloor]). A stream that began and then failed
//     was counted: pass nil with whatever usage it reported.
//   - *RateLimitError: the provider refused the call and counted nothing;
//     the charge is given back. A named limit, and only it, is taken as
//     full for RetryAfter (a whole period without one), and the rejection
//     is counted in r's flow ([governor.FlowStats].Rejections); a 429 that
//     names none pauses the key briefly, longer each time in a row (1 s,
//     2 s, 4 s … 60 s), until a call succeeds. A wait the provider asked
//     for beyond its bound (see RateLimitError.RetryAfter) is given to the
//     governor as asked, which holds the limit for at most its period plus
//     its lag and logs the number; one that named no limit is logged
//     through the governor's [governor.Config].Logger.
//   - *TooLargeError: given back and counted in r's flow, never paused:
//     waiting never helps, whatever retry-after came with it.
//   - *QuotaError, a 4xx *StatusError other than 408, [ErrNoMaxTokens]: the
//     provider refused the request, or it was never sent; given back.
//   - anything else — *OverloadedError, 5xx, 408, an error inside a 2xx
//     answer, *TransportError (timeout, reset, malformed body), a call the
//     caller cancelled, an error of unknown kind: the charge is kept, as if
//     the call had succeeded without reporting its usage
//     ([governor.Reservation.Fault]), and the flow's retry may go ahead of
//     the day pacers once.
//
// Why a failure without a verdict keeps its charge: the provider counts a
// request when it arrives, and it may have arrived — a timeout or a reset
// says nothing about that, a 5xx or a malformed body says it did. A charge
// given back that the provider kept leaves the governor believing in room
// the provider does not have, and the next calls are admitted into 429s; a
// charge kept that the provider did not count costs one call's room for one
// window. The first breaks the governor's promise, the second only slows it.
//
// A limit whose allowance an error names ("Limit 1000, Requested 1252") is
// learnt as that limit's allowance: Groq reveals RPM, TPD, ITPM and OTPM
// nowhere else, and once learnt, Check refuses a call that can never fit
// before it is sent. Like an allowance in the headers, it is bounded by
// the configured one and lapses unless said again (see the governor's
// "What a provider announces").
//
// Whether and when to call again is the caller's decision: [Retryable] and
// [RetryAfter] answer it. After a rate limit the governor holds the limit
// (or the key) for the wait, so waiting for admission again is the backoff.
func Feedback(now time.Time, g *governor.Governor, r *governor.Reservation, used governor.Cost, s governor.Snapshot, err error) {
	// A usage is the provider's word like its headers: held to what the
	// call could have used, so that one answer's absurd count cannot fill
	// every window and budget of the key.
	used = g.Inside(govkey.Key{}).Usage(now, r, used)
	if err == nil {
		r.Settle(now, used)
	}
	if s.Any() {
		// Compared with what the governor had charged when it admitted the
		// call, which is what the provider counted it against: compared with
		// now, charges that aged out or settled meanwhile would look like
		// someone else's use of the key.
		r.Observe(now, s)
	}
	if err == nil {
		return
	}
	var (
		rl *RateLimitError
		tl *TooLargeError
		ov *OverloadedError
	)
	switch {
	case errors.As(err, &tl):
		if tl.LimitKnown {
			learn(now, r, tl.Limit, tl.Max, tl.Status)
		}
		r.Cancel(now)
		if tl.LimitKnown {
			g.Inside(govkey.Key{}).RejectedFlow(r.Flow(), tl.Limit)
		}
	case errors.As(err, &rl):
		if rl.LimitKnown {
			learn(now, r, rl.Limit, rl.Max, rl.Status)
		}
		r.Cancel(now)
		in := g.Inside(govkey.Key{})
		if rl.LimitKnown {
			// As asked: the governor bounds it to the limit's period
			// plus its own lag, and logs what the provider asked for.
			in.Rejected(now, rl.Limit, cmp.Or(rl.asked, rl.RetryAfter))
			in.RejectedFlow(r.Flow(), rl.Limit)
		} else {
			noteWait(now, g, rl.asked, rl.RetryAfter)
			in.RejectedUnclassified(now)
		}
	case refused(err):
		r.Cancel(now)
	default:
		if errors.As(err, &ov) {
			noteWait(now, g, ov.asked, ov.RetryAfter)
		}
		r.Fault(now, used)
	}
}

// noteWait has g log a wait that named no limit, which the provider asked
// for (asked, 0 when within bounds) and the error bounds to wait.
func noteWait(now time.Time, g *governor.Governor, asked, wait time.Duration) {
	if asked > 0 {
		g.Inside(govkey.Key{}).NoteWait(now, asked, wait)
	}
}

// refused reports whether err says the provider turned the request down
// without counting it, or that it was never sent: quota, a 4xx other than
// 408, a request without max_tokens. A cancelled call is not refused: it
// may have reached the provider before the caller left.
func refused(err error) bool {
	var (
		q  *QuotaError
		st *StatusError
	)
	switch {
	case errors.Is(err, context.Canceled):
		return false
	case errors.As(err, &q), errors.Is(err, ErrNoMaxTokens):
		return true
	case errors.As(err, &st):
		return st.Status >= 400 && st.Status < 500 && st.Status != 408
	}
	return false
}

// learn gives the governor a limit's allowance the provider named in an
// error answered with status (0: inside a 2xx answer or a stream). The
// error gives no reset, so no remaining count is read into it. It must come
// before the reservation is cancelled: a cancelled reservation observes
// nothing.
func learn(now time.Time, r *governor.Reservation, l governor.Limit, allowance int64, status int) {
	if allowance <= 0 {
		return
	}
	source := "error event"
	if status > 0 {
		source = strconv.Itoa(status) + " body"
	}
	var s governor.Snapshot
	s[l] = governor.Observed{Known: true, Limit: allowance, Remaining: allowance, Source: source}
	r.Observe(now, s)
}
