package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestClientRetriesShared: what a gateway adds to one Set is read by
// another Set On the same registry — the app's, whose dashboard shows it —
// and a key is read from one source only.
func TestClientRetriesShared(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	app, err := On(reg)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := On(reg)
	if err != nil {
		t.Fatal(err)
	}
	if got := app.ClientRetries(); len(got) != 0 {
		t.Errorf("before any gateway: %v", got)
	}
	row := ClientRetries{Flow: "batch", Client: 2, Refused: 5, CameBack: 3, GaveUp: 2}
	if err := gw.AddClientRetries("groq", func() []ClientRetries { return []ClientRetries{row} }); err != nil {
		t.Fatal(err)
	}
	if got := app.ClientRetries()["groq"]; len(got) != 1 || got[0] != row {
		t.Errorf("the app's Set reads %v, want %v", got, row)
	}
	if err := app.AddClientRetries("groq", func() []ClientRetries { return nil }); err == nil {
		t.Error("a second source of key groq was taken")
	}
}
