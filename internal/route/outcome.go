package route

import (
	"errors"
	"net/http"

	"github.com/sluice-dev/sluice/llm"
)

// OutcomeOf reads what an error of the llm client says of the target the
// call was sent to: a refusal for its quota, its quota gone for good, or a
// failure that is the target's — it is down (5xx, overload, a timeout, a
// closed connection) or its key or model is wrong there (401, 403, 404).
// An answer that is the request's own fault (another 4xx, a request too
// large) says the target is up. A nil error is OK.
func OutcomeOf(err error) Outcome {
	if err == nil {
		return OK
	}
	if _, ok := errors.AsType[*llm.QuotaError](err); ok {
		return Exhausted
	}
	if _, ok := errors.AsType[*llm.RateLimitError](err); ok {
		return Refused
	}
	if _, ok := errors.AsType[*llm.TooLargeError](err); ok {
		return OK // the request's own size: the target answered
	}
	if se, ok := errors.AsType[*llm.StatusError](err); ok {
		switch se.Status {
		case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
			return Failed // its key or model is wrong: the target's fault
		}
	}
	if llm.Retryable(err) {
		return Failed // 5xx, overload, timeouts, transport failures
	}
	return OK
}
