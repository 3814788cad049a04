package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/httpjson"
	"github.com/sluice-dev/sluice/llm"
)

// OutageMode is how a model answers during an outage.
type OutageMode uint8

// The outage modes. A request in an outage is answered at once and never
// reaches the model: it is not charged and not in the model's counts, only
// in the outage's.
const (
	// Outage5xx answers a 500 with the profile's server error body.
	Outage5xx OutageMode = iota
	// OutageOverload answers the provider's overload: Anthropic's 529
	// overloaded_error, Groq's and OpenAI's 503 saying the model is
	// overloaded.
	OutageOverload
	// Outage429 answers a 429 naming the requests per day, in the profile's
	// rate-limit wording, whose retry-after is the rest of the outage: a
	// client learns that it cannot wait it out.
	Outage429
	// OutageDown resets the connection without an answer.
	OutageDown

	numOutageModes = 4
)

var outageNames = [numOutageModes]string{"5xx", "overload", "429", "down"}

func (o OutageMode) String() string {
	if int(o) < numOutageModes {
		return outageNames[o]
	}
	return fmt.Sprintf("outage(%d)", uint8(o))
}

// ParseOutageMode reads an outage mode's name: 5xx, overload, 429 or down.
func ParseOutageMode(s string) (OutageMode, error) {
	if i := slices.Index(outageNames[:], s); i >= 0 {
		return OutageMode(i), nil
	}
	return 0, fmt.Errorf("outage mode %q: want one of %s", s, strings.Join(outageNames[:], ", "))
}

// MaxOutage bounds an outage's start and length: a year and a day.
const MaxOutage = 366 * 24 * time.Hour

// Outage is a time during which one model answers every request with a
// failure (Mode) instead of serving it.
type Outage struct {
	Model string        // a name the server serves
	Mode  OutageMode    // how the model answers
	Start time.Duration // when the outage begins, after the server was made, on ServerConfig.Now; 0 to MaxOutage
	For   time.Duration // how long it lasts; more than 0, at most MaxOutage
}

// String writes o as ParseOutage reads it: "MODEL=MODE@START+FOR".
func (o Outage) String() string {
	return fmt.Sprintf("%s=%s@%s+%s", o.Model, o.Mode, o.Start, o.For)
}

// ParseOutage reads "MODEL=MODE@START+FOR", such as
// "llama-3.1-8b-instant=5xx@10m+1h": START and FOR are Go durations, START
// from 0 to MaxOutage and FOR more than 0 and at most MaxOutage. Errors name
// the part that is wrong. Whether the model is served is
// Server.ScheduleOutages' to check.
func ParseOutage(s string) (Outage, error) {
	var o Outage
	i := strings.LastIndexByte(s, '=')
	if i < 0 {
		return o, fmt.Errorf("outage %q: want MODEL=MODE@START+DURATION, e.g. llama-3.1-8b-instant=5xx@10m+1h", s)
	}
	o.Model = strings.TrimSpace(s[:i])
	if o.Model == "" {
		return o, fmt.Errorf("outage %q: no model before '='", s)
	}
	mode, when, ok := strings.Cut(s[i+1:], "@")
	if !ok {
		return o, fmt.Errorf("outage %q: no '@' after the mode: want MODE@START+DURATION, e.g. 5xx@10m+1h", s)
	}
	var err error
	if o.Mode, err = ParseOutageMode(strings.TrimSpace(mode)); err != nil {
		return o, fmt.Errorf("outage %q: %w", s, err)
	}
	start, length, ok := strings.Cut(when, "+")
	if !ok {
		return o, fmt.Errorf("outage %q: no '+' after the start: want START+DURATION, e.g. 10m+1h", s)
	}
	if o.Start, err = outageDuration("start", start, true); err != nil {
		return o, fmt.Errorf("outage %q: %w", s, err)
	}
	if o.For, err = outageDuration("duration", length, false); err != nil {
		return o, fmt.Errorf("outage %q: %w", s, err)
	}
	return o, nil
}

