package plan

import (
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestSDKLinksNoTestModel: the SDK plans the running configuration through
// this package, so whatever this package imports is linked into every
// program that uses sluice. Production code never imports a test model:
// none of internal/sim (the provider simulator), internal/bench (the quota
// bench and its models of other schedulers) and internal/scenario is among
// the SDK's dependencies.
func TestSDKLinksNoTestModel(t *testing.T) {
	t.Parallel()
	const sdk = "github.com/sluice-dev/sluice"
	// The go command on PATH: the one running this test, as a rule.
	cmd := exec.CommandContext(t.Context(), "go", "list", "-deps", "-f", "{{.ImportPath}}", sdk)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", sdk, err, stderr.String())
	}
	deps := strings.Fields(string(out))
	// The list is the SDK's: it holds the SDK and the planner it links.
	for _, want := range []string{sdk, sdk + "/internal/plan", sdk + "/internal/forecast"} {
		if !slices.Contains(deps, want) {
			t.Fatalf("go list -deps %s lists %d packages, not %s", sdk, len(deps), want)
		}
	}
	for _, model := range []string{sdk + "/internal/sim", sdk + "/internal/bench", sdk + "/internal/scenario"} {
		if slices.Contains(deps, model) {
			t.Errorf("the SDK links %s, a test model: production code must not import it", model)
		}
	}
}
