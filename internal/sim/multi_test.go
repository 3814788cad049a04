package sim

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/llm"
)

const (
	small = "llama-3.1-8b-instant"
	large = "llama-3.3-70b-versatile"
)

// multiFixture is a server of several models on a settable clock.
type multiFixture struct {
	*fixture
	srv    *Server
	models map[string]*forecast.Model
}

// serveMulti serves a model of each name with cfg and the limits given,
// on a clock at t0 + 30 s.
func serveMulti(t *testing.T, cfg forecast.ModelConfig, scfg ServerConfig, limitsByName map[string]string) *multiFixture {
	t.Helper()
	models := map[string]*forecast.Model{}
	for name, ls := range limitsByName {
		c := cfg
		c.Model, c.Limits = name, limits(ls)
		models[name] = servedModel(t, c)
	}
	ck := &setClock{t: t0.Add(30 * time.Second)}
	if scfg.Now == nil {
		scfg.Now = ck.Now
	}
	s, err := NewMultiServer(models, scfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return &multiFixture{fixture: &fixture{url: ts.URL, clock: ck}, srv: s, models: models}
}

// get fetches path and decodes its JSON into v.
func (f *fixture) get(t *testing.T, path string, v any) {
	t.Helper()
	resp, err := http.Get(f.url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d", path, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// statsJSON is the part of GET /sim/stats these tests read.
type statsJSON struct {
	Requests  int64              `json:"requests"`
	Succeeded int64              `json:"succeeded"`
	Rejected  int64              `json:"rejected"`
	Charged   map[string]int64   `json:"charged"`
	Limits    map[string]int64   `json:"limits"`
	Peak      map[string]float64 `json:"peak"`
	Outage    map[string]int64   `json:"outage"`
	Models    map[string]struct {
		Requests int64            `json:"requests"`
		Rejected int64            `json:"rejected"`
		Charged  map[string]int64 `json:"charged"`
		Limits   map[string]int64 `json:"limits"`
		Outage   map[string]int64 `json:"outage"`
	} `json:"models"`
}

// TestMultiModelLimitsApart: each model has its own limits: filling one
// model's TPM leaves the other admitting, each answer carries its model's
// headers, and each model counts only its own requests.
func TestMultiModelLimitsApart(t *testing.T) {
	t.Parallel()
	f := serveMulti(t, forecast.ModelConfig{Profile: "groq"}, ServerConfig{},
		map[string]string{small: "rpm=30,tpm=1000", large: "rpm=30,tpm=5000"})
	if r := f.post(t, chatBodyModel(small, "x", 900)); r.status != 200 || r.header.Get("x-ratelimit-limit-tokens") != "1000" {
		t.Fatalf("%s: %d limit %q", small, r.status, r.header.Get("x-ratelimit-limit-tokens"))
	}
	r := f.post(t, chatBodyModel(small, "x", 900))
	if r.status != 429 || !strings.Contains(r.errorMessage(t), "for model `"+small+"`") {
		t.Fatalf("%s over its TPM: %d %s", small, r.status, r.body)
	}
	for range 3 {
		if r := f.post(t, chatBodyModel(large, "x", 900)); r.status != 200 || r.header.Get("x-ratelimit-limit-tokens") != "5000" {
			t.Fatalf("%s while %s is full: %d %s", large, small, r.status, r.body)
		}
	}
	if st := f.models[small].Stats(); st.Requests != 2 || st.Rejected != 1 {
		t.Errorf("%s stats %+v", small, st)
	}
	if st := f.models[large].Stats(); st.Requests != 3 || st.Rejected != 0 {
		t.Errorf("%s stats %+v", large, st)
	}
	if f.srv.ModelNamed(large) != f.models[large] || f.srv.ModelNamed("other") != nil || f.srv.Model() != f.models[small] {
		t.Error("ModelNamed or Model returns the wrong model")
	}

	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	f.get(t, "/v1/models", &list)
	if len(list.Data) != 2 || list.Data[0].ID != small || list.Data[1].ID != large {
		t.Errorf("/v1/models = %+v", list)
	}
}

// TestMultiModelNotFound: a request naming a model not served gets the
// profile's 404 and reaches no model.
func TestMultiModelNotFound(t *testing.T) {
	t.Parallel()
	want := map[llm.Profile]string{
		"openai":    `{"error":{"message":"The model ` + "`gpt-9`" + ` does not exist or you do not have access to it.","type":"invalid_request_error","param":null,"code":"model_not_found"}}`,
		"groq":      `{"error":{"message":"The model ` + "`gpt-9`" + ` does not exist or you do not have access to it.","type":"invalid_request_error","code":"model_not_found"}}`,
		"anthropic": `{"type":"error","error":{"type":"not_found_error","message":"model: gpt-9"}}`,
	}
	for _, profile := range llm.Profiles() {
		t.Run(string(profile), func(t *testing.T) {
			t.Parallel()
			f := serveMulti(t, forecast.ModelConfig{Profile: profile}, ServerConfig{}, map[string]string{small: "", large: ""})
			r := f.post(t, chatBodyModel("gpt-9", "x", 10))
			if r.status != 404 || string(r.body) != want[profile] {
				t.Errorf("%d %s\nwant 404 %s", r.status, r.body, want[profile])
			}
			if r := f.post(t, chatBodyModel(strings.Repeat("m", MaxModelName+1), "x", 10)); r.status != 400 || !strings.Contains(r.errorMessage(t), "at most 256 bytes") {
				t.Errorf("a long name: %d %s", r.status, r.body)
			}
			for name, m := range f.models {
				if st := m.Stats(); st.Requests != 0 {
					t.Errorf("%s counted a request for another model: %+v", name, st)
				}
			}
		})
	}
}

// TestNewMultiServerRefuses: a server of several models needs at least one
// model, distinct models, one profile and names within bounds.
func TestNewMultiServerRefuses(t *testing.T) {
	t.Parallel()
	groq := servedModel(t, forecast.ModelConfig{Profile: "groq"})
	other := servedModel(t, forecast.ModelConfig{Profile: "groq"})
	anth := servedModel(t, forecast.ModelConfig{Profile: "anthropic"})
	for _, tc := range []struct {
		models map[string]*forecast.Model
		cfg    ServerConfig
		want   string
	}{
		{nil, ServerConfig{}, "no models to serve"},
		{map[string]*forecast.Model{"a": groq}, ServerConfig{Models: []string{"a"}}, "ServerConfig.Models"},
		{map[string]*forecast.Model{"a": groq, "b": anth}, ServerConfig{}, `model "b" has profile anthropic, model "a" groq`},
		{map[string]*forecast.Model{"a": groq, "b": groq}, ServerConfig{}, `models "a" and "b" are the same forecast.Model`},
		{map[string]*forecast.Model{"": groq, "b": other}, ServerConfig{}, "a model name is empty"},
		{map[string]*forecast.Model{strings.Repeat("m", 257): groq}, ServerConfig{}, "at most 256 bytes, got 257"},
		{map[string]*forecast.Model{"a": groq, "b": nil}, ServerConfig{}, `model "b": no forecast.Model`},
	} {
		if _, err := NewMultiServer(tc.models, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.want, err, tc.want)
		}
	}
}

// TestMultiStats: GET /sim/stats of several models has the totals, each
// model under "models" with its limits, and the outage counts; that of one
// model keeps its shape, with the outage counts and no "models".
func TestMultiStats(t *testing.T) {
	t.Parallel()
	f := serveMulti(t, forecast.ModelConfig{Profile: "openai"}, ServerConfig{},
		map[string]string{small: "rpm=1", large: "tpm=5000"})
	f.post(t, chatBodyModel(small, "a", 10))
	f.post(t, chatBodyModel(small, "b", 10)) // over rpm
	f.post(t, chatBodyModel(large, "c", 20))
	if err := f.srv.SetOutage(large, Outage5xx, time.Hour); err != nil {
		t.Fatal(err)
	}
	f.post(t, chatBodyModel(large, "d", 20))
	var st statsJSON
	f.get(t, "/sim/stats", &st)
	s, l := st.Models[small], st.Models[large]
	if st.Requests != 3 || st.Succeeded != 2 || st.Rejected != 1 || st.Charged["rpm"] != 2 || st.Outage["5xx"] != 1 ||
		len(st.Limits) != 0 || len(st.Peak) != 0 {
		t.Errorf("totals %+v", st)
	}
	if s.Requests != 2 || s.Rejected != 1 || s.Limits["rpm"] != 1 || s.Outage["5xx"] != 0 ||
		l.Requests != 1 || l.Charged["tpm"] != prompt("c")+20 || l.Limits["tpm"] != 5000 || l.Outage["5xx"] != 1 || l.Outage["down"] != 0 {
		t.Errorf("per model %+v", st.Models)
	}

	one := serve(t, forecast.ModelConfig{Profile: "openai", Limits: limits("rpm=5")}, ServerConfig{})
	one.post(t, chatBody("x", 10))
	var raw map[string]json.RawMessage
	one.get(t, "/sim/stats", &raw)
	for _, k := range []string{"requests", "succeeded", "rejected", "too_large", "rejected_by_status", "rejected_by_limit", "faults", "charged", "limits", "peak", "flows", "outage"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("one model's stats lack %q: %v", k, raw)
		}
	}
	if _, ok := raw["models"]; ok || string(raw["outage"]) != `{"429":0,"5xx":0,"down":0,"overload":0}` {
		t.Errorf("one model's stats: models %s outage %s", raw["models"], raw["outage"])
	}
}

// TestOutageModes: each mode answers as specified from its start until its
// end on the server's clock, in each profile's shape, and charges nothing.
func TestOutageModes(t *testing.T) {
	t.Parallel()
	type check func(t *testing.T, p llm.Profile, r reply, err error)
	status := func(t *testing.T, r reply, err error, want int) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if r.status != want {
			t.Fatalf("status %d %s, want %d", r.status, r.body, want)
		}
	}
	for _, tc := range []struct {
		mode  OutageMode
		check check
	}{
		{Outage5xx, func(t *testing.T, p llm.Profile, r reply, err error) {
			status(t, r, err, 500)
			if e := r.errorReply(t); e.Error.Type != map[llm.Profile]string{"openai": "server_error", "groq": "internal_server_error", "anthropic": "api_error"}[p] {
				t.Errorf("body %s", r.body)
			}
		}},
		{OutageOverload, func(t *testing.T, p llm.Profile, r reply, err error) {
			want := 503
			if p == "anthropic" {
				want = 529
			}
			status(t, r, err, want)
			e := r.errorReply(t)
			if !strings.Contains(strings.ToLower(e.Error.Message), "overloaded") || p == "anthropic" && e.Error.Type != "overloaded_error" {
				t.Errorf("body %s", r.body)
			}
			var ov *llm.OverloadedError
			if !errors.As(p.Classify(r.status, r.header, r.body), &ov) {
				t.Errorf("a client does not read %s as an overload", r.body)
			}
		}},
		{Outage429, func(t *testing.T, p llm.Profile, r reply, err error) {
			status(t, r, err, 429)
			// 50 minutes of the hour are left.
			if got := r.header.Get("retry-after"); got != "3000" {
				t.Errorf("retry-after %q, want 3000", got)
			}
			if !strings.Contains(r.errorReply(t).Error.Message, "requests per day") {
				t.Errorf("body %s", r.body)
			}
			var rl *llm.RateLimitError
			if e := p.Classify(r.status, r.header, r.body); !errors.As(e, &rl) || !rl.LimitKnown || rl.Limit.String() != "rpd" || rl.Max != 1000 || rl.RetryAfter != 50*time.Minute {
				t.Errorf("a client reads %s as %v", r.body, e)
			}
		}},
		{OutageDown, func(t *testing.T, p llm.Profile, r reply, err error) {
			if err == nil {
				t.Fatalf("got %d %s, want no answer", r.status, r.body)
			}
		}},
	} {
		for _, profile := range llm.Profiles() {
			t.Run(tc.mode.String()+"/"+string(profile), func(t *testing.T) {
				t.Parallel()
				f := serveMulti(t, forecast.ModelConfig{Profile: profile}, ServerConfig{},
					map[string]string{small: "rpd=1000,tpm=100000", large: "rpm=100"})
				born := f.clock.Now()
				if err := f.srv.ScheduleOutages(Outage{Model: small, Mode: tc.mode, Start: 10 * time.Minute, For: time.Hour}); err != nil {
					t.Fatal(err)
				}
				before := f.models[small].Stats()
				f.clock.Set(born.Add(10*time.Minute - time.Nanosecond))
				if r, err := postRaw(f.url, chatBodyModel(small, "x", 10)); err != nil || r.status != 200 {
					t.Fatalf("before the outage: %d %v", r.status, err)
				}
				f.clock.Set(born.Add(20 * time.Minute))
				r, err := postRaw(f.url, chatBodyModel(small, "x", 10))
				tc.check(t, profile, r, err)
				if r, err := postRaw(f.url, chatBodyModel(large, "x", 10)); err != nil || r.status != 200 {
					t.Errorf("the other model in the outage: %d %v", r.status, err)
				}
				if st := f.models[small].Stats(); st.Requests != before.Requests+1 || st.Charged.Requests != before.Charged.Requests+1 {
					t.Errorf("the outage's request reached the model: %+v", st)
				}
				f.clock.Set(born.Add(70 * time.Minute))
				if r, err := postRaw(f.url, chatBodyModel(small, "x", 10)); err != nil || r.status != 200 {
					t.Errorf("after the outage: %d %v", r.status, err)
				}
				var st statsJSON
				f.get(t, "/sim/stats", &st)
				if st.Models[small].Outage[tc.mode.String()] != 1 || st.Models[small].Requests != 2 || st.Outage[tc.mode.String()] != 1 {
					t.Errorf("stats %+v", st)
				}
			})
		}
	}
}

