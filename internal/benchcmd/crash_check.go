package benchcmd

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/sluice-dev/sluice/examples/summarize"
	"github.com/sluice-dev/sluice/internal/forecast"
	"github.com/sluice-dev/sluice/internal/sim"
)

// crashCall is one call the simulator charged, named by the document and
// the step it was for (both read from its prompt).
type crashCall struct {
	doc, step string
	worker    int  // the index of the worker that sent it
	ok        bool // answered without a fault: the calls Stats counts as Succeeded
	start     time.Time
}

// callLog is the simulator's log of charged calls.
type callLog struct {
	mu    sync.Mutex
	calls []crashCall
	bad   int    // calls whose prompt names no document or step
	eg    string // the first of them
	done  int    // calls answered
}

// crashSteps names the pipeline's LLM steps by their system prompt.
var crashSteps = map[string]string{
	"Summarize the article in three sentences.":     "summarize",
	"Answer with one word: the article's category.": "classify",
}

func (l *callLog) add(worker int, c sim.Call) {
	var step, doc string
	if len(c.Messages) == 2 {
		step = crashSteps[c.Messages[0]]
		doc, _, _ = strings.Cut(strings.TrimPrefix(c.Messages[1], "Article "), ". ")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.Answered {
		l.done++
	}
	if step == "" || !strings.HasPrefix(doc, "doc-") {
		if l.bad++; l.bad == 1 {
			l.eg = fmt.Sprintf("%.120q", c.Messages)
		}
		return
	}
	l.calls = append(l.calls, crashCall{doc: doc, step: step, worker: worker, ok: c.Fault == forecast.NoFault, start: c.Start})
}

func (l *callLog) answered() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.done
}

func (l *callLog) snapshot() *callLog {
	l.mu.Lock()
	defer l.mu.Unlock()
	return &callLog{calls: slices.Clone(l.calls), bad: l.bad, eg: l.eg, done: l.done}
}

// stepGrace is how much later than a step's recorded completion a call for
// it must start to count as made after the record: the column holds
// milliseconds, so a call in the same millisecond could be the recorded one.
const stepGrace = time.Millisecond

// crashCheck fills rep from what the database holds once every worker has
// stopped, and from the simulator's log: runs and their status, documents
// saved, and each LLM step's record against the calls made for it. runs
// reads the database's runs; dbURL names it, for the documents saved.
func crashCheck(ctx context.Context, dbURL string, runs *dbosRuns, rep *crashReport, sent int, log *callLog, breaks []crashBreak) error {
	if log.bad > 0 {
		// The prompts changed in examples/summarize: crashSteps must follow.
		return fmt.Errorf("%d calls name no document and step, e.g. %s", log.bad, log.eg)
	}
	if err := countCrashRuns(runs, rep); err != nil {
		return fmt.Errorf("list runs: %w", err)
	}
	db, err := openBenchDB(ctx, dbURL)
	if err != nil {
		return err
	}
	defer db.close()
	// Every document a run was started for must be saved; documents are
	// numbered from 0 in the order they were sent.
	var saved int64
	err = db.each(ctx, `SELECT COUNT(DISTINCT document_id), COALESCE(SUM(writes), 0) - COUNT(DISTINCT document_id) FROM `+summarize.Table, nil,
		func(scan func(...any) error) error {
			var dup int64
			err := scan(&saved, &dup)
			rep.DuplicateSaves = int(dup)
			return err
		})
	if err != nil {
		return fmt.Errorf("count saves: %w", err)
	}
	rep.Lost = int(max(int64(max(rep.Runs, sent))-saved, 0))

	recorded, err := recordedSteps(runs)
	if err != nil {
		return fmt.Errorf("read step records: %w", err)
	}
	if want := 2 * rep.Completed; len(recorded) < want {
		return fmt.Errorf("%d LLM steps recorded, want at least %d for %d completed runs", len(recorded), want, rep.Completed)
	}
	byKey := map[stepKey][]sentCall{}
	for _, c := range log.calls {
		if c.ok {
			k := stepKey{c.doc, c.step}
			byKey[k] = append(byKey[k], sentCall{c.start, c.worker})
		}
	}
	rep.RebilledInFlight, rep.RebilledFinished, rep.perBreak = splitRebills(byKey, recorded, breaks)
	rep.MaxRebilledPerKill = 0
	for _, n := range rep.perBreak {
		rep.MaxRebilledPerKill = max(rep.MaxRebilledPerKill, n)
	}
	rep.RebilledCalls = rep.RebilledInFlight + rep.RebilledFinished
	return nil
}

