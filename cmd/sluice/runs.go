package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/internal/engine"
	"github.com/sluice-dev/sluice/internal/httpjson"
	"github.com/sluice-dev/sluice/internal/num"
	"github.com/sluice-dev/sluice/internal/progress"
	"github.com/sluice-dev/sluice/run"
)

func init() {
	register(&cli.Command{
		Name:    "runs",
		Summary: "search the runs of a running server; list the unfinished runs of other versions, and resume them there or cancel them",
		Run:     runRuns,
	})
}

// runsUsage is what "sluice runs" does, for its help.
const runsUsage = `A server resumes and starts only the runs recorded under its own version (serve
--app-version); the runs another version left unfinished wait, listed as other_version,
until a person resumes them under the server's version or cancels them.

Subcommands:
  list [search flags]          search the runs: --function --status --event-key --reason --since --until --limit
  versions                     list the versions with unfinished runs, by function
  resume --from-version V      resume here, under the server's version, the unfinished runs of V
  cancel --from-version V      cancel the unfinished runs of V

A resume keeps every step a run recorded; a run whose function the server lacks, and a
run pending on a process that still runs, are skipped with the reason. Each subcommand
takes --url, --token and --token-env as "sluice status" does; an error of the server
exits 1 with its message.`

func runRuns(ctx context.Context, env *cli.Env, args []string) error {
	sub := ""
	if len(args) > 0 {
		sub = args[0]
	}
	switch sub {
	case "list":
		return runList(ctx, env, args[1:])
	case "versions":
		return runVersions(ctx, env, args[1:])
	case "resume", "cancel":
		return runMoveVersion(ctx, env, sub, args[1:])
	}
	if sub != "" && !strings.HasPrefix(sub, "-") {
		fmt.Fprintf(env.Stderr, "sluice runs: unknown subcommand %q: want list, versions, resume or cancel\n", sub)
		return cli.ErrUsage
	}
	fs := cli.NewFlagSet(env, "runs", "", "")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: sluice runs list|versions|resume|cancel [flags]\n\n%s\n", runsUsage)
	}
	if err := cli.ParseFlags(fs, env, args); err != nil {
		return err
	}
	fmt.Fprintln(env.Stderr, "sluice runs: missing the subcommand: list, versions, resume or cancel")
	return cli.ErrUsage
}

