package httpapi_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/httpapi"
	"github.com/sluice-dev/sluice/internal/testenv"
	"github.com/sluice-dev/sluice/run"
)

// A run's history, a search by reason and by event key, a re-run from a
// chosen step and a replay, through the API on both databases.
func TestRunHistorySearchRerunReplay(t *testing.T) {
	t.Parallel()
	testenv.Databases(t, func(t *testing.T, dbURL string) {
		var loads, saves atomic.Int32
		var broken atomic.Bool
		broken.Store(true)
		e := launch(t, dbURL, &engine.Function{Function: run.Function{ID: "ingest", Event: "doc", Retries: 1}, Handler: func(r *engine.Run, ev engine.Event) (any, error) {
			if _, err := engine.Step(r, "load", func(context.Context) (int32, error) { return loads.Add(1), nil }); err != nil {
				return nil, err
			}
			return engine.Step(r, "save", func(context.Context) (int32, error) {
				if broken.Load() {
					return 0, errors.New("disk quota exceeded on /var/data")
				}
				return saves.Add(1), nil
			})
		}})
		srv := httptest.NewServer(httpapi.New(httpapi.Config{Engine: e}))
		t.Cleanup(srv.Close)
		waitRun := func(id string) run.Summary {
			ctx, cancel := context.WithTimeout(context.Background(), testenv.Budget)
			defer cancel()
			s, _, err := e.Wait(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		var sent struct{ Runs []run.Sent }
		if code := do(t, srv, "POST", "/v1/events", "", `{"name":"doc","id":"doc-17","data":{"n":17}}`, &sent); code != 202 {
			t.Fatalf("send: %d", code)
		}
		id := sent.Runs[0].RunID
		if s := waitRun(id); s.Status != run.Failed {
			t.Fatalf("run %+v, want failed", s)
		}

		var hist engine.RunHistory
		if code := do(t, srv, "GET", "/v1/runs/"+id+"/history", "", "", &hist); code != 200 {
			t.Fatalf("history: %d", code)
		}
		var steps []string
		for _, a := range hist.Attempts {
			w := ""
			if a.Wait != nil {
				w = "<" + a.Wait.Cause + ">"
			}
			steps = append(steps, w+a.Step+"#"+string(rune('0'+a.Attempt))+":"+a.Status)
		}
		if got, want := strings.Join(steps, " "), "load#1:completed save#1:failed <retry>save#2:failed"; got != want {
			t.Fatalf("history %q, want %q", got, want)
		}
		if hist.Status != run.Failed || !strings.Contains(hist.Error, "disk quota exceeded") || hist.EndedAt.IsZero() {
			t.Fatalf("history's run %+v", hist)
		}

		for _, q := range []string{"reason=" + url.QueryEscape("quota exceeded on"), "event_key=doc-17",
			"function=ingest&status=failed&reason=disk&since=1h&until=" + url.QueryEscape(time.Now().Add(time.Hour).UTC().Format(time.RFC3339))} {
			var list struct{ Runs []run.Summary }
			if code := do(t, srv, "GET", "/v1/runs?"+q, "", "", &list); code != 200 || len(list.Runs) != 1 || list.Runs[0].ID != id {
				t.Errorf("search %s: %d %+v, want run %s", q, code, list.Runs, id)
			}
		}
		var none struct{ Runs []run.Summary }
		if code := do(t, srv, "GET", "/v1/runs?reason=Disk", "", "", &none); code != 200 || len(none.Runs) != 0 {
			t.Errorf("search by a reason in other case: %d %+v, want none", code, none.Runs)
		}

		var bad struct{ Error string }
		if code := do(t, srv, "POST", "/v1/runs/"+id+"/rerun?from_step=3", "", "", &bad); code != 400 || bad.Error != "from_step: step 3 is out of range: the run has 2 steps (1 to 2)" {
			t.Fatalf("re-run from step 3: %d %q", code, bad.Error)
		}
		broken.Store(false)
		var rerun struct {
			ID      string `json:"id"`
			RerunOf string `json:"rerun_of"`
		}
		if code := do(t, srv, "POST", "/v1/runs/"+id+"/rerun", "", `{"from_step": 1}`, &rerun); code != 202 || rerun.RerunOf != id {
			t.Fatalf("re-run from step 1: %d %+v", code, rerun)
		}
		if s := waitRun(rerun.ID); s.Status != run.Completed {
			t.Fatalf("re-run %+v", s)
		}
		if loads.Load() != 2 || saves.Load() != 1 {
			t.Fatalf("after a re-run from step 1: load ran %d times, save succeeded %d; want 2 and 1", loads.Load(), saves.Load())
		}
		if code := do(t, srv, "POST", "/v1/runs/"+rerun.ID+"/rerun?from_step=save", "", "", &rerun); code != 202 {
			t.Fatalf("re-run of a completed run from step save: %d", code)
		}
		waitRun(rerun.ID)
		if loads.Load() != 2 || saves.Load() != 2 {
			t.Fatalf("after a re-run from save: load ran %d times, save succeeded %d; want 2 and 2", loads.Load(), saves.Load())
		}

		var rep engine.Replayed
		if code := do(t, srv, "POST", "/v1/runs/"+id+"/replay", "", "", &rep); code != 202 || rep.ReplayOf != id || rep.RunID == id || rep.RunID != "ingest:"+rep.EventID {
			t.Fatalf("replay: %d %+v", code, rep)
		}
		if s := waitRun(rep.RunID); s.Status != run.Completed {
			t.Fatalf("replayed run %+v", s)
		}
		var d engine.RunDetail
		if code := do(t, srv, "GET", "/v1/runs/"+rep.RunID, "", "", &d); code != 200 || d.Event == nil || string(d.Event.Data) != `{"n":17}` {
			t.Fatalf("replayed run's event: %d %+v", code, d.Event)
		}
		if loads.Load() != 3 {
			t.Fatalf("the replay ran load %d times in all, want 3", loads.Load())
		}
	})
}
