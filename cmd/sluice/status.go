package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/httpjson"
	"github.com/sluice-dev/sluice/internal/metrics"
	"github.com/sluice-dev/sluice/internal/num"
	"github.com/sluice-dev/sluice/internal/progress"
	"github.com/sluice-dev/sluice/run"
)

func init() {
	register(&cli.Command{
		Name:    "status",
		Summary: "show the health of a running server's jobs: state, progress, rate, time left, what each waits on",
		Run:     runStatus,
	})
}

func runStatus(ctx context.Context, env *cli.Env, args []string) error {
	fs := cli.NewFlagSet(env, "status", "[flags]",
		"Reads GET /v1/flows of a running \"sluice serve\" (or \"sluice gateway\") and prints each flow's\n"+
			"state, progress, rate per hour, time left at that rate, last progress, failures, and its last error or what\n"+
			"it waits on; then, from GET /v1/versions, the unfinished runs of other versions that wait\n"+
			"for \"sluice runs resume\" or \"sluice runs cancel\". With --watch it redraws every\n"+
			"--interval until interrupted.")
	api := addAPIFlags(fs)
	watch := fs.Bool("watch", false, "redraw every --interval until interrupted")
	interval := fs.Duration("interval", 2*time.Second, "time between redraws with --watch")
	raw := fs.Bool("json", false, "print the server's answer to GET /v1/flows as it is")
	if err := cli.ParseFlags(fs, env, args); err != nil {
		return err
	}
	if *interval < 10*time.Millisecond {
		return fmt.Errorf("--interval %s: want at least 10ms", *interval)
	}
	c := api.client(env)
	show := func() error {
		body, err := c.get(ctx, "/v1/flows")
		if err != nil {
			return err
		}
		if *raw {
			_, err = env.Stdout.Write(body)
			return err
		}
		// Read what this version knows; a newer server may answer more.
		// Its times are on its clock, which it says.
		var v struct {
			Flows []struct {
				health.Flow
				ClientRetries []metrics.ClientRetries `json:"client_retries"`
			}
			httpjson.Clock
		}
		if err := json.Unmarshal(body, &v); err != nil {
			return fmt.Errorf("%s: the answer is not a list of flows: %w", c.url("/v1/flows"), err)
		}
		flows := make([]health.Flow, len(v.Flows))
		var retries []metrics.ClientRetries
		for i, f := range v.Flows {
			flows[i] = f.Flow
			retries = append(retries, f.ClientRetries...)
		}
		if err := progress.WriteStatus(env.Stdout, flows, progress.ServerClock(v.Clock, flows, time.Now())); err != nil {
			return err
		}
		if err := renderRetries(env.Stdout, retries); err != nil {
			return err
		}
		vs, err := c.versions(ctx)
		if isNotFound(err) {
			return nil // a server older than the route
		}
		if err != nil {
			return err
		}
		return renderWaiting(env.Stdout, vs.Others)
	}
	if !*watch {
		return show()
	}
	t := time.NewTicker(*interval)
	defer t.Stop()
	for {
		if !*raw {
			fmt.Fprint(env.Stdout, "\x1b[H\x1b[2J") // clear the screen, cursor home
		}
		if err := show(); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// A server restarting is worth watching through.
			fmt.Fprintf(env.Stdout, "sluice status: %v\n", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// apiFlags are the flags of a command that talks to a running server's API.
type apiFlags struct {
	url, token, tokenEnv *string
}

func addAPIFlags(fs *flag.FlagSet) *apiFlags {
	return &apiFlags{
		url:      fs.String("url", "http://127.0.0.1:8288", "base URL of the sluice API"),
		token:    fs.String("token", "", "the API's bearer token (visible to other users in the process list: prefer --token-env)"),
		tokenEnv: fs.String("token-env", "SLUICE_API_TOKEN", "environment variable holding the API's bearer token, used when --token is not given"),
	}
}

// client is the API's client for the flags: --token, or else the variable
// --token-env names.
func (f *apiFlags) client(env *cli.Env) *apiClient {
	tok := *f.token
	if tok == "" {
		tok = env.Getenv(*f.tokenEnv)
	}
	return &apiClient{base: strings.TrimRight(*f.url, "/"), token: tok, http: &http.Client{Timeout: 10 * time.Second}}
}

// apiClient sends requests to a running server's API.
type apiClient struct {
	base, token string
	http        *http.Client
}

func (c *apiClient) url(path string) string { return c.base + path }

// apiError is an answer of the API other than 200, with the server's own
// words when it gave them.
type apiError struct {
	Method, URL string
	Status      int
	Message     string
}

func (e *apiError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("%s %s: HTTP %d", e.Method, e.URL, e.Status)
	}
	return fmt.Sprintf("%s %s: %s (HTTP %d)", e.Method, e.URL, e.Message, e.Status)
}

// isNotFound reports whether err is the API's 404: a route the server
// does not have.
func isNotFound(err error) bool {
	ae, ok := errors.AsType[*apiError](err)
	return ok && ae.Status == http.StatusNotFound
}

// get returns the body of GET path, or an *apiError.
func (c *apiClient) get(ctx context.Context, path string) ([]byte, error) {
	return c.do(ctx, http.MethodGet, path)
}

// post sends POST path with no body, as JSON as the API wants every POST.
func (c *apiClient) post(ctx context.Context, path string) ([]byte, error) {
	return c.do(ctx, http.MethodPost, path)
}

func (c *apiClient) do(ctx context.Context, method, path string) ([]byte, error) {
	u := c.url(path)
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, fmt.Errorf("--url: %w", err)
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, cli.Unreachable(err, c.base)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		ae := &apiError{Method: method, URL: u, Status: resp.StatusCode}
		var e struct{ Error any }
		if json.Unmarshal(body, &e) == nil && e.Error != nil {
			// The API answers {"error": "…"}, the gateway {"error": {"message": …}}.
			if m, ok := e.Error.(map[string]any); ok {
				e.Error = m["message"]
			}
			ae.Message = fmt.Sprint(e.Error)
		}
		return nil, ae
	}
	return body, nil
}

// versionsAnswer is GET /v1/versions's answer.
type versionsAnswer struct {
	Current string            `json:"current"`
	Others  []run.VersionRuns `json:"others"`
}

// versions reads GET /v1/versions.
func (c *apiClient) versions(ctx context.Context) (versionsAnswer, error) {
	var v versionsAnswer
	body, err := c.get(ctx, "/v1/versions")
	if err != nil {
		return v, err
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return v, fmt.Errorf("%s: the answer is not a list of versions: %w", c.url("/v1/versions"), err)
	}
	return v, nil
}

// renderWaiting prints a line per other version with unfinished runs,
// saying what to run.
func renderWaiting(w io.Writer, others []run.VersionRuns) error {
	for _, o := range others {
		runs, wait := "runs", "wait"
		if o.Total == 1 {
			runs, wait = "run", "waits"
		}
		line := fmt.Sprintf("%s %s of version %s %s: sluice runs resume --from-version %s (or cancel)", num.Group(o.Total), runs, o.Version, wait, o.Version)
		if len(o.Unknown) > 0 {
			line += "; not functions of this server, left by a resume: " + strings.Join(o.Unknown, ", ")
		}
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
	}
	return nil
}

// renderRetries prints, for a gateway, what each client key did after
// the gateway's own 429s in each flow: a client whose requests give up is
// running out of tries before the line runs out of requests.
func renderRetries(w io.Writer, rows []metrics.ClientRetries) error {
	if len(rows) == 0 {
		return nil
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nGATEWAY 429s\tCLIENT KEY\tREFUSED\tCAME BACK\tGAVE UP\tUNTRACKED\tWINDOW OPEN")
	for _, r := range rows {
		client := "-"
		if r.Client > 0 {
			client = fmt.Sprint(r.Client)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Flow, client, num.Group(r.Refused), num.Group(r.CameBack),
			num.Group(r.GaveUp), num.Group(r.Untracked), num.Group(r.Pending))
	}
	_ = tw.Flush() // into a strings.Builder: cannot fail
	_, err := io.WriteString(w, b.String())
	return err
}
