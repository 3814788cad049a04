package forecast

import (
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/governor"
)

const editBase = `
name: base
duration: 24h
provider:
  limits: {tpm: 8000, tpd: 200000}
flows:
  - {name: summary, backlog: 10}
  - {name: title, backlog: 5, after: summary}
`

func TestEdit(t *testing.T) {
	sc, err := Edit([]byte(editBase), []Change{
		{Path: "tpd", Value: "500000"},
		{Path: "provider.limits.otpm", Value: "1000"},
		{Path: "flows.summary.weight", Value: "2"},
		{Path: "flows.title.after", Value: `""`},
		{DropFlow: "summary"},
		{Path: "duration", Value: "48h"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if sc.Provider.Limits[governor.TPD] != 500_000 || sc.Provider.Limits[governor.OTPM] != 1000 || sc.Provider.Limits[governor.TPM] != 8000 {
		t.Errorf("limits %v", sc.Provider.Limits)
	}
	if len(sc.Flows) != 1 || sc.Flows[0].Name != "title" || sc.Flows[0].After != "" || sc.Duration.Hours() != 48 {
		t.Errorf("flows %+v, duration %s", sc.Flows, sc.Duration)
	}
}

func TestEditRefuses(t *testing.T) {
	for _, tc := range []struct {
		change Change
		want   string
	}{
		{Change{Path: "flows.summary.wieght", Value: "2"}, "--set flows.summary.wieght=2: flows[0].wieght: unknown key"},
		{Change{Path: "flows.nope.weight", Value: "2"}, `no flow is named "nope"`},
		{Change{Path: "tpd", Value: "-5"}, "provider.limits.tpd: -5 is not positive"},
		{Change{Path: "flows.summary.weight", Value: "[1, 2]"}, "is not a single value"},
		{Change{DropFlow: "summary"}, `--drop-flow summary: flows[0].after: "summary" names no flow`},
		{Change{DropFlow: "nope"}, `no flow is named "nope"`},
	} {
		_, err := Edit([]byte(editBase), []Change{tc.change})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to contain %q", tc.change, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "(line ") {
			t.Errorf("%s: error %v names a line of the edited text", tc.change, err)
		}
	}
	if _, err := ParseSet("tpd"); err == nil {
		t.Error("ParseSet(tpd): no error")
	}
}