// outageDuration reads what, a Go duration from 0 (zero: when it may be
// zero; else more than 0) to MaxOutage.
func outageDuration(what, s string, zero bool) (time.Duration, error) {
	s = strings.TrimSpace(s)
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%s %q is not a Go duration such as 10m or 1h30m", what, s)
	}
	return d, checkOutageDuration(what, d, zero)
}

func checkOutageDuration(what string, d time.Duration, zero bool) error {
	switch {
	case d < 0 || d == 0 && !zero:
		lo := "more than 0"
		if zero {
			lo = "0 or more"
		}
		return fmt.Errorf("%s %s is not %s", what, d, lo)
	case d > MaxOutage:
		return fmt.Errorf("%s %s is more than the bound of %s (366 days)", what, d, MaxOutage)
	}
	return nil
}

// outageSpan is an outage of one model, in the server's time.
type outageSpan struct {
	mode        OutageMode
	start, end  time.Time // the outage holds from start until before end
	description string    // as given, for errors
}

// ScheduleOutages adds outages to their models' outages, each Start
// counted from the call, on ServerConfig.Now. It adds all of them or, when
// one's model is not served, its times are out of bounds or it overlaps
// another outage of its model (given or already scheduled), none, and says
// which.
func (s *Server) ScheduleOutages(outages ...Outage) error {
	for _, o := range outages {
		if s.byName[o.Model] == nil {
			return fmt.Errorf("outage %s: %s", o, s.notServed(o.Model))
		}
		if int(o.Mode) >= numOutageModes {
			return fmt.Errorf("outage %s: unknown mode %d", o, uint8(o.Mode))
		}
		if err := checkOutageDuration("start", o.Start, true); err != nil {
			return fmt.Errorf("outage %s: %w", o, err)
		}
		if err := checkOutageDuration("duration", o.For, false); err != nil {
			return fmt.Errorf("outage %s: %w", o, err)
		}
	}
	now := s.cfg.Now()
	s.outMu.Lock()
	defer s.outMu.Unlock()
	next := map[*served][]outageSpan{}
	for _, o := range outages {
		sv := s.byName[o.Model]
		list, ok := next[sv]
		if !ok {
			list = slices.Clone(sv.outages)
		}
		span := outageSpan{mode: o.Mode, start: now.Add(o.Start), end: now.Add(o.Start + o.For), description: o.String()}
		i := 0
		for ; i < len(list); i++ {
			other := list[i]
			if other.start.Before(span.end) && span.start.Before(other.end) {
				return fmt.Errorf("outage %s overlaps outage %s", o, other.description)
			}
			if span.end.Compare(other.start) <= 0 {
				break
			}
		}
		next[sv] = slices.Insert(list, i, span)
	}
	for sv, list := range next {
		sv.outages = list
	}
	return nil
}

// SetOutage begins an outage of model now, on ServerConfig.Now, lasting d
// (at most MaxOutage): the outage the model is in now ends, and outages
// scheduled within the new one are cut from it. A d of 0 only ends the
// outage the model is in now.
func (s *Server) SetOutage(model string, mode OutageMode, d time.Duration) error {
	sv := s.byName[model]
	if sv == nil {
		return errors.New(s.notServed(model))
	}
	if int(mode) >= numOutageModes {
		return fmt.Errorf("unknown outage mode %d", uint8(mode))
	}
	if err := checkOutageDuration("duration", d, true); err != nil {
		return err
	}
	s.outMu.Lock()
	defer s.outMu.Unlock()
	sv.setOutage(s.cfg.Now(), mode, d, model)
	return nil
}

