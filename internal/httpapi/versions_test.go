package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/httpapi"
	"github.com/sluice-dev/sluice/run"
)

// GET /v1/versions names this process's version and counts the runs of the
// others; POST …/resume and …/cancel answer the engine's report for the
// version the path names (a name with a slash, escaped, included). The
// current version is a conflict, a bad name a 400 naming the field, and
// every route needs the token.
func TestVersions(t *testing.T) {
	t.Parallel()
	var asked []string
	move := func(verb string) func(string) (run.VersionReport, error) {
		return func(from string) (run.VersionReport, error) {
			asked = append(asked, verb+" "+from)
			if err := engine.CheckVersion(from); err != nil {
				return run.VersionReport{}, err
			}
			if from == "current" {
				return run.VersionReport{}, fmt.Errorf("version %q: %w", from, engine.ErrSameVersion)
			}
			return run.VersionReport{Version: from, Done: []string{"f:1"}, Skipped: []run.SkippedRun{{ID: "g:1", Reason: `"g" is not a function of this process`}}}, nil
		}
	}
	fe := &fakeEngine{
		OtherVersionsFunc: func() ([]run.VersionRuns, error) {
			return []run.VersionRuns{{Version: "release/1", Runs: map[string]int64{"f": 2, "g": 1}, Total: 3, Unknown: []string{"g"}}}, nil
		},
		ResumeVersionFunc: move("resume"),
		CancelVersionFunc: move("cancel"),
	}
	h := httpapi.New(httpapi.Config{Engine: fe, Token: "s3cret"})
	serve := func(method, path, token string) (int, string) {
		r := httptest.NewRequest(method, path, nil)
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code, w.Body.String()
	}

	code, body := serve("GET", "/v1/versions", "s3cret")
	var list struct {
		Current string
		Others  []run.VersionRuns
	}
	if err := json.Unmarshal([]byte(body), &list); err != nil || code != 200 {
		t.Fatalf("GET /v1/versions: %d %s (%v)", code, body, err)
	}
	if list.Current != "current" || len(list.Others) != 1 || list.Others[0].Total != 3 || list.Others[0].Runs["g"] != 1 || list.Others[0].Unknown[0] != "g" {
		t.Errorf("GET /v1/versions: %+v", list)
	}

	release := "/v1/versions/" + url.PathEscape("release/1")
	for _, verb := range []string{"resume", "cancel"} {
		code, body := serve("POST", release+"/"+verb, "s3cret")
		var rep run.VersionReport
		if err := json.Unmarshal([]byte(body), &rep); err != nil || code != 200 {
			t.Fatalf("%s: %d %s (%v)", verb, code, body, err)
		}
		if rep.Version != "release/1" || len(rep.Done) != 1 || len(rep.Skipped) != 1 || !strings.Contains(rep.Skipped[0].Reason, "not a function") {
			t.Errorf("%s: %+v", verb, rep)
		}
	}

	for _, tc := range []struct {
		method, path, token string
		code                int
		says                string
	}{
		{"POST", "/v1/versions/current/resume", "s3cret", 409, "own version"},
		{"POST", "/v1/versions/current/cancel", "s3cret", 409, "own version"},
		{"POST", "/v1/versions/" + url.PathEscape("-x y") + "/resume", "s3cret", 400, `{"error":"version: `},
		{"GET", "/v1/versions", "", 401, "bearer token"},
		{"POST", release + "/resume", "wrong", 401, "bearer token"},
		{"POST", release + "/cancel", "", 401, "bearer token"},
		{"GET", release + "/resume", "s3cret", 405, ""},
	} {
		code, body := serve(tc.method, tc.path, tc.token)
		if code != tc.code || !strings.Contains(body, tc.says) {
			t.Errorf("%s %s: %d %s, want %d saying %q", tc.method, tc.path, code, body, tc.code, tc.says)
		}
	}
	want := []string{"resume release/1", "cancel release/1", "resume current", "cancel current", "resume -x y"}
	if fmt.Sprint(asked) != fmt.Sprint(want) {
		t.Errorf("the engine was asked %q, want %q", asked, want)
	}
}
