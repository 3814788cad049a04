package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/ui"
	"github.com/sluice-dev/sluice/run"
)

type fakeVersions struct {
	OtherVersionsFunc func(ctx context.Context) ([]run.VersionRuns, error)
	ResumeVersionFunc func(ctx context.Context, from string) (run.VersionReport, error)
	CancelVersionFunc func(ctx context.Context, from string) (run.VersionReport, error)
}

var _ ui.Versions = (*fakeVersions)(nil)

func (f *fakeVersions) OtherVersions(ctx context.Context) ([]run.VersionRuns, error) {
	if f.OtherVersionsFunc == nil {
		return nil, errUnexpected
	}
	return f.OtherVersionsFunc(ctx)
}

func (f *fakeVersions) ResumeVersion(ctx context.Context, from string) (run.VersionReport, error) {
	if f.ResumeVersionFunc == nil {
		return run.VersionReport{}, errUnexpected
	}
	return f.ResumeVersionFunc(ctx, from)
}

func (f *fakeVersions) CancelVersion(ctx context.Context, from string) (run.VersionReport, error) {
	if f.CancelVersionFunc == nil {
		return run.VersionReport{}, errUnexpected
	}
	return f.CancelVersionFunc(ctx, from)
}

// waiting are the runs of two other versions, one with a function this
// process lacks.
var waiting = []run.VersionRuns{
	{Version: "release/1", Runs: map[string]int64{"summarize": 3, "summarize/chunk": 1}, Total: 4},
	{Version: "v0", Runs: map[string]int64{"old": 1}, Total: 1, Unknown: []string{"old"}},
}

// The overview and the runs page show a notice per other version, with its
// counts and the two buttons as POST forms carrying the page's CSRF token;
// the runs list shows a run of another version as such, with its version,
// never as running.
func TestOtherVersionsNotice(t *testing.T) {
	t.Parallel()
	e := &fakeEngine{RunsFunc: func(context.Context, engine.RunFilter) ([]run.Summary, error) {
		return []run.Summary{
			{ID: "summarize:d1", Function: "summarize", Status: run.OtherVersion, Version: "release/1", CreatedAt: now, StartedAt: now},
			{ID: "summarize:d2", Function: "summarize", Status: run.Running, Version: "release/2", CreatedAt: now, StartedAt: now},
		}, nil
	}}
	vs := &fakeVersions{OtherVersionsFunc: func(context.Context) ([]run.VersionRuns, error) { return waiting, nil }}
	h := newUI(t, ui.Config{Engine: e, Versions: vs}, nil)
	for _, path := range []string{"/", "/runs"} {
		t.Run(path, func(t *testing.T) {
			_, page := get(t, h, path)
			notices := page.all(classed("version-notice"))
			if len(notices) != 2 {
				t.Fatalf("%d notices, want one per other version", len(notices))
			}
			hasText(t, "release/1", notices[0], "4 runs of version release/1 wait", "summarize: 3", "summarize/chunk: 1")
			hasText(t, "v0", notices[1], "1 run of version v0 waits", "old: 1", "Not functions of this process", "old")
			if got := notices[0].all(classed("note")); len(got) != 0 {
				t.Errorf("release/1 says it has unknown functions: %v", got)
			}
		})
	}
	_, page := get(t, h, "/")
	forms := map[string]bool{}
	for _, f := range page.one(t, "release/1", with("data-version", "release/1")).all(func(n node) bool { return n.Name == "form" }) {
		if f.Attrs["method"] != "post" {
			t.Errorf("form to %s is %s, want post", f.Attrs["action"], f.Attrs["method"])
		}
		if len(f.all(func(n node) bool { return n.Attrs["name"] == "csrf" && n.Attrs["value"] != "" })) != 1 {
			t.Errorf("form to %s has no CSRF token", f.Attrs["action"])
		}
		forms[f.Attrs["action"]] = true
	}
	base := "/versions/" + url.PathEscape("release/1")
	if len(forms) != 2 || !forms[base+"/resume"] || !forms[base+"/cancel"] {
		t.Errorf("forms %v, want resume and cancel of release/1", forms)
	}
	_, page = get(t, h, "/runs")
	row := page.one(t, "other version's run", with("data-run", "summarize:d1"))
	if row.Attrs["data-status"] != "other_version" || row.Attrs["data-version"] != "release/1" {
		t.Errorf("row %v, want other_version of release/1", row.Attrs)
	}
	hasText(t, "other version's run", row, "other_version", "version release/1")
	if strings.Contains(row.text(), "running") {
		t.Errorf("a run of another version shows as running: %q", row.text())
	}
	opts := page.all(func(n node) bool { return n.Name == "option" && n.Attrs["value"] == "other_version" })
	if len(opts) != 1 {
		t.Errorf("the status filter does not offer other_version")
	}
}

