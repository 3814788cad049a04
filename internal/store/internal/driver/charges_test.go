package driver

import (
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/store"
)

func TestLastByID(t *testing.T) {
	t.Parallel()
	at := time.Unix(0, 0)
	in := []store.Charge{{ID: "b", Flow: "1", At: at}, {ID: "a", Flow: "2", At: at}, {ID: "b", Flow: "3", At: at}}
	got := lastByID(in)
	if len(got) != 2 || got[0].ID != "a" || got[1].ID != "b" || got[1].Flow != "3" {
		t.Fatalf("lastByID = %+v, want a then the last b", got)
	}
}

func TestCheckCharges(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		key     string
		charges []store.Charge
		wantErr string
	}{
		{"groq", []store.Charge{{ID: "a"}}, ""},
		{"groq", nil, ""},
		{"", nil, "empty key"},
		{"groq", []store.Charge{{ID: "a"}, {Flow: "title"}}, `charge 1 (flow "title") has an empty ID`},
	} {
		err := checkCharges(tt.key, tt.charges)
		if (err == nil) != (tt.wantErr == "") || (err != nil && err.Error() != tt.wantErr) {
			t.Errorf("checkCharges(%q, %v) = %v, want %q", tt.key, tt.charges, err, tt.wantErr)
		}
	}
}
