package sluice_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice"
	"github.com/sluice-dev/sluice/internal/testenv"
)

// /readyz says whether the process takes work: not before Start, and not
// once Stop has begun (a load balancer then sends work elsewhere).
func TestReadyFollowsStartAndStop(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		app, err := sluice.New(context.Background(), sluice.Config{DatabaseURL: url})
		if err != nil {
			t.Fatal(err)
		}
		if err := app.Ready(); err == nil || !strings.Contains(err.Error(), "not launched") {
			t.Fatalf("Ready before Start: %v, want not launched", err)
		}
		if err := app.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := app.Ready(); err != nil {
			t.Fatalf("Ready after Start: %v", err)
		}
		if err := app.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := app.Ready(); err == nil || !strings.Contains(err.Error(), "stopping") {
			t.Fatalf("Ready after Stop: %v, want stopping", err)
		}
	})
}
