package benchcmd

import (
	"context"
	"database/sql"
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
// saved, and each LLM step's record against the calls made for it.
func crashCheck(ctx context.Context, dbURL string, rep *crashReport, sent int, log *callLog, breaks []crashBreak) error {
	if log.bad > 0 {
		// The prompts changed in examples/summarize: crashSteps must follow.
		return fmt.Errorf("%d calls name no document and step, e.g. %s", log.bad, log.eg)
	}
	db, err := openBenchDB(ctx, dbURL)
	if err != nil {
		return err
	}
	defer db.close()
	prefix := summarize.FunctionID + ":key:" // run IDs, see docs/engine.md
	rep.Versions = nil
	err = db.each(ctx, `SELECT workflow_uuid, status, COALESCE(error, ''), COALESCE(application_version, '') FROM `+db.table("workflow_status")+` WHERE name = $1 ORDER BY workflow_uuid`,
		[]any{summarize.FunctionID}, func(scan func(...any) error) error {
			var id, status, msg, version string
			if err := scan(&id, &status, &msg, &version); err != nil {
				return err
			}
			rep.Runs++
			if !slices.Contains(rep.Versions, version) {
				rep.Versions = append(rep.Versions, version)
			}
			if status == string(dbos.WorkflowStatusSuccess) {
				rep.Completed++
				return nil
			}
			rep.Stuck++
			if status == string(dbos.WorkflowStatusCancelled) {
				rep.Cancelled++
			}
			if len(rep.StuckRuns) < 20 {
				rep.StuckRuns = append(rep.StuckRuns, fmt.Sprintf("%s %s %.200s", id, status, msg))
			}
			return nil
		})
	if err != nil {
		return fmt.Errorf("list runs: %w", err)
	}
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

	// When each LLM step was recorded (a failed attempt records an error).
	recorded := map[stepKey]time.Time{}
	err = db.each(ctx, `SELECT workflow_uuid, function_name, completed_at_epoch_ms FROM `+db.table("operation_outputs")+
		` WHERE function_name IN ('summarize', 'classify') AND error IS NULL AND workflow_uuid LIKE $1`,
		[]any{prefix + "%"}, func(scan func(...any) error) error {
			var id, step string
			var ms sql.NullInt64
			if err := scan(&id, &step, &ms); err != nil {
				return err
			}
			if !ms.Valid {
				return fmt.Errorf("step %s of run %s has no completion time", step, id)
			}
			recorded[stepKey{strings.TrimPrefix(id, prefix), step}] = time.UnixMilli(ms.Int64)
			return nil
		})
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
