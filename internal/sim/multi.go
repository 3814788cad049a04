package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/httpjson"
)

// served is one model the server serves, with its outages.
type served struct {
	m  *forecast.Model
	mc forecast.ModelConfig // m's, which never changes

	// Guarded by Server.outMu.
	outages []outageSpan          // in time order, none overlapping; those past are dropped
	counts  [numOutageModes]int64 // requests answered by an outage, by mode
}

// NewMultiServer returns a Server of several models, each with its own
// limits, windows and stats, as providers that limit each model apart (Groq)
// do: a request counts on the model its "model" field names, and a request
// naming a model not in models gets the profile's 404 model_not_found.
// GET /v1/models lists the names sorted; GET /sim/stats reports the totals
// and each model apart. Every model must speak the same profile (the key's
// authentication and error shapes are the server's); cfg.Models must be
// empty, and cfg.Seed defaults to the first model's seed.
func NewMultiServer(models map[string]*forecast.Model, cfg ServerConfig) (*Server, error) {
	if len(models) == 0 {
		return nil, errors.New("simulator: no models to serve")
	}
	if len(cfg.Models) > 0 {
		return nil, fmt.Errorf("simulator: ServerConfig.Models %q is for a server of one model; a server of several lists the names it serves", cfg.Models)
	}
	names := make([]string, 0, len(models))
	for name := range models {
		names = append(names, name)
	}
	slices.Sort(names)
	first := models[names[0]]
	if first == nil {
		return nil, fmt.Errorf("simulator: model %q: no forecast.Model", names[0])
	}
	mc0 := first.Config()
	seen := map[*forecast.Model]string{}
	for _, name := range names {
		m := models[name]
		switch {
		case name == "":
			return nil, errors.New("simulator: a model name is empty")
		case len(name) > MaxModelName:
			return nil, fmt.Errorf("simulator: model %.40q…: a model name is at most %d bytes, got %d", name, MaxModelName, len(name))
		case m == nil:
			return nil, fmt.Errorf("simulator: model %q: no forecast.Model", name)
		case seen[m] != "":
			return nil, fmt.Errorf("simulator: models %q and %q are the same forecast.Model: give each its own", seen[m], name)
		case m.Config().Profile != mc0.Profile:
			return nil, fmt.Errorf("simulator: model %q has profile %s, model %q %s: a server speaks one profile", name, m.Config().Profile, names[0], mc0.Profile)
		}
		seen[m] = name
	}
	s := newServer(cfg, mc0)
	s.names = names
	for _, name := range names {
		s.byName[name] = &served{m: models[name], mc: models[name].Config()}
	}
	return s, nil
}

// modelNotFound answers a request naming a model the server does not serve,
// as the profile's provider does.
func (s *Server) modelNotFound(w http.ResponseWriter, model string) {
	if s.profile == "anthropic" {
		s.writeError(w, http.StatusNotFound, "not_found_error", "", "model: "+model)
		return
	}
	s.writeError(w, http.StatusNotFound, "invalid_request_error", "model_not_found",
		fmt.Sprintf("The model `%s` does not exist or you do not have access to it.", model))
}

// stats serves GET /sim/stats: a server of one model its model's stats and
// their "outage" counts; a server of several the totals over its models
// (their limits and peaks only when there is one), the outage totals, and
// under "models" each model's own.
func (s *Server) stats(w http.ResponseWriter, _ *http.Request) {
	if s.one != nil {
		httpjson.Write(w, http.StatusOK, json.RawMessage(withOutages(s.one.m.Stats(), s.outageCounts(s.one))))
		return
	}
	var total forecast.Stats
	var outages [numOutageModes]int64
	each := make(map[string]json.RawMessage, len(s.names))
	for i, name := range s.names {
		sv := s.byName[name]
		st := sv.m.Stats()
		counts := s.outageCounts(sv)
		each[name] = withOutages(st, counts)
		if i == 0 {
			total = st
		} else {
			total = sumStats(total, st)
		}
		for k, v := range counts {
			outages[k] = addSat(outages[k], v)
		}
	}
	b := withOutages(total, outages)
	models, err := json.Marshal(each)
	if err != nil {
		panic(err) // JSON of JSON: cannot fail
	}
	b = append(b[:len(b)-1], `,"models":`...)
	b = append(append(b, models...), '}')
	httpjson.Write(w, http.StatusOK, json.RawMessage(b))
}

// withOutages is st's JSON with an "outage" object after its fields:
// requests answered by an outage, by mode.
func withOutages(st forecast.Stats, counts [numOutageModes]int64) []byte {
	b, err := json.Marshal(st)
	if err != nil {
		panic(err) // numbers and strings: cannot fail
	}
	byMode := make(map[string]int64, numOutageModes)
	for mode, n := range counts {
		byMode[OutageMode(mode).String()] = n
	}
	ob, err := json.Marshal(byMode)
	if err != nil {
		panic(err)
	}
	// b is an object with fields: its closing brace is its last byte.
	b = append(b[:len(b)-1], `,"outage":`...)
	return append(append(b, ob...), '}')
}

// sumStats adds b's counts to a's. Limits and peaks are each model's own:
// the sum has none.
func sumStats(a, b forecast.Stats) forecast.Stats {
	out := forecast.Stats{
		Requests: addSat(a.Requests, b.Requests), Succeeded: addSat(a.Succeeded, b.Succeeded),
		Rejected: addSat(a.Rejected, b.Rejected), TooLarge: addSat(a.TooLarge, b.TooLarge),
		RejectedByStatus: make(map[int]int64, len(a.RejectedByStatus)+len(b.RejectedByStatus)),
		Charged:          addCost(a.Charged, b.Charged),
		Flows:            make(map[string]forecast.FlowStats, len(a.Flows)+len(b.Flows)),
	}
	for l := range governor.NumLimits {
		out.RejectedByLimit[l] = addSat(a.RejectedByLimit[l], b.RejectedByLimit[l])
	}
	for f := range forecast.NumFaults {
		out.Faults[f] = addSat(a.Faults[f], b.Faults[f])
	}
	for _, st := range []forecast.Stats{a, b} {
		for k, v := range st.RejectedByStatus {
			out.RejectedByStatus[k] = addSat(out.RejectedByStatus[k], v)
		}
		for name, f := range st.Flows {
			g := out.Flows[name]
			g.Requests, g.Succeeded = addSat(g.Requests, f.Requests), addSat(g.Succeeded, f.Succeeded)
			g.Rejected, g.Faults = addSat(g.Rejected, f.Rejected), addSat(g.Faults, f.Faults)
			g.Charged = addCost(g.Charged, f.Charged)
			out.Flows[name] = g
		}
	}
	return out
}

func addCost(a, b governor.Cost) governor.Cost {
	return governor.Cost{Requests: addSat(a.Requests, b.Requests), Input: addSat(a.Input, b.Input), Output: addSat(a.Output, b.Output),
		Cached: addSat(a.Cached, b.Cached), Money: addSat(a.Money, b.Money)}
}

// addSat is a + b for counts (never negative), saturating rather than
// overflowing.
func addSat(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
