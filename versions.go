package sluice

import (
	"context"

	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/run"
)

// Versions. An app records its runs under its version (Config.AppVersion)
// and resumes and starts only the runs of that version: a run left
// unfinished by a process of another version is listed as
// run.OtherVersion, never as queued or running, and waits for a person to
// resume it here or cancel it. `sluice runs resume --from-version` and
// the dashboard's overview do the same through the HTTP API.

// ErrSameVersion is returned by ResumeVersion and CancelVersion when asked
// to move the runs of the app's own version.
var ErrSameVersion = engine.ErrSameVersion

// AppVersion is the version the app records its runs under:
// Config.AppVersion, or the default made of its name and functions. Empty
// before Start.
func (a *App) AppVersion() string { return a.e.AppVersion() }

// OtherVersions counts, by version, the unfinished runs recorded under
// versions other than the app's, with the functions among them the app
// lacks. It needs a started app.
func (a *App) OtherVersions(ctx context.Context) ([]run.VersionRuns, error) {
	return a.e.OtherVersions(ctx)
}

// ResumeVersion resumes here, under the app's version, the unfinished runs
// recorded under version from. Each run keeps every step it recorded and
// goes back to its function's queue; replayed, its steps must be the ones
// the code asks for, in order, or the run fails naming both. A run of a
// function the app lacks, and a run pending on an executor that still runs
// (stop that process first), are skipped, each with the reason. Asked for
// the app's own version, it returns an error wrapping ErrSameVersion.
func (a *App) ResumeVersion(ctx context.Context, from string) (run.VersionReport, error) {
	return a.e.ResumeVersion(ctx, from)
}

// CancelVersion cancels the unfinished runs recorded under version from,
// as a cancel of each would; runs pending on an executor that still runs
// are skipped. Asked for the app's own version, it returns an error
// wrapping ErrSameVersion.
func (a *App) CancelVersion(ctx context.Context, from string) (run.VersionReport, error) {
	return a.e.CancelVersion(ctx, from)
}