// The buttons resume or cancel the runs of the version the path names and
// show what was done with each; the app's own version is a conflict, a bad
// name a 400, a post without the form's token is refused, and a dashboard
// without Versions has no such page.
func TestResumeAndCancelVersion(t *testing.T) {
	t.Parallel()
	var asked []string
	move := func(verb string) func(context.Context, string) (run.VersionReport, error) {
		return func(_ context.Context, from string) (run.VersionReport, error) {
			asked = append(asked, verb+" "+from)
			switch from {
			case "current":
				return run.VersionReport{}, fmt.Errorf("version %q: %w", from, engine.ErrSameVersion)
			case "bad version":
				return run.VersionReport{}, &engine.InvalidError{What: "version", Problem: `"bad version": want 1-128 letters`}
			}
			return run.VersionReport{Version: from, Done: []string{"summarize:d1", "summarize:d1-chunk"},
				Skipped: []run.SkippedRun{{ID: "old:x", Reason: `"old" is not a function of this process`}}}, nil
		}
	}
	vs := &fakeVersions{
		OtherVersionsFunc: func(context.Context) ([]run.VersionRuns, error) { return waiting, nil },
		ResumeVersionFunc: move("resume"),
		CancelVersionFunc: move("cancel"),
	}
	h := newUI(t, ui.Config{Versions: vs}, nil)
	_, body := do(t, h, req{path: "/"})
	csrf := url.Values{"csrf": {csrfOf(t, body)}}
	release := "/versions/" + url.PathEscape("release/1")

	res, body := do(t, h, req{method: "POST", path: release + "/resume", form: csrf})
	if res.StatusCode != http.StatusOK {
		t.Fatalf("resume: %d:\n%s", res.StatusCode, body)
	}
	rep := parse(t, body).one(t, "report", classed("version-report"))
	hasText(t, "resume report", rep, "Resumed here: 2", "summarize:d1", "Left as they were: 1", "old:x", `"old" is not a function of this process`)
	if len(rep.all(with("href", "/runs/summarize:d1"))) != 1 {
		t.Errorf("the report does not link the resumed run")
	}
	res, body = do(t, h, req{method: "POST", path: release + "/cancel", form: csrf})
	if res.StatusCode != http.StatusOK || !strings.Contains(body, "Cancelled: 2") {
		t.Fatalf("cancel: %d:\n%s", res.StatusCode, body)
	}
	for _, tc := range []struct {
		name, path string
		form       url.Values
		status     int
	}{
		{"the app's own version", "/versions/current/resume", csrf, http.StatusConflict},
		{"a bad name", "/versions/" + url.PathEscape("bad version") + "/cancel", csrf, http.StatusBadRequest},
		{"no CSRF token", release + "/resume", url.Values{}, http.StatusForbidden},
	} {
		if res, body := do(t, h, req{method: "POST", path: tc.path, form: tc.form}); res.StatusCode != tc.status {
			t.Errorf("%s: %d, want %d:\n%s", tc.name, res.StatusCode, tc.status, body)
		}
	}
	want := []string{"resume release/1", "cancel release/1", "resume current", "cancel bad version"}
	if fmt.Sprint(asked) != fmt.Sprint(want) {
		t.Errorf("asked %q, want %q (nothing for the post without its token)", asked, want)
	}

	bare := newUI(t, ui.Config{Engine: &fakeEngine{RunDetailFunc: func(context.Context, string, int) (*engine.RunDetail, error) {
		return detail(run.Running), nil
	}}}, nil)
	if _, body := do(t, bare, req{path: "/"}); strings.Contains(body, "version-notice") {
		t.Errorf("a dashboard without Versions shows a notice")
	}
	_, body = do(t, bare, req{path: "/runs/x"})
	if res, _ := do(t, bare, req{method: "POST", path: release + "/resume", form: url.Values{"csrf": {csrfOf(t, body)}}}); res.StatusCode != http.StatusNotFound {
		t.Errorf("resume without Versions: %d, want 404", res.StatusCode)
	}
}
