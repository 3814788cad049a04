package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/num"
)

func init() {
	register(&command{
		name:    "status",
		summary: "show the health of a running server's jobs: state, progress, rate, ETA, what each waits on",
		run:     runStatus,
	})
}

func runStatus(ctx context.Context, env *cmdEnv, args []string) error {
	fs := newFlagSet(env, "status", "[flags]",
		"Reads GET /v1/flows of a running \"sluice serve\" (or \"sluice gateway\") and prints each flow's\n"+
			"state, progress, rate per hour, ETA, last progress, failures, and its last error or what\n"+
			"it waits on. With --watch it redraws every --interval until interrupted.")
	url := fs.String("url", "http://127.0.0.1:8288", "base URL of the sluice API")
	token := fs.String("token", "", "the API's bearer token (visible to other users in the process list: prefer --token-env)")
	tokenEnv := fs.String("token-env", "SLUICE_API_TOKEN", "environment variable holding the API's bearer token, used when --token is not given")
	watch := fs.Bool("watch", false, "redraw every --interval until interrupted")
	interval := fs.Duration("interval", 2*time.Second, "time between redraws with --watch")
	raw := fs.Bool("json", false, "print the server's answer as it is")
	if err := parseFlags(fs, env, args); err != nil {
		return err
	}
	if *interval < 10*time.Millisecond {
		return fmt.Errorf("--interval %s: want at least 10ms", *interval)
	}
	tok := *token
	if tok == "" {
		tok = env.getenv(*tokenEnv)
	}
	c := &statusClient{url: strings.TrimRight(*url, "/") + "/v1/flows", token: tok, http: &http.Client{Timeout: 10 * time.Second}}
	show := func() error {
		body, err := c.get(ctx)
		if err != nil {
			return err
		}
		if *raw {
			_, err = env.stdout.Write(body)
			return err
		}
		// Read what this version knows; a newer server may answer more.
		var v struct{ Flows []health.Flow }
		if err := json.Unmarshal(body, &v); err != nil {
			return fmt.Errorf("%s: the answer is not a list of flows: %w", c.url, err)
		}
		return renderStatus(env.stdout, v.Flows, time.Now())
	}
	if !*watch {
		return show()
	}
	t := time.NewTicker(*interval)
	defer t.Stop()
	for {
		if !*raw {
			fmt.Fprint(env.stdout, "\x1b[H\x1b[2J") // clear the screen, cursor home
		}
		if err := show(); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// A server restarting is worth watching through.
			fmt.Fprintf(env.stdout, "sluice status: %v\n", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

type statusClient struct {
	url, token string
	http       *http.Client
}

// get returns the body of GET /v1/flows, or an error that says the
// server's own when it refused.
func (c *statusClient) get(ctx context.Context) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return nil, fmt.Errorf("--url: %w", err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", c.url, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error any }
		if json.Unmarshal(body, &e) == nil && e.Error != nil {
			// The API answers {"error": "…"}, the gateway {"error": {"message": …}}.
			if m, ok := e.Error.(map[string]any); ok {
				e.Error = m["message"]
			}
			return nil, fmt.Errorf("GET %s: %v (HTTP %d)", c.url, e.Error, resp.StatusCode)
		}
		return nil, fmt.Errorf("GET %s: HTTP %d", c.url, resp.StatusCode)
	}
	return body, nil
}

// renderStatus prints flows as a table, their times relative to now.
func renderStatus(w io.Writer, flows []health.Flow, now time.Time) error {
	if len(flows) == 0 {
		_, err := fmt.Fprintln(w, "no flows")
		return err
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATE\tPROGRESS\tRATE/H\tETA\tLAST PROGRESS\tFAILURES\tLAST ERROR / WAITING ON")
	for _, f := range flows {
		rate, eta, last, failures := "-", "-", "never", "-"
		if f.RatePerHour > 0 {
			rate = fmt.Sprintf("%.1f", f.RatePerHour)
		}
		if !f.ETA.IsZero() {
			eta = "in " + span(f.ETA.Sub(now))
		}
		if !f.LastProgressAt.IsZero() {
			last = span(now.Sub(f.LastProgressAt)) + " ago"
		}
		if f.ConsecutiveFailures > 0 {
			failures = fmt.Sprint(f.ConsecutiveFailures)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", f.Name, f.State, bar(f.Done, f.Remaining), rate, eta, last, failures, note(f, now))
	}
	_ = tw.Flush() // into a strings.Builder: cannot fail
	// The padding of an empty last column is not worth a line's width.
	lines := strings.SplitAfter(b.String(), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \n")
	}
	_, err := io.WriteString(w, strings.Join(lines, "\n"))
	return err
}

const barWidth = 20

// bar draws done out of done+remaining: "[#####...............]  25% 1/4";
// "-" for a flow with neither.
func bar(done, remaining int64) string {
	total := done + remaining
	if done < 0 || remaining < 0 || total <= 0 {
		return "-"
	}
	frac := float64(done) / float64(total)
	n := int(frac * barWidth)
	return fmt.Sprintf("[%s%s] %3d%% %s/%s", strings.Repeat("#", n), strings.Repeat(".", barWidth-n),
		int(frac*100), num.Group(done), num.Group(total))
}

// note is the last column: the last error, then what the flow waits on.
func note(f health.Flow, now time.Time) string {
	var parts []string
	if f.LastError != "" {
		parts = append(parts, "error: "+clip(f.LastError, 80))
	}
	if f.WaitingOn != "" {
		s := "waiting on " + f.WaitingOn
		if !f.WaitingUntil.IsZero() {
			s += " until " + f.WaitingUntil.UTC().Format(time.TimeOnly) + "Z"
			if d := f.WaitingUntil.Sub(now); d > 0 {
				s += " (in " + span(d) + ")"
			}
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// clip cuts s to n runes, on one line.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// span writes a duration the way a person reads one at a glance: 45s,
// 12m, 3h05m, 2d04h.
func span(d time.Duration) string {
	switch d = max(d, 0); {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}
