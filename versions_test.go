package sluice_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/run"
)

// An app says its version once started; with no run of another version
// there is nothing to list or move, and its own version cannot be moved.
// (The runs of another version, resumed and cancelled, are
// TestRunsOfAnotherVersion's in the engine and TestRunsOfOtherVersions's
// through the command line.)
func TestAppVersions(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, db string) {
		ctx := context.Background()
		app := newApp(t, sluice.Config{DatabaseURL: db, AppVersion: "release-2"})
		if err := sluice.Register(app, run.Function{ID: "f", Event: "e"}, func(*sluice.Context, sluice.Event[struct{}]) (int, error) { return 1, nil }); err != nil {
			t.Fatal(err)
		}
		if v := app.AppVersion(); v != "" {
			t.Errorf("AppVersion before Start: %q, want empty", v)
		}
		if err := app.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if v := app.AppVersion(); v != "release-2" {
			t.Errorf("AppVersion: %q, want release-2", v)
		}
		if vs, err := app.OtherVersions(ctx); err != nil || len(vs) != 0 {
			t.Errorf("OtherVersions: %+v, %v; want none", vs, err)
		}
		if _, err := app.ResumeVersion(ctx, "release-2"); !errors.Is(err, sluice.ErrSameVersion) {
			t.Errorf("ResumeVersion of its own version: %v, want ErrSameVersion", err)
		}
		if _, err := app.CancelVersion(ctx, "release-2"); !errors.Is(err, sluice.ErrSameVersion) {
			t.Errorf("CancelVersion of its own version: %v, want ErrSameVersion", err)
		}
		rep, err := app.CancelVersion(ctx, "release-1")
		if err != nil || rep.Version != "release-1" || rep.Done == nil || len(rep.Done) != 0 || len(rep.Skipped) != 0 {
			t.Errorf("CancelVersion of a version with no run: %+v, %v; want an empty report", rep, err)
		}
	})
}