// postRaw posts a chat request on a connection of its own, returning the
// transport's error rather than failing (an outage may close it).
func postRaw(url, body string) (reply, error) {
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	return reply{resp.StatusCode, resp.Header, b}, nil
}

// TestOutageOneModel: a server of one model has outages too, under any of
// its names, and they hit requests naming any model.
func TestOutageOneModel(t *testing.T) {
	t.Parallel()
	m := servedModel(t, forecast.ModelConfig{Profile: "groq"})
	ck := &setClock{t: t0}
	s := NewServer(m, ServerConfig{Models: []string{"a", "b"}, Now: ck.Now})
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	if err := s.ScheduleOutages(Outage{Model: "b", Mode: OutageOverload, For: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if r, err := postRaw(ts.URL, chatBodyModel("anything", "x", 10)); err != nil || r.status != 503 {
		t.Fatalf("in the outage: %d %v", r.status, err)
	}
	ck.Set(t0.Add(time.Minute))
	if r, err := postRaw(ts.URL, chatBodyModel("anything", "x", 10)); err != nil || r.status != 200 {
		t.Fatalf("after it: %d %v", r.status, err)
	}
	if err := s.ScheduleOutages(Outage{Model: "anything", Mode: Outage5xx, For: time.Minute}); err == nil || !strings.Contains(err.Error(), `model "anything" is not served (the server serves a, b)`) {
		t.Errorf("an outage of a name not listed: %v", err)
	}
}

// TestScheduleOutages: outages of a model may not overlap; times are bounded;
// a call schedules all its outages or none.
func TestScheduleOutages(t *testing.T) {
	t.Parallel()
	f := serveMulti(t, forecast.ModelConfig{Profile: "openai"}, ServerConfig{}, map[string]string{small: "", large: ""})
	for _, o := range []Outage{
		{Model: small, Mode: Outage5xx, Start: time.Hour, For: time.Hour},
		{Model: small, Mode: OutageDown, Start: 0, For: time.Hour}, // ends as the first begins
		{Model: large, Mode: Outage429, Start: time.Hour, For: time.Hour},
	} {
		if err := f.srv.ScheduleOutages(o); err != nil {
			t.Fatalf("%s: %v", o, err)
		}
	}
	for _, tc := range []struct {
		o    Outage
		want string
	}{
		{Outage{Model: small, Mode: Outage429, Start: 90 * time.Minute, For: time.Hour}, "overlaps outage " + small + "=5xx@1h0m0s+1h0m0s"},
		{Outage{Model: small, Mode: Outage429, Start: 0, For: 3 * time.Hour}, "overlaps outage " + small + "=down@0s+1h0m0s"},
		{Outage{Model: "x", Mode: Outage429, For: time.Hour}, `model "x" is not served`},
		{Outage{Model: small, Mode: Outage429, Start: -time.Second, For: time.Hour}, "start -1s is not 0 or more"},
		{Outage{Model: small, Mode: Outage429, Start: 5 * time.Hour}, "duration 0s is not more than 0"},
		{Outage{Model: small, Mode: Outage429, Start: 5 * time.Hour, For: MaxOutage + 1}, "is more than the bound of 8784h0m0s (366 days)"},
		{Outage{Model: small, Mode: 9, Start: 5 * time.Hour, For: time.Hour}, "unknown mode 9"},
	} {
		if err := f.srv.ScheduleOutages(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.o, err, tc.want)
		}
	}
	// All or none: two that overlap each other refuse the third too.
	err := f.srv.ScheduleOutages(Outage{Model: large, Mode: OutageDown, Start: 10 * time.Hour, For: time.Hour},
		Outage{Model: small, Mode: OutageDown, Start: 10 * time.Hour, For: time.Hour},
		Outage{Model: small, Mode: Outage5xx, Start: 10*time.Hour + time.Minute, For: time.Hour})
	if err == nil || !strings.Contains(err.Error(), "outage "+small+"=5xx@10h1m0s+1h0m0s overlaps outage "+small+"=down@10h0m0s+1h0m0s") {
		t.Fatalf("overlapping outages given together: %v", err)
	}
	f.clock.Set(f.clock.Now().Add(10*time.Hour + 30*time.Minute))
	if r := f.post(t, chatBodyModel(large, "x", 10)); r.status != 200 {
		t.Errorf("an outage of a refused call was scheduled: %d", r.status)
	}
}

func TestParseOutage(t *testing.T) {
	t.Parallel()
	o, err := ParseOutage("llama-3.1-8b-instant=5xx@10m+1h")
	if err != nil || o != (Outage{Model: "llama-3.1-8b-instant", Mode: Outage5xx, Start: 10 * time.Minute, For: time.Hour}) {
		t.Fatalf("%+v %v", o, err)
	}
	if back, err := ParseOutage(o.String()); err != nil || back != o {
		t.Errorf("%s reads back as %+v %v", o, back, err)
	}
	if o, err := ParseOutage("meta-llama/llama-4=down@0s+30s"); err != nil || o.Mode != OutageDown || o.Model != "meta-llama/llama-4" {
		t.Errorf("%+v %v", o, err)
	}
	for _, tc := range []struct{ in, want string }{
		{"m", "want MODEL=MODE@START+DURATION"},
		{"=5xx@0s+1h", "no model before '='"},
		{"m=5xx", "no '@' after the mode"},
		{"m=broken@0s+1h", `outage mode "broken": want one of 5xx, overload, 429, down`},
		{"m=5xx@10m", "no '+' after the start"},
		{"m=5xx@soon+1h", `start "soon" is not a Go duration`},
		{"m=5xx@10m+ever", `duration "ever" is not a Go duration`},
		{"m=5xx@10m+0s", "duration 0s is not more than 0"},
		{"m=5xx@9000h+1h", "start 9000h0m0s is more than the bound"},
		{"m=5xx@0s+9000h", "duration 9000h0m0s is more than the bound"},
	} {
		if _, err := ParseOutage(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.in, err, tc.want)
		}
	}
}

