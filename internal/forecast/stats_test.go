package forecast

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sluice-dev/sluice/governor"
)

func TestFlowStats(t *testing.T) {
	t.Parallel()
	m := newModel(t, ModelConfig{Limits: limits("rpm=2")})
	m.Submit(at(0), Request{Flow: "a", Input: 5, MaxTokens: 5})
	m.Submit(at(0), Request{Flow: "b", Input: 7, MaxTokens: 3})
	m.Submit(at(0), Request{Flow: "b"})
	st := m.Stats()
	if a := st.Flows["a"]; a.Requests != 1 || a.Succeeded != 1 || a.Charged != (governor.Cost{Requests: 1, Input: 5, Output: 5}) {
		t.Errorf("flow a = %+v", a)
	}
	if b := st.Flows["b"]; b.Requests != 2 || b.Succeeded != 1 || b.Rejected != 1 {
		t.Errorf("flow b = %+v", b)
	}
	if st.Requests != 3 || st.Charged.Tokens() != 20 {
		t.Errorf("stats = %+v", st)
	}
}

// TestPeak: Stats.Peak is, per limit in force, the fullest its window was
// at an admission, the admitted charge included; refusals and charges that
// aged out do not raise it, and a limit not in force stays at 0.
func TestPeak(t *testing.T) {
	t.Parallel()
	m := newModel(t, ModelConfig{Limits: limits("rpm=4,tpm=100,tpd=1000")})
	peak := func(want map[governor.Limit]float64) {
		t.Helper()
		st := m.Stats()
		for l := range governor.NumLimits {
			if got := st.Peak[l]; math.Abs(got-want[l]) > 1e-12 {
				t.Errorf("peak %s = %v, want %v", l, got, want[l])
			}
		}
	}
	m.Submit(at(0), Request{Input: 10, MaxTokens: 10})
	peak(map[governor.Limit]float64{governor.RPM: 0.25, governor.TPM: 0.2, governor.TPD: 0.02})
	m.Submit(at(time.Second), Request{Input: 20, MaxTokens: 20})
	peak(map[governor.Limit]float64{governor.RPM: 0.5, governor.TPM: 0.6, governor.TPD: 0.06})
	// Refused (tpm would reach 110): nothing is charged, no peak moves.
	if r := m.Submit(at(2*time.Second), Request{Input: 40, MaxTokens: 10}); r.Status != 429 {
		t.Fatalf("status %d, want 429", r.Status)
	}
	peak(map[governor.Limit]float64{governor.RPM: 0.5, governor.TPM: 0.6, governor.TPD: 0.06})
	// A minute on, the first charges have aged out of the minute, not of
	// the day: the minute limits' peaks stay, the day's rises.
	m.Submit(at(70*time.Second), Request{Input: 5, MaxTokens: 5})
	peak(map[governor.Limit]float64{governor.RPM: 0.5, governor.TPM: 0.6, governor.TPD: 0.07})
	// Filled to the allowance exactly: the peak is 1, and no admission
	// takes it beyond.
	m.Submit(at(71*time.Second), Request{Input: 45, MaxTokens: 45})
	m.Submit(at(72*time.Second), Request{Input: 1, MaxTokens: 1})
	peak(map[governor.Limit]float64{governor.RPM: 0.5, governor.TPM: 1, governor.TPD: 0.16})
	if st := m.Stats(); st.Rejected != 2 || st.Succeeded != 4 {
		t.Fatalf("rejected %d, succeeded %d; want 2, 4", st.Rejected, st.Succeeded)
	}
	// /sim/stats serves the peaks of the limits in force.
	if data, err := json.Marshal(m.Stats()); err != nil || !strings.Contains(string(data), `"peak":{"rpm":0.5,"tpd":0.16,"tpm":1}`) {
		t.Errorf("stats JSON %s (%v): want the peaks of rpm, tpm and tpd", data, err)
	}

	// Under settle accounting the window holds the settled charges.
	s := newModel(t, ModelConfig{SettleOutput: true, Limits: limits("otpm=100")})
	s.Finish(at(0), s.Submit(at(0), Request{MaxTokens: 60, Output: 10}))
	s.Submit(at(time.Second), Request{MaxTokens: 50, Output: 50})
	if got := s.Stats().Peak[governor.OTPM]; got != 0.6 {
		t.Errorf("settle: otpm peak %v, want 0.6 (10 settled + 50 reserved)", got)
	}
}

// TestFlowStatsBounded: flow names come from clients; the stats keep a
// bounded number of them, each of bounded length.
func TestFlowStatsBounded(t *testing.T) {
	t.Parallel()
	m := newModel(t, ModelConfig{})
	long := strings.Repeat("é", 500)
	for i := range maxFlowStats + 50 {
		m.Submit(t0, Request{Flow: strconv.Itoa(i) + long, Input: 1, MaxTokens: 1})
	}
	st := m.Stats()
	if len(st.Flows) != maxFlowStats+1 || st.Flows[OtherFlows].Requests != 50 {
		t.Fatalf("%d flows, %d under %s", len(st.Flows), st.Flows[OtherFlows].Requests, OtherFlows)
	}
	for name := range st.Flows {
		if len(name) > maxFlowName || !utf8.ValidString(name) {
			t.Fatalf("flow name of %d bytes: %q…", len(name), name[:20])
		}
	}
}
