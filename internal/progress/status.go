package progress

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-dev/sluice/internal/cli"
	"github.com/sluice-dev/sluice/internal/clock"
	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/httpjson"
)

// Clock is the clock WriteStatus writes times against: the server's, when
// known.
type Clock struct {
	// Now is the server's clock at its answer; zero when it is unknown.
	Now time.Time
	// Label names the server's clock when it is not this machine's.
	Label string
}

// ServerClock is the server's clock from its answer: the clock it says
// (said, as every answer of a server that carries times does), or, from
// an older server that does not say it, this machine's wall clock —
// unless the answer holds a time of progress still ahead of it, which a
// server on the wall clock cannot have: its app runs on a simulated clock,
// and times are written as they are, not relative to a now that is
// unknown.
func ServerClock(said httpjson.Clock, flows []health.Flow, wall time.Time) Clock {
	if !said.Now.IsZero() {
		return Clock{Now: said.Now, Label: clock.Label(said.Speed, said.Now, wall)}
	}
	for _, f := range flows {
		if f.LastProgressAt.After(wall.Add(time.Minute)) {
			return Clock{Label: "simulated time, ahead of this machine's clock"}
		}
	}
	return Clock{Now: wall}
}

// Heading is the line above a table of times on c that names c where it
// is not this machine's clock, "" where it is.
func (c Clock) Heading() string {
	if c.Label == "" {
		return ""
	}
	return fmt.Sprintf("Times in UTC on the server's clock (%s).\n", c.Label)
}

// WriteStatus prints flows as a table, their times relative to the
// server's clock c (written as they are when it is unknown). Each flow's
// progress, rate and time left are progress.Of's, as the dashboard shows
// them.
func WriteStatus(w io.Writer, flows []health.Flow, c Clock) error {
	if len(flows) == 0 {
		_, err := fmt.Fprintln(w, "no flows")
		return err
	}
	now := c.Now
	var b strings.Builder
	b.WriteString(c.Heading())
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATE\tPROGRESS\tRATE/H\tTIME LEFT\tLAST PROGRESS\tFAILURES\tIN FLIGHT\tLAST ERROR / WAITING ON")
	for _, f := range flows {
		fig := Of(f, now)
		rate, left, last, failures, inFlight := "-", "-", "never", "-", "-"
		if fig.RatePerHour > 0 {
			rate = Rate(fig.RatePerHour)
		}
		if fig.Left > 0 {
			left = Span(fig.Left)
		}
		switch {
		case f.LastProgressAt.IsZero():
		case now.IsZero():
			last = f.LastProgressAt.UTC().Format("2006-01-02 15:04:05Z")
		default:
			last = Span(now.Sub(f.LastProgressAt)) + " ago"
		}
		if f.ConsecutiveFailures > 0 {
			failures = fmt.Sprint(f.ConsecutiveFailures)
		}
		if f.InFlightTarget > 0 {
			// A backfill's calls going, of how many it would keep going, and
			// what keeps it from more.
			inFlight = fmt.Sprintf("%d/%d %s", f.InFlight, f.InFlightTarget, f.LimitedBy)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", f.Name, f.State, fig.Bar(), rate, left, last, failures, inFlight, note(f, now))
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

// note is the last column: the last error, then what the flow waits on.
func note(f health.Flow, now time.Time) string {
	var parts []string
	if f.LastError != "" {
		parts = append(parts, "error: "+cli.Clip(f.LastError, 80))
	}
	if f.WaitingOn != "" {
		s := "waiting on " + f.WaitingOn
		if !f.WaitingUntil.IsZero() {
			s += " until " + f.WaitingUntil.UTC().Format(time.TimeOnly) + "Z"
			if d := f.WaitingUntil.Sub(now); d > 0 && !now.IsZero() {
				s += " (in " + Span(d) + ")"
			}
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}
