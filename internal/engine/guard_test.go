package engine

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/sim"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/llm"
	"github.com/sluice-dev/sluice/run"
)

// A process that lost a run to another (after a partition, its runs were
// adopted) must not call for it: right before a provider call, the step
// confirms that the run's owner is still the execution that began it. Here
// another owner takes the run while its call waits for quota: the call is
// never sent, and its room goes back. The same run unmoved makes its call.
func TestNoCallForARunAnotherProcessOwns(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, url string) {
		model, err := forecast.NewModel(forecast.ModelConfig{Profile: "groq", Wire: true})
		if err != nil {
			t.Fatal(err)
		}
		srv := sim.NewServer(model, sim.ServerConfig{})
		if err := srv.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Stop(context.Background()) })
		client, err := llm.NewClient(llm.Config{BaseURL: "http://" + srv.Addr() + "/v1", Profile: llm.Groq})
		if err != nil {
			t.Fatal(err)
		}
		est, err := llm.NewEstimator(llm.EstimatorConfig{})
		if err != nil {
			t.Fatal(err)
		}
		gov, err := governor.New(governor.Config{Key: "k", Limits: governor.Limits{governor.RPM: 1}})
		if err != nil {
			t.Fatal(err)
		}
		p := &Provider{Name: "k", Client: client, Governor: gov, Estimator: est, MaxInlineWait: time.Hour}
		errs := make(chan error, 2)
		fn := &Function{Function: run.Function{ID: "fence", Event: "go"}, Handler: func(r *Run, ev Event) (any, error) {
			_, err := LLM(r, "ask", p, &llm.ChatRequest{Model: "sim-model", MaxTokens: 5, Messages: []llm.Message{{Role: "user", Content: "hi"}}}, llm.Timeouts{})
			errs <- err
			return nil, err
		}}
		e := openWith(t, url, time.Hour, fn)
		st := e.Store()
		h, err := st.Handle()
		if err != nil {
			t.Fatal(err)
		}
		// The minute's one request is taken: the run's call waits for it.
		blocker, err := gov.Reserve(time.Now(), "other", governor.Cost{Requests: 1})
		if err != nil {
			t.Fatal(err)
		}
		s := send(t, e, "go", "moved", nil)
		waitUntil(t, "the call waits for quota", func() bool { return waitingIn(gov, "fence") > 0 })
		// Another execution takes the run, as DBOS records it.
		if h.Postgres != nil {
			_, err = h.Postgres.Exec(context.Background(), `UPDATE dbos.workflow_status SET owner_xid = 'another-execution' WHERE workflow_uuid = $1`, s.RunID)
		} else {
			_, err = h.SQLite.Exec(`UPDATE workflow_status SET owner_xid = 'another-execution' WHERE workflow_uuid = ?`, s.RunID)
		}
		if err != nil {
			t.Fatal(err)
		}
		blocker.Cancel(time.Now())
		if err := <-errs; err == nil {
			t.Fatal("the call for a run another execution owns succeeded")
		}
		if n := model.Stats().Succeeded; n != 0 {
			t.Fatalf("the provider answered %d calls for a run this process no longer owns, want 0", n)
		}
		// Unmoved, the same run makes its call: the fence is what stopped it.
		s2 := send(t, e, "go", "kept", nil)
		if err := <-errs; err != nil {
			t.Fatalf("call of a run this process owns: %v", err)
		}
		if got := wait(t, e, s2.RunID); got.Status != run.Completed {
			t.Fatalf("run %s: %s", got.Status, got.Error)
		}
		if n := model.Stats().Succeeded; n != 1 {
			t.Fatalf("the provider answered %d calls, want 1", n)
		}
	})
}
