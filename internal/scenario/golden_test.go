package scenario

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// TestScenarioFilesUnchanged parses every scenario file of the repository
// and compares the result with testdata/scenarios.golden.json, which the
// node walker that Parse was before it decoded with the library made of
// them. A file edited since (its sha256 differs) must still parse, but has
// nothing to be compared with.
func TestScenarioFilesUnchanged(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("testdata/scenarios.golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var golden []struct {
		File     string    `json:"file"` // from the module's root
		SHA256   string    `json:"sha256"`
		Scenario *Scenario `json:"scenario"`
	}
	if err := json.Unmarshal(data, &golden); err != nil {
		t.Fatal(err)
	}
	if len(golden) == 0 {
		t.Fatal("no scenario files in testdata/scenarios.golden.json")
	}
	for _, g := range golden {
		data, err := os.ReadFile(filepath.Join("../..", filepath.FromSlash(g.File)))
		if os.IsNotExist(err) {
			t.Logf("%s: removed since", g.File)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		s, err := Parse(data)
		if err != nil {
			t.Errorf("%s: %v", g.File, err)
			continue
		}
		if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != g.SHA256 {
			t.Logf("%s: edited since, not compared", g.File)
			continue
		}
		if !reflect.DeepEqual(s, g.Scenario) {
			t.Errorf("%s:\n got %+v\nwant %+v", g.File, s, g.Scenario)
		}
	}
}
