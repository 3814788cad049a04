package ui

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"slices"

	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/httperr"
	"github.com/sluice-dev/sluice/run"
)

// Versions are the unfinished runs recorded under versions other than the
// app's, which no process of the app's version executes by itself: the
// notice of the overview and the runs page, and its buttons.
type Versions interface {
	// OtherVersions counts them by version and function.
	OtherVersions(ctx context.Context) ([]run.VersionRuns, error)
	// ResumeVersion resumes those of version from under the app's
	// version; CancelVersion cancels them. Both say what they did with
	// each run, and wrap engine.ErrSameVersion for the app's own version.
	ResumeVersion(ctx context.Context, from string) (run.VersionReport, error)
	CancelVersion(ctx context.Context, from string) (run.VersionReport, error)
}

var _ Versions = (*engine.Engine)(nil)

// versionView is one other version in a page's notice.
type versionView struct {
	Version   string
	Total     int64
	Functions []functionCount // by count, most first
	Unknown   []string        // the functions of them the app lacks
}

type functionCount struct {
	Function string
	Runs     int64
}

// otherVersions reads the notice of the versions other than the app's;
// none without Config.Versions.
func (h *Handler) otherVersions(ctx context.Context) ([]versionView, error) {
	if h.cfg.Versions == nil {
		return nil, nil
	}
	vs, err := h.cfg.Versions.OtherVersions(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]versionView, 0, len(vs))
	for _, v := range vs {
		vv := versionView{Version: v.Version, Total: v.Total, Unknown: v.Unknown}
		for fn, n := range v.Runs {
			vv.Functions = append(vv.Functions, functionCount{fn, n})
		}
		slices.SortFunc(vv.Functions, func(a, b functionCount) int {
			return cmp.Or(cmp.Compare(b.Runs, a.Runs), cmp.Compare(a.Function, b.Function))
		})
		out = append(out, vv)
	}
	return out, nil
}

// versionResult is the page that says what a resume or a cancel of a
// version did.
type versionResult struct {
	Resume bool // else a cancel
	run.VersionReport
}

// errNoVersions answers the buttons of a dashboard built without Versions.
var errNoVersions = httperr.NotFound(errors.New("this dashboard does not manage the runs of other versions"))

// moveVersion resumes (or cancels) the runs of the path's version and
// shows what it did with each.
func (h *Handler) moveVersion(resume bool) pageFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		if h.cfg.Versions == nil {
			return errNoVersions
		}
		move, verb := h.cfg.Versions.CancelVersion, "Cancelled"
		if resume {
			move, verb = h.cfg.Versions.ResumeVersion, "Resumed"
		}
		rep, err := move(r.Context(), r.PathValue("version"))
		if err != nil {
			return err
		}
		h.render(w, r, http.StatusOK, "version", verb+" the runs of version "+shorten(rep.Version, 64), "runs", versionResult{Resume: resume, VersionReport: rep})
		return nil
	}
}