// postOutage posts body to /sim/outage with the headers given.
func (f *fixture) postOutage(t *testing.T, body string, header ...string) reply {
	t.Helper()
	return f.postTo(t, "/sim/outage", body, header...)
}

// TestOutageEndpoint: POST /sim/outage begins an outage now and "for":"0s"
// ends it; it needs the key, and refuses bad input with a 400 naming the
// field.
func TestOutageEndpoint(t *testing.T) {
	t.Parallel()
	const key = "sk-sim-outage-key"
	auth := []string{"Authorization", "Bearer " + key}
	f := serveMulti(t, forecast.ModelConfig{Profile: "groq"}, ServerConfig{APIKey: key}, map[string]string{small: "", large: ""})
	if r := f.postOutage(t, `{"model":"`+small+`","mode":"429","for":"1h"}`); r.status != 401 {
		t.Fatalf("without the key: %d %s", r.status, r.body)
	}
	for _, tc := range []struct{ body, want string }{
		{`[]`, "request body: not a JSON object"},
		{`{"model":"` + small + `","mode":"429","for":"1h","extra":1}`, `"extra": unknown field`},
		{`{"mode":"429","for":"1h"}`, "model: missing"},
		{`{"model":7,"mode":"429","for":"1h"}`, "model: want a string, got an integer"},
		{`{"model":"gpt-9","mode":"429","for":"1h"}`, `model: model "gpt-9" is not served (the server serves ` + small + ", " + large + ")"},
		{`{"model":"` + small + `","mode":"slow","for":"1h"}`, `mode: "slow" is not one of 5xx, overload, 429, down`},
		{`{"model":"` + small + `","for":"1h"}`, "mode: missing"},
		{`{"model":"` + small + `","mode":"429"}`, "for: missing"},
		{`{"model":"` + small + `","mode":"429","for":"a while"}`, `for: "a while" is not a Go duration`},
		{`{"model":"` + small + `","mode":"429","for":3600}`, "for: want a string, got an integer"},
		{`{"model":"` + small + `","mode":"429","for":"-1h"}`, "for: -1h0m0s is not 0 or more"},
		{`{"model":"` + small + `","mode":"429","for":"8785h"}`, "for: 8785h0m0s is more than the bound of 8784h0m0s (366 days)"},
		{`{"model":"` + small + `","mode":"429","for":"` + strings.Repeat("9", 5000) + `h"}`, "request body: more than 4096 bytes"},
	} {
		r := f.postOutage(t, tc.body, auth...)
		if r.status != 400 || !strings.Contains(r.errorMessage(t), tc.want) {
			t.Errorf("%.80s: %d %s, want 400 %q", tc.body, r.status, r.body, tc.want)
		}
	}

	now := f.clock.Now()
	r := f.postOutage(t, `{"model":"`+small+`","mode":"429","for":"1h"}`, auth...)
	var got struct {
		Model  string `json:"model"`
		Outage *struct {
			Mode       string
			Start, End time.Time
		} `json:"outage"`
	}
	if err := json.Unmarshal(r.body, &got); err != nil || r.status != 200 || got.Model != small || got.Outage == nil ||
		got.Outage.Mode != "429" || !got.Outage.Start.Equal(now) || !got.Outage.End.Equal(now.Add(time.Hour)) {
		t.Fatalf("%d %s", r.status, r.body)
	}
	r = f.post(t, chatBodyModel(small, "x", 10), auth...)
	if r.status != 429 || r.header.Get("retry-after") != "3600" {
		t.Fatalf("in the outage: %d retry-after %q", r.status, r.header.Get("retry-after"))
	}
	// The model has no RPD: the body names none a client could learn.
	var rl *llm.RateLimitError
	if e := llm.Groq.Classify(r.status, r.header, r.body); !errors.As(e, &rl) || rl.Limit.String() != "rpd" || rl.Max != 0 || rl.RetryAfter != time.Hour {
		t.Errorf("a client reads %s as %v", r.body, e)
	}
	f.clock.Set(now.Add(30*time.Minute + 500*time.Millisecond))
	if r := f.post(t, chatBodyModel(small, "x", 10), auth...); r.status != 429 || r.header.Get("retry-after") != "1800" {
		t.Fatalf("half way: %d retry-after %q", r.status, r.header.Get("retry-after"))
	}
	if r := f.post(t, chatBodyModel(large, "x", 10), auth...); r.status != 200 {
		t.Fatalf("the other model: %d", r.status)
	}
	// Another mode replaces it; "0s" ends it.
	if r := f.postOutage(t, `{"model":"`+small+`","mode":"5xx","for":"2h"}`, auth...); r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if r := f.post(t, chatBodyModel(small, "x", 10), auth...); r.status != 500 {
		t.Fatalf("after the replacement: %d", r.status)
	}
	r = f.postOutage(t, `{"model":"`+small+`","for":"0s"}`, auth...)
	if r.status != 200 || string(r.body) != `{"model":"`+small+`","outage":null}`+"\n" {
		t.Fatalf("ending it: %d %q", r.status, r.body)
	}
	if r := f.post(t, chatBodyModel(small, "x", 10), auth...); r.status != 200 {
		t.Fatalf("after the end: %d %s", r.status, r.body)
	}
}