// setOutage begins an outage at now for d, as SetOutage. The caller holds
// Server.outMu.
func (sv *served) setOutage(now time.Time, mode OutageMode, d time.Duration, model string) {
	sv.dropPast(now)
	if len(sv.outages) > 0 && !sv.outages[0].start.After(now) {
		sv.outages = sv.outages[1:] // the one it is in ends now
	}
	if d == 0 {
		return
	}
	end := now.Add(d)
	kept := make([]outageSpan, 0, len(sv.outages)+1)
	kept = append(kept, outageSpan{mode: mode, start: now, end: end,
		description: fmt.Sprintf("%s=%s from %s for %s", model, mode, now.UTC().Format(time.RFC3339Nano), d)})
	for _, o := range sv.outages {
		if o.end.Compare(end) <= 0 {
			continue // within the new one
		}
		if o.start.Before(end) {
			o.start = end
		}
		kept = append(kept, o)
	}
	sv.outages = kept
}

// dropPast drops the outages over at now. The caller holds Server.outMu.
func (sv *served) dropPast(now time.Time) {
	i := 0
	for i < len(sv.outages) && !sv.outages[i].end.After(now) {
		i++
	}
	sv.outages = sv.outages[i:]
}

// outageAt returns the outage the model is in at now, if any, and counts a
// request it answers. The caller holds Server.outMu.
func (sv *served) outageAt(now time.Time) (outageSpan, bool) {
	sv.dropPast(now)
	if len(sv.outages) == 0 || sv.outages[0].start.After(now) {
		return outageSpan{}, false
	}
	o := sv.outages[0]
	sv.counts[o.mode]++
	return o, true
}

// outageCounts returns the requests answered by an outage of sv, by mode.
func (s *Server) outageCounts(sv *served) [numOutageModes]int64 {
	s.outMu.Lock()
	defer s.outMu.Unlock()
	return sv.counts
}

// notServed says that the server serves no model named model.
func (s *Server) notServed(model string) string {
	if len(model) > MaxModelName {
		model = model[:MaxModelName] + "…"
	}
	return fmt.Sprintf("model %q is not served (the server serves %s)", model, strings.Join(s.names, ", "))
}

// The organization the profile's rate-limit refusals name, as the model's do.
const (
	groqOrg = "org_sim"
	simOrg  = "org-sim" // OpenAI's and Anthropic's
)