// runList searches the server's runs with GET /v1/runs; the server checks
// the parameters, and a bad one exits 1 with its words.
func runList(ctx context.Context, env *cli.Env, args []string) error {
	fs := cli.NewFlagSet(env, "runs list", "[flags]",
		"Searches the runs of a running \"sluice serve\" (GET /v1/runs) and prints them newest first:\n"+
			"ID, function, status, when created (on the server's app clock, named when simulated), and why\n"+
			"it failed. Every flag is optional; they combine.")
	api := addAPIFlags(fs)
	params := []struct{ flag, param, usage string }{
		{"function", "function", "the function's runs only"},
		{"status", "status", "runs in this status: " + engine.StatesText()},
		{"event-key", "event_key", "the run an event started: its ID, or its idempotency key's value"},
		{"reason", "reason", "runs whose failure, timeout or cancel reason contains this text (case matters)"},
		{"since", "since", "runs created at or after, on the server's app clock: an RFC 3339 time, or a duration back from its now (2h)"},
		{"until", "until", "runs created at or before, on the server's app clock: an RFC 3339 time, or a duration back from its now"},
		{"limit", "limit", "the most runs to print, 1 to 1000 (the server's default: 100)"},
	}
	values := make([]*string, len(params))
	for i, p := range params {
		values[i] = fs.String(p.flag, "", p.usage)
	}
	raw := fs.Bool("json", false, "print the server's answer as it is")
	if err := cli.ParseFlags(fs, env, args); err != nil {
		return err
	}
	q := url.Values{}
	for i, p := range params {
		if *values[i] != "" {
			q.Set(p.param, *values[i])
		}
	}
	path := "/v1/runs"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	body, err := api.client(env).get(ctx, path)
	if err != nil {
		return err
	}
	if *raw {
		_, err = env.Stdout.Write(body)
		return err
	}
	var list struct {
		Runs []run.Summary
		httpjson.Clock
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return renderRuns(env.Stdout, list.Runs, progress.ServerClock(list.Clock, nil, time.Now()))
}

// renderRuns prints runs as a table, each error cut to a line, their
// times on the server's clock c, which a line above names where it is not
// this machine's.
func renderRuns(w io.Writer, runs []run.Summary, c progress.Clock) error {
	if len(runs) == 0 {
		_, err := fmt.Fprintln(w, "no runs match")
		return err
	}
	var b strings.Builder
	b.WriteString(c.Heading())
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tFUNCTION\tSTATUS\tCREATED\tERROR")
	for _, r := range runs {
		why := strings.Join(strings.Fields(r.Error), " ")
		if len(why) > 120 {
			why = strings.ToValidUTF8(why[:120], "") + "…"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.ID, r.Function, r.Status, r.CreatedAt.UTC().Format("2006-01-02 15:04:05Z"), cmp.Or(why, "-"))
	}
	_ = tw.Flush() // into a strings.Builder: cannot fail
	_, err := io.WriteString(w, b.String())
	return err
}

func runVersions(ctx context.Context, env *cli.Env, args []string) error {
	fs := cli.NewFlagSet(env, "runs versions", "[flags]",
		"Reads GET /v1/versions of a running \"sluice serve\" and prints its version, then each other\n"+
			"version with unfinished runs: how many, by function, and the functions the server lacks.")
	api := addAPIFlags(fs)
	raw := fs.Bool("json", false, "print the server's answer as it is")
	if err := cli.ParseFlags(fs, env, args); err != nil {
		return err
	}
	c := api.client(env)
	if *raw {
		body, err := c.get(ctx, "/v1/versions")
		if err != nil {
			return err
		}
		_, err = env.Stdout.Write(body)
		return err
	}
	v, err := c.versions(ctx)
	if err != nil {
		return err
	}
	return renderVersions(env.Stdout, v)
}

// renderVersions prints the server's version, then a table of the others.
func renderVersions(w io.Writer, v versionsAnswer) error {
	fmt.Fprintf(w, "this server's version: %s\n", v.Current)
	if len(v.Others) == 0 {
		_, err := fmt.Fprintln(w, "no other version has unfinished runs")
		return err
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tRUNS\tBY FUNCTION\tNOT FUNCTIONS OF THIS SERVER")
	for _, o := range v.Others {
		fns := make([]string, 0, len(o.Runs))
		for fn := range o.Runs {
			fns = append(fns, fn)
		}
		// Most runs first, then by name.
		slices.SortFunc(fns, func(a, b string) int { return cmp.Or(cmp.Compare(o.Runs[b], o.Runs[a]), strings.Compare(a, b)) })
		by := make([]string, len(fns))
		for i, fn := range fns {
			by[i] = fn + " " + num.Group(o.Runs[fn])
		}
		unknown := "-"
		if len(o.Unknown) > 0 {
			unknown = strings.Join(o.Unknown, ", ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", o.Version, num.Group(o.Total), strings.Join(by, ", "), unknown)
	}
	_ = tw.Flush() // into a strings.Builder: cannot fail
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, "resume them here: sluice runs resume --from-version VERSION; or cancel them: sluice runs cancel --from-version VERSION")
	return err
}

// runMoveVersion resumes (verb "resume") or cancels the unfinished runs of
// a version through the server.
func runMoveVersion(ctx context.Context, env *cli.Env, verb string, args []string) error {
	what := "Resumes on a running \"sluice serve\", under its version, the unfinished runs recorded under\n" +
		"version V (POST /v1/versions/V/resume): each keeps the steps it recorded and goes back to\n" +
		"its function's queue. Runs of a function the server lacks, and runs pending on a process\n" +
		"that still runs, are skipped; each is printed with why."
	if verb == "cancel" {
		what = "Cancels on a running \"sluice serve\" the unfinished runs recorded under version V\n" +
			"(POST /v1/versions/V/cancel). Runs pending on a process that still runs are skipped;\n" +
			"each is printed with why."
	}
	fs := cli.NewFlagSet(env, "runs "+verb, "--from-version V [flags]", what)
	api := addAPIFlags(fs)
	from := fs.String("from-version", "", "the version whose unfinished runs to "+verb+" (required)")
	raw := fs.Bool("json", false, "print the server's answer as it is")
	if err := cli.ParseFlags(fs, env, args); err != nil {
		return err
	}
	if *from == "" {
		fmt.Fprintf(env.Stderr, "sluice runs %s: --from-version is required\n", verb)
		return cli.ErrUsage
	}
	if err := engine.CheckVersion(*from); err != nil {
		return fmt.Errorf("--from-version: %w", err)
	}
	c := api.client(env)
	// A version of many runs takes a while: the server answers once it
	// has moved them all, and an interrupt stops the wait.
	c.http.Timeout = 0
	body, err := c.post(ctx, "/v1/versions/"+url.PathEscape(*from)+"/"+verb)
	if err != nil {
		return err
	}
	if *raw {
		_, err = env.Stdout.Write(body)
		return err
	}
	var rep run.VersionReport
	if err := json.Unmarshal(body, &rep); err != nil {
		return fmt.Errorf("%s: the answer is not a report: %w", c.url("/v1/versions/"+url.PathEscape(*from)+"/"+verb), err)
	}
	return renderReport(env.Stdout, verb, rep)
}

// renderReport prints what a resume or a cancel did: the runs done, then
// the runs skipped with why.
func renderReport(w io.Writer, verb string, rep run.VersionReport) error {
	done := map[string]string{"resume": "resumed here", "cancel": "cancelled"}[verb]
	fmt.Fprintf(w, "version %s: %s %s %s\n", rep.Version, done, num.Group(int64(len(rep.Done))), plural(len(rep.Done), "run"))
	for _, id := range rep.Done {
		fmt.Fprintf(w, "  %s\n", id)
	}
	if len(rep.Skipped) > 0 {
		fmt.Fprintf(w, "skipped %s %s:\n", num.Group(int64(len(rep.Skipped))), plural(len(rep.Skipped), "run"))
		for _, s := range rep.Skipped {
			fmt.Fprintf(w, "  %s: %s\n", s.ID, s.Reason)
		}
	}
	return nil
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