// TestSetOutageCutsScheduled: an outage begun now takes the place of the
// scheduled ones it covers, and a later one still comes.
func TestSetOutageCutsScheduled(t *testing.T) {
	t.Parallel()
	f := serveMulti(t, forecast.ModelConfig{Profile: "openai"}, ServerConfig{}, map[string]string{small: ""})
	born := f.clock.Now()
	for _, o := range []Outage{
		{Model: small, Mode: Outage5xx, Start: 10 * time.Minute, For: 10 * time.Minute},
		{Model: small, Mode: OutageOverload, Start: 30 * time.Minute, For: 20 * time.Minute},
	} {
		if err := f.srv.ScheduleOutages(o); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.srv.SetOutage(small, Outage429, 40*time.Minute); err != nil { // until 40m: covers the first, cuts the second
		t.Fatal(err)
	}
	for _, tc := range []struct {
		at   time.Duration
		want int
	}{{15 * time.Minute, 429}, {39 * time.Minute, 429}, {40 * time.Minute, 503}, {50 * time.Minute, 200}} {
		f.clock.Set(born.Add(tc.at))
		if r := f.post(t, chatBodyModel(small, "x", 10)); r.status != tc.want {
			t.Errorf("at %s: %d, want %d", tc.at, r.status, tc.want)
		}
	}
	if err := f.srv.SetOutage(small, Outage429, MaxOutage+1); err == nil || !strings.Contains(err.Error(), "more than the bound") {
		t.Errorf("too long: %v", err)
	}
	if err := f.srv.SetOutage("x", Outage429, time.Hour); err == nil || !strings.Contains(err.Error(), `model "x" is not served`) {
		t.Errorf("a model not served: %v", err)
	}
}
