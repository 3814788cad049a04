package engine

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/sluice-dev/sluice/run"
)

// Versions. A process dequeues and resumes only the runs recorded under its
// own version (DBOS's rule): a run left unfinished by a process of another
// version is never executed here by itself. So the version must change only
// when a team says so — never because a binary was built again, with other
// flags or by another command (DBOS's own default, a hash of the binary,
// does) — and a run of another version is shown as such and resumed or
// cancelled by a person.

// DefaultVersion is the version of an app that declares none: its name and
// a hash of its shape, the sorted IDs of its functions and of their parts
// ("fn/part"). It does not depend on the binary: every build of the same
// code, whatever its flags, records its runs under the same version. Adding,
// removing or renaming a function or a part changes it.
func DefaultVersion(app string, shape []string) string {
	shape = slices.Clone(shape)
	slices.Sort(shape)
	h := sha256.Sum256([]byte(strings.Join(shape, "\x00")))
	return app + "-" + hex.EncodeToString(h[:6])
}

// shape lists the IDs of the registered functions and their parts. The
// caller holds e.mu.
func (e *Engine) shape() []string {
	var out []string
	for id, f := range e.fns {
		out = append(out, id)
		for _, p := range f.parts {
			out = append(out, p.ConfigName())
		}
	}
	return out
}

var versionPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:+@/-]{0,127}$`)

// CheckVersion refuses a version name that the API, the command line and
// the database would not all carry the same way.
func CheckVersion(v string) error {
	if !versionPattern.MatchString(v) {
		return invalid("version", "%s: want 1-128 letters, digits or ._:+@/- starting with a letter or digit", quote(v))
	}
	return nil
}

// AppVersion is the version runs are recorded under: Config.AppVersion,
// or DefaultVersion of the app's name and functions. Empty before Launch.
func (e *Engine) AppVersion() string {
	dctx, err := e.dbosContext()
	if err != nil {
		return ""
	}
	return dctx.GetApplicationVersion()
}

// unfinished are the DBOS states of a run that has not ended.
var unfinished = []dbos.WorkflowStatusType{dbos.WorkflowStatusPending, dbos.WorkflowStatusEnqueued, dbos.WorkflowStatusDelayed}

// OtherVersions lists the versions other than this process's that have
// unfinished runs of this app, by name.
func (e *Engine) OtherVersions(ctx context.Context) ([]run.VersionRuns, error) {
	c, err := e.client(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := dbos.GetWorkflowAggregates(c, dbos.GetWorkflowAggregatesInput{
		GroupByApplicationVersion: true,
		GroupByName:               true,
		SelectCount:               true,
		Status:                    unfinished,
	})
	if err != nil {
		return nil, fmt.Errorf("count runs of other versions: %w", err)
	}
	current := c.GetApplicationVersion()
	byVersion := map[string]*run.VersionRuns{}
	for _, r := range rows {
		v, name := deref(r.Group["application_version"]), deref(r.Group["name"])
		if v == current || name == cronWorkflow || r.Count == nil || strings.HasPrefix(name, "DBOS.") {
			continue
		}
		o := byVersion[v]
		if o == nil {
			o = &run.VersionRuns{Version: v, Runs: map[string]int64{}}
			byVersion[v] = o
		}
		o.Runs[name] += *r.Count
		o.Total += *r.Count
		if !e.registered(name) && !slices.Contains(o.Unknown, name) {
			o.Unknown = append(o.Unknown, name)
		}
	}
	out := make([]run.VersionRuns, 0, len(byVersion))
	for _, o := range byVersion {
		slices.Sort(o.Unknown)
		out = append(out, *o)
	}
	slices.SortFunc(out, func(a, b run.VersionRuns) int { return cmp.Compare(a.Version, b.Version) })
	return out, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// registered reports whether name is a registered function or part
// ("function/part") of this engine.
func (e *Engine) registered(name string) bool {
	id, part, isPart := strings.Cut(name, "/")
	f, ok := e.function(id)
	if !ok {
		return false
	}
	if !isPart {
		return true
	}
	_, ok = f.parts[part]
	return ok
}

// ErrSameVersion is returned when asked to move the runs of this process's
// own version.
var ErrSameVersion = errors.New("that is this process's own version")

// ResumeVersion resumes here, under this process's version, the unfinished
// runs recorded under version from. The rule of compatibility: a run is
// resumed when its function (and, for a part, the part) is registered in
// this process; it then replays its recorded steps, which DBOS checks one
// by one against the names the code asks for: a step recorded under
// another name at the same place fails the run, naming both (see
// docs/operations.md for what keeps a change compatible). A run of a
// function this process lacks is skipped, and so is a run pending on an
// executor that still runs (its executor lock is held): stop that process
// first, or let it finish them. Each run keeps every step it recorded; its
// deadline, if its function has one, starts again.
func (e *Engine) ResumeVersion(ctx context.Context, from string) (run.VersionReport, error) {
	return e.moveVersion(ctx, from, true)
}

// CancelVersion cancels the unfinished runs recorded under version from,
// as a person's cancel of each would (see Cancel), the runs of functions
// this process lacks included. Runs pending on an executor that still
// runs are skipped.
func (e *Engine) CancelVersion(ctx context.Context, from string) (run.VersionReport, error) {
	return e.moveVersion(ctx, from, false)
}

func (e *Engine) moveVersion(ctx context.Context, from string, resume bool) (run.VersionReport, error) {
	rep := run.VersionReport{Version: from, Done: []string{}}
	if err := CheckVersion(from); err != nil {
		return rep, err
	}
	c, err := e.client(ctx)
	if err != nil {
		return rep, err
	}
	current := c.GetApplicationVersion()
	if from == current {
		return rep, fmt.Errorf("version %s: %w", quote(from), ErrSameVersion)
	}
	ws, err := dbos.ListWorkflows(c, dbos.WithFilterAppVersion(from), dbos.WithFilterStatus(unfinished...),
		dbos.WithFilterLoadInput(resume), dbos.WithFilterLoadOutput(false))
	if err != nil {
		return rep, fmt.Errorf("list the runs of version %s: %w", from, err)
	}
	// Parts before the runs that started them: a resumed run replays to
	// the wait for its part, which must find the part resumed, not
	// cancelled for a moment.
	slices.SortStableFunc(ws, func(a, b dbos.WorkflowStatus) int {
		return cmp.Compare(boolInt(a.ParentWorkflowID == ""), boolInt(b.ParentWorkflowID == ""))
	})
	self := c.GetExecutorID()
	live := map[string]bool{} // executors found running, by ID
	var held []*lockWatch
	defer func() {
		for _, l := range held {
			l.release()
		}
	}()
	for _, w := range ws {
		if w.Name == cronWorkflow || strings.HasPrefix(w.Name, "DBOS.") {
			continue
		}
		if resume && !e.registered(w.Name) {
			rep.Skipped = append(rep.Skipped, run.SkippedRun{ID: w.ID, Reason: fmt.Sprintf("%s is not a function of this process", quote(w.Name))})
			continue
		}
		if w.Status == dbos.WorkflowStatusPending && w.ExecutorID != "" && w.ExecutorID != self {
			running, seen := live[w.ExecutorID]
			if !seen {
				l, err := e.lockExecutor(ctx, w.ExecutorID, 1)
				switch {
				case errors.Is(err, ErrExecutorRunning):
					running = true
				case err != nil:
					return rep, err
				default:
					held = append(held, l) // it cannot start again meanwhile
				}
				live[w.ExecutorID] = running
			}
			if running {
				rep.Skipped = append(rep.Skipped, run.SkippedRun{ID: w.ID, Reason: fmt.Sprintf("executor %s, which runs it, is still running: stop it first", quote(w.ExecutorID))})
				continue
			}
		}
		if !resume {
			// Not through Cancel, which knows only the runs of this
			// process's functions: a run of a function it lacks is
			// cancelled too.
			if err := e.cancelRun(ctx, c, w.ID, w.StartedAt); err != nil {
				return rep, err
			}
			rep.Done = append(rep.Done, w.ID)
			continue
		}
		if err := e.resumeAs(c, w, current); err != nil {
			return rep, err
		}
		rep.Done = append(rep.Done, w.ID)
	}
	return rep, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// resumeAs moves the unfinished run w to version v and back to its queue,
// every recorded step kept: DBOS rewinds only ended runs, so the run is
// first cancelled, then rewound past its last recorded step under v.
func (e *Engine) resumeAs(c dbos.Context, w dbos.WorkflowStatus, v string) error {
	steps, err := dbos.GetWorkflowSteps(c, w.ID, dbos.WithStepsLoadOutput(false))
	if err != nil {
		return fmt.Errorf("resume run %s: read its steps: %w", w.ID, err)
	}
	next := 0
	for _, s := range steps {
		next = max(next, s.StepID+1)
	}
	opts := []dbos.RewindWorkflowOption{dbos.WithRewindApplicationVersion(v), dbos.WithRewindStartStep(uint(next))}
	if f, ok := e.function(w.Name); ok && w.ParentWorkflowID == "" {
		opts = append(opts, dbos.WithRewindQueue(f.queueName()))
		if pk := f.partitionKey(); pk != "" {
			opts = append(opts, dbos.WithRewindQueuePartitionKey(cmp.Or(w.QueuePartitionKey, "-")))
		}
	}
	if err := dbos.CancelWorkflow(c, w.ID); err != nil {
		return fmt.Errorf("resume run %s: %w", w.ID, err)
	}
	if _, err := dbos.RewindWorkflow[any](c, w.ID, opts...); err != nil {
		return fmt.Errorf("resume run %s: %w", w.ID, err)
	}
	return nil
}