// countCrashRuns counts the pipeline's runs into rep by status, lists the
// versions they ran under, and names the first 20 that did not complete,
// in the order of their IDs.
func countCrashRuns(runs *dbosRuns, rep *crashReport) error {
	ws, err := dbos.ListWorkflows(runs.c, dbos.WithFilterName(summarize.FunctionID), dbos.WithFilterLoadInput(false), dbos.WithFilterLoadOutput(false))
	if err != nil {
		return err
	}
	slices.SortFunc(ws, func(a, b dbos.WorkflowStatus) int { return strings.Compare(a.ID, b.ID) })
	rep.Versions = nil
	var stuck []dbos.WorkflowStatus
	for _, w := range ws {
		rep.Runs++
		if !slices.Contains(rep.Versions, w.ApplicationVersion) {
			rep.Versions = append(rep.Versions, w.ApplicationVersion)
		}
		if w.Status == dbos.WorkflowStatusSuccess {
			rep.Completed++
			continue
		}
		rep.Stuck++
		if w.Status == dbos.WorkflowStatusCancelled {
			rep.Cancelled++
		}
		if len(rep.StuckRuns)+len(stuck) < 20 {
			stuck = append(stuck, w)
		}
	}
	if len(stuck) == 0 {
		return nil
	}
	// DBOS reads a run's error only with its output: read it for the runs
	// named only.
	ids := make([]string, len(stuck))
	for i, w := range stuck {
		ids[i] = w.ID
	}
	withErrors, err := dbos.ListWorkflows(runs.c, dbos.WithFilterWorkflowIDs(ids...), dbos.WithFilterLoadInput(false), dbos.WithFilterLoadOutput(true))
	if err != nil {
		return fmt.Errorf("read errors: %w", err)
	}
	msgs := make(map[string]string, len(withErrors))
	for _, w := range withErrors {
		if w.Error != nil {
			msgs[w.ID] = w.Error.Error()
		}
	}
	for _, w := range stuck {
		rep.StuckRuns = append(rep.StuckRuns, fmt.Sprintf("%s %s %.200s", w.ID, w.Status, msgs[w.ID]))
	}
	return nil
}

// recordedSteps reads when each LLM step of the pipeline's runs was
// recorded; a failed attempt records an error, and is left out.
func recordedSteps(runs *dbosRuns) (map[stepKey]time.Time, error) {
	prefix := summarize.FunctionID + ":key:" // run IDs, see docs/engine.md
	ws, err := dbos.ListWorkflows(runs.c, dbos.WithFilterWorkflowIDPrefix(prefix), dbos.WithFilterLoadInput(false), dbos.WithFilterLoadOutput(false))
	if err != nil {
		return nil, err
	}
	recorded := map[stepKey]time.Time{}
	for _, w := range ws {
		steps, err := dbos.GetWorkflowSteps(runs.c, w.ID, dbos.WithStepsLoadOutput(false))
		if err != nil {
			return nil, fmt.Errorf("run %s: %w", w.ID, err)
		}
		for _, st := range steps {
			if st.StepName != "summarize" && st.StepName != "classify" || st.Error != nil {
				continue
			}
			if st.CompletedAt.IsZero() {
				return nil, fmt.Errorf("step %s of run %s has no completion time", st.StepName, w.ID)
			}
			recorded[stepKey{strings.TrimPrefix(w.ID, prefix), st.StepName}] = st.CompletedAt
		}
	}
	return recorded, nil
}

// stepKey names an LLM step of one document's run.
type stepKey struct{ doc, step string }

// sentCall is when a call of a step began, and which worker sent it.
type sentCall struct {
	start  time.Time
	worker int
}

// splitRebills sorts the re-billed calls: all but one of the calls each
// step made. calls holds each step's calls; recorded, when the database
// recorded the step (absent: its run did not complete); breaks, the stops
// and restarts in order, each worker's last being its stop. A call begun
// after its step was recorded (by more than stepGrace) made the step again:
// it is finished. Of the calls begun before, the last is the one recorded;
// the others were cut before their answer was recorded: in flight, each
// charged to the first break of the worker that sent it after it began, or
// else to that worker's stop (a call written just before a kill can reach
// the simulator after it). perBreak counts those each break cut; a cut call
// of a worker that was never stopped is counted in flight only.
func splitRebills(calls map[stepKey][]sentCall, recorded map[stepKey]time.Time, breaks []crashBreak) (inFlight, finished int, perBreak []int) {
	perBreak = make([]int, len(breaks))
	for k, sent := range calls {
		sent = slices.SortedFunc(slices.Values(sent), func(a, b sentCall) int { return a.start.Compare(b.start) })
		before := len(sent) // calls begun before the step was recorded
		if rec, ok := recorded[k]; ok {
			before = slices.IndexFunc(sent, func(c sentCall) bool { return c.start.After(rec.Add(stepGrace)) })
			if before < 0 {
				before = len(sent)
			}
		}
		finished += len(sent) - before
		for _, c := range sent[:max(before-1, 0)] {
			inFlight++
			charged := -1
			for j, b := range breaks {
				if b.worker != c.worker {
					continue
				}
				charged = j
				if !b.at.Before(c.start) {
					break
				}
			}
			if charged >= 0 {
				perBreak[charged]++
			}
		}
	}
	return inFlight, finished, perBreak
}