// inOutage answers a request for model sv at now with its outage, if the
// model is in one, and reports whether it did. model is the name the
// request gave.
func (s *Server) inOutage(w http.ResponseWriter, sv *served, model string, now time.Time) bool {
	s.outMu.Lock()
	o, ok := sv.outageAt(now)
	s.outMu.Unlock()
	if !ok {
		return false
	}
	p := s.profile
	var status int
	var body []byte
	switch o.mode {
	case Outage5xx:
		status, body = http.StatusInternalServerError, forecast.ServerErrorBody(p, http.StatusInternalServerError, 0)
	case OutageOverload:
		switch p {
		case llm.Anthropic:
			status, body = 529, forecast.ServerErrorBody(p, 529, 0)
		case llm.Groq:
			status = http.StatusServiceUnavailable
			body = forecast.ErrorBody(p, "internal_server_error", "service_unavailable",
				fmt.Sprintf("The model `%s` is overloaded. Please try again later.", model), 0)
		default:
			status, body = http.StatusServiceUnavailable, forecast.ServerErrorBody(p, http.StatusServiceUnavailable, 0)
		}
	case Outage429:
		wait := o.end.Sub(now)
		status, body = http.StatusTooManyRequests, s.dayLimitBody(sv, model, wait)
		w.Header().Set("Retry-After", strconv.FormatInt(int64((wait+time.Second-1)/time.Second), 10))
	default: // OutageDown
		abort(w, true)
		return true
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
	return true
}

// dayLimitBody is the profile's 429 body for a request refused on requests
// per day for wait. With an RPD the model has, it names that limit all used;
// without one it names a limit of 0, used 0 and requested 0, numbers from
// which a client learns no allowance, only the wait.
func (s *Server) dayLimitBody(sv *served, model string, wait time.Duration) []byte {
	p := s.profile
	lim, need := sv.mc.Limits[governor.RPD], int64(1)
	if lim == 0 {
		need = 0
	}
	org := simOrg
	if p == llm.Groq {
		org = groqOrg
	}
	typ, code := p.RateLimitType(governor.RPD)
	return forecast.ErrorBody(p, typ, code, p.RateLimitMessage(org, model, governor.RPD, lim, lim, need, wait)+".", 0)
}

// maxOutageBody bounds the body of POST /sim/outage.
const maxOutageBody = 4 << 10

// outageJSON is an outage as POST /sim/outage answers it.
type outageJSON struct {
	Mode  string    `json:"mode"`
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

// outage serves POST /sim/outage: {"model":"M","mode":"5xx","for":"1h"}
// begins an outage of M now (SetOutage); "for":"0s" ends the one M is in
// (mode may then be left out). The answer names the outage M is in now
// ({"model":"M","outage":{"mode","start","end"}}, or "outage":null). Bad
// input gets a 400 naming the field.
func (s *Server) outage(w http.ResponseWriter, r *http.Request) {
	bad := func(msg string) {
		s.writeError(w, http.StatusBadRequest, "invalid_request_error", "", msg)
	}
	const want = `want {"model":"M","mode":"5xx","for":"1h"}`
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxOutageBody))
	if err != nil {
		bad(fmt.Sprintf("request body: more than %d bytes, or not read whole: %s", maxOutageBody, want))
		return
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(b, &fields) != nil || fields == nil {
		bad("request body: not a JSON object: " + want)
		return
	}
	for k := range fields {
		if k != "model" && k != "mode" && k != "for" {
			bad(fmt.Sprintf("%.60q: unknown field: %s", k, want))
			return
		}
	}
	str := func(k string) (string, bool) {
		var v string
		raw, ok := fields[k]
		if !ok || isNull(raw) {
			return "", true
		}
		if json.Unmarshal(raw, &v) != nil {
			bad(fmt.Sprintf("%s: want a string, got %s", k, jsonKind(raw)))
			return "", false
		}
		return v, true
	}
	model, ok1 := str("model")
	modeS, ok2 := str("mode")
	forS, ok3 := str("for")
	if !ok1 || !ok2 || !ok3 {
		return
	}
	sv := s.byName[model]
	switch {
	case model == "":
		bad("model: missing: name a model the server serves (" + strings.Join(s.names, ", ") + ")")
		return
	case sv == nil:
		bad("model: " + s.notServed(model))
		return
	case forS == "":
		bad(`for: missing: how long the outage lasts, a Go duration such as "1h" ("0s" ends it)`)
		return
	}
	d, err := time.ParseDuration(forS)
	if err != nil {
		bad(fmt.Sprintf("for: %.60q is not a Go duration such as \"1h\"", forS))
		return
	}
	if err := checkOutageDuration("for:", d, true); err != nil {
		bad(err.Error())
		return
	}
	var mode OutageMode
	switch {
	case modeS != "":
		if mode, err = ParseOutageMode(modeS); err != nil {
			bad(fmt.Sprintf("mode: %.60q is not one of %s", modeS, strings.Join(outageNames[:], ", ")))
			return
		}
	case d > 0:
		bad("mode: missing: one of " + strings.Join(outageNames[:], ", "))
		return
	}
	now := s.cfg.Now()
	out := struct {
		Model  string      `json:"model"`
		Outage *outageJSON `json:"outage"`
	}{Model: model}
	s.outMu.Lock()
	sv.setOutage(now, mode, d, model)
	if len(sv.outages) > 0 && !sv.outages[0].start.After(now) {
		o := sv.outages[0]
		out.Outage = &outageJSON{Mode: o.mode.String(), Start: o.start.UTC(), End: o.end.UTC()}
	}
	s.outMu.Unlock()
	httpjson.Write(w, http.StatusOK, out)
}
