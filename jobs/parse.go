package jobs

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"text/template"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/yamlfile"
)

// Config is a file's jobs, parsed and checked as far as they can be
// without the databases.
type Config struct {
	path  string
	lines yamlfile.Lines
	file  File
	jobs  []*job
}

// Defaults of a job's settings.
const (
	DefaultMaxTokens = 256
	DefaultKey       = "id"
	DefaultTimeout   = 10 * time.Second
	// MaxBatch bounds prompt.batch_max; MaxOutputTokens bounds max_tokens.
	MaxBatch        = 1000
	MaxOutputTokens = 1 << 20
	// MaxInFlight bounds in_flight, as a backfill's.
	MaxInFlight = 1024
	// MaxWithin bounds within: a batch of a day's share is as large as
	// any limit allows.
	MaxWithin = 24 * time.Hour
)

// The ways an answer is split.
const (
	SplitNumbered = "numbered"
	SplitLines    = "lines"
	SplitJSON     = "json"
	FallbackWords = "words"
	// FallbackReject refuses every item of an answer split numbered that
	// has not one numbered block per item.
	FallbackReject = "reject"
)

// job is one job, compiled.
type job struct {
	Job
	at                 string // its path in the file: jobs[2]
	sourceDB, outputDB string // the databases, "" for sluice's
	system, item, user *template.Template
	outSQL             string   // Output.SQL with $1, $2 … for its parameters
	outParams          []string // the parameters, in order
	authToken          string   // read from AuthEnv by Register
	timeout            time.Duration
	split, fallback    string
	checkTokens        int
	flowWeight         float64
	flowPriority       int
}

var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,99}$`)

// identPattern is a column or field name a query or event gives.
var identPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// Parse checks the jobs of f, the file at path whose lines are lines, as
// Load does.
func Parse(path string, f File, lines yamlfile.Lines) (*Config, error) {
	c := &Config{path: path, lines: lines, file: f}
	byName := map[string]*job{}
	for i := range f.Jobs {
		j, err := c.parseJob(i, f.Jobs[i])
		if err != nil {
			return nil, err
		}
		if byName[j.Name] != nil {
			return nil, c.fail(j.at+".name", fmt.Errorf("%q: another job has this name", j.Name))
		}
		byName[j.Name] = j
		c.jobs = append(c.jobs, j)
	}
	for _, j := range c.jobs {
		if j.After == "" {
			continue
		}
		a := byName[j.After]
		switch {
		case a == nil:
			return nil, c.fail(j.at+".after", fmt.Errorf("%q: no job has this name (jobs: %s)", j.After, c.names()))
		case a == j:
			return nil, c.fail(j.at+".after", fmt.Errorf("%q: a job cannot run after itself", j.After))
		case j.Source.Event != "" || a.Source.Event != "":
			return nil, c.fail(j.at+".after", errors.New("after: needs two jobs with a source query: an event's job has no items to wait for"))
		}
		// A chain that comes back to j would wait for ever.
		seen := map[*job]bool{j: true}
		for a != nil && a.After != "" {
			if seen[a] {
				return nil, c.fail(j.at+".after", fmt.Errorf("%q: the jobs' after: form a cycle", j.After))
			}
			seen[a] = true
			a = byName[a.After]
		}
	}
	return c, nil
}

// fail places err at key path of the file.
func (c *Config) fail(key string, err error) error {
	return fmt.Errorf("%s: %w", c.path, &yamlfile.Error{Path: key, Line: c.lines.Line(key), Err: err})
}

func (c *Config) names() string {
	var n []string
	for _, j := range c.jobs {
		n = append(n, j.Name)
	}
	return strings.Join(n, ", ")
}

func (c *Config) parseJob(i int, in Job) (*job, error) {
	j := &job{Job: in, at: fmt.Sprintf("jobs[%d]", i)}
	at := func(k string) string { return j.at + "." + k }
	if !namePattern.MatchString(j.Name) {
		return nil, c.fail(at("name"), fmt.Errorf("%q: want 1-100 letters, digits or ._:- starting with a letter or digit", j.Name))
	}
	s := &j.Source
	s.Key = cmp.Or(s.Key, DefaultKey)
	switch {
	case (s.Query == "") == (s.Event == ""):
		return nil, c.fail(at("source"), errors.New("give one of query (items from a database) and event (one run per event)"))
	case s.Event != "" && s.DB != "":
		return nil, c.fail(at("source.db"), errors.New("an event's job reads no database: leave db out, or give output.db"))
	case !identPattern.MatchString(s.Key):
		return nil, c.fail(at("source.key"), fmt.Errorf("%q: want a column or field name (letters, digits, _)", s.Key))
	}
	if s.Query != "" {
		j.sourceDB = cmp.Or(s.DB, c.file.SourceDB)
		if q := strings.TrimRight(strings.TrimSpace(s.Query), ";"); strings.Contains(q, ";") {
			return nil, c.fail(at("source.query"), errors.New("one statement only (a SELECT)"))
		}
	}
	p := &j.Prompt
	p.BatchMax = cmp.Or(p.BatchMax, 1)
	j.split, j.fallback = cmp.Or(p.Split, SplitNumbered), cmp.Or(p.Fallback, FallbackReject)
	switch {
	case p.BatchMax < 1 || p.BatchMax > MaxBatch:
		return nil, c.fail(at("prompt.batch_max"), fmt.Errorf("%d: want from 1 to %d", p.BatchMax, MaxBatch))
	case s.Event != "" && p.BatchMax > 1:
		return nil, c.fail(at("prompt.batch_max"), errors.New("an event's job asks about one item per call: leave batch_max out"))
	case j.split != SplitNumbered && j.split != SplitLines && j.split != SplitJSON:
		return nil, c.fail(at("prompt.split"), fmt.Errorf("%q: want numbered, lines or json", p.Split))
	case j.fallback != FallbackReject && j.fallback != FallbackWords:
		return nil, c.fail(at("prompt.fallback"), fmt.Errorf("%q: want reject or words", p.Fallback))
	case p.Fallback != "" && j.split != SplitNumbered:
		return nil, c.fail(at("prompt.fallback"), errors.New("a fallback is for split: numbered"))
	case p.Item == "":
		return nil, c.fail(at("prompt.item"), errors.New("missing: the template of one item, such as {{.title}}"))
	}
	var err error
	if j.system, err = parseTemplate("system", p.System); err != nil {
		return nil, c.fail(at("prompt.system"), err)
	}
	if j.item, err = parseTemplate("item", p.Item); err != nil {
		return nil, c.fail(at("prompt.item"), err)
	}
	if j.user, err = parseTemplate("user", cmp.Or(p.User, DefaultUser)); err != nil {
		return nil, c.fail(at("prompt.user"), err)
	}
	j.MaxTokens = cmp.Or(j.MaxTokens, DefaultMaxTokens)
	if j.MaxTokens < 1 || j.MaxTokens > MaxOutputTokens {
		return nil, c.fail(at("max_tokens"), fmt.Errorf("%d: want from 1 to %d", j.MaxTokens, MaxOutputTokens))
	}
	j.checkTokens = cmp.Or(j.Checks.MaxTokens, j.MaxTokens)
	if j.checkTokens < 1 {
		return nil, c.fail(at("checks.max_tokens"), fmt.Errorf("%d: want at least 1", j.Checks.MaxTokens))
	}
	if err := c.parseOutput(j, at); err != nil {
		return nil, err
	}
	j.flowWeight, j.flowPriority = j.Flow.Weight, j.Flow.Priority
	if w := j.flowWeight; w != 0 && !(w >= governor.MinWeight && w <= governor.MaxWeight) {
		return nil, c.fail(at("flow.weight"), fmt.Errorf("%v: want from %g to %g", w, float64(governor.MinWeight), float64(governor.MaxWeight)))
	}
	if pr := j.flowPriority; pr < governor.MinPriority || pr > governor.MaxPriority {
		return nil, c.fail(at("flow.priority"), fmt.Errorf("%d: want from %d to %d", pr, governor.MinPriority, governor.MaxPriority))
	}
	if j.AlertWebhook != "" && !httpURL(j.AlertWebhook) {
		return nil, c.fail(at("alert_webhook"), fmt.Errorf("%q: want an http:// or https:// URL", j.AlertWebhook))
	}
	if s.Event != "" {
		for k, set := range map[string]bool{"stall_after": j.StallAfter != 0, "alert_webhook": j.AlertWebhook != "", "poll": j.Poll != 0,
			"retry_after": j.RetryAfter != 0, "max_rejects": j.MaxRejects != 0, "in_flight": j.InFlight != 0, "within": j.Within != 0} {
			if set {
				return nil, c.fail(at(k), errors.New("a setting of a job with a source query; an event's job runs once per event"))
			}
		}
	}
	if w := time.Duration(j.Within); w > MaxWithin {
		return nil, c.fail(at("within"), fmt.Errorf("%s: want at most %s", w, MaxWithin))
	}
	if j.MaxRejects < 0 {
		return nil, c.fail(at("max_rejects"), fmt.Errorf("%d: want 0 (the default, 3) or more", j.MaxRejects))
	}
	if j.InFlight < 0 || j.InFlight > MaxInFlight {
		return nil, c.fail(at("in_flight"), fmt.Errorf("%d: want from 0 (sized to the quota) to %d", j.InFlight, MaxInFlight))
	}
	return j, nil
}

func (c *Config) parseOutput(j *job, at func(string) string) error {
	o := &j.Output
	switch {
	case (o.SQL == "") == (o.URL == ""):
		return c.fail(at("output"), errors.New("give one of sql (a statement on a database) and url (an HTTP endpoint)"))
	case o.URL != "" && o.DB != "":
		return c.fail(at("output.db"), errors.New("a database for an HTTP output: leave db out, or give sql"))
	case o.URL != "" && !httpURL(o.URL):
		return c.fail(at("output.url"), fmt.Errorf("%q: want an http:// or https:// URL", o.URL))
	case o.SQL != "" && (o.AuthEnv != "" || o.Timeout != 0):
		return c.fail(at("output"), errors.New("auth_env and timeout are for an HTTP output (url)"))
	case o.AuthEnv != "" && !identPattern.MatchString(o.AuthEnv):
		return c.fail(at("output.auth_env"), fmt.Errorf("%q: want the name of an environment variable", o.AuthEnv))
	}
	j.timeout = cmp.Or(time.Duration(o.Timeout), DefaultTimeout)
	if o.SQL == "" {
		return nil
	}
	j.outputDB = cmp.Or(o.DB, j.Source.DB, c.file.SourceDB)
	if q := strings.TrimRight(strings.TrimSpace(o.SQL), ";"); strings.Contains(q, ";") {
		return c.fail(at("output.sql"), errors.New("one statement only"))
	}
	var err error
	if j.outSQL, j.outParams, err = bindNamed(o.SQL); err != nil {
		return c.fail(at("output.sql"), err)
	}
	return nil
}

func httpURL(s string) bool {
	return strings.HasPrefix(s, "http://") || strings.HasPrefix(s, "https://")
}

// Params are the parameters an output statement may use.
var Params = []string{"key", "output", "model", "tokens", "processed_at", "processed_at_ms", "job"}

// bindNamed rewrites the :name parameters of q as $1, $2 … (both
// databases take them), each name once however often it is used, and
// returns the names in order. Quoted text, quoted names, comments and
// PostgreSQL's :: casts are left as they are.
func bindNamed(q string) (string, []string, error) {
	var b strings.Builder
	var names []string
	index := map[string]int{}
	for i := 0; i < len(q); i++ {
		ch := q[i]
		switch {
		case ch == '\'' || ch == '"':
			end := strings.IndexByte(q[i+1:], ch)
			if end < 0 {
				return "", nil, fmt.Errorf("a quote %c without its end", ch)
			}
			b.WriteString(q[i : i+end+2])
			i += end + 1
		case ch == '-' && strings.HasPrefix(q[i:], "--"):
			end := strings.IndexByte(q[i:], '\n')
			if end < 0 {
				end = len(q) - i
			}
			b.WriteString(q[i : i+end])
			i += end - 1
		case ch == ':' && i+1 < len(q) && q[i+1] == ':':
			b.WriteString("::")
			i++
		case ch == ':' && i+1 < len(q) && isIdentStart(q[i+1]):
			k := i + 1
			for k < len(q) && isIdent(q[k]) {
				k++
			}
			name := q[i+1 : k]
			if !known(name) {
				return "", nil, fmt.Errorf(":%s is not a parameter (want %s)", name, ":"+strings.Join(Params, ", :"))
			}
			n, ok := index[name]
			if !ok {
				names = append(names, name)
				n = len(names)
				index[name] = n
			}
			fmt.Fprintf(&b, "$%d", n)
			i = k - 1
		case ch == '$' || ch == '?':
			return "", nil, fmt.Errorf("%c: name the parameters (:key, :output …) instead", ch)
		default:
			b.WriteByte(ch)
		}
	}
	if len(names) == 0 {
		return "", nil, fmt.Errorf("uses none of the parameters (%s): it would write the same for every item", ":"+strings.Join(Params, ", :"))
	}
	return b.String(), names, nil
}

func known(name string) bool {
	for _, p := range Params {
		if p == name {
			return true
		}
	}
	return false
}

func isIdentStart(c byte) bool { return c == '_' || (c|0x20) >= 'a' && (c|0x20) <= 'z' }
func isIdent(c byte) bool      { return isIdentStart(c) || c >= '0' && c <= '9' }

// Jobs are the jobs as the file gives them, with their defaults.
func (c *Config) Jobs() []Job {
	out := make([]Job, len(c.jobs))
	for i, j := range c.jobs {
		out[i] = j.Job
	}
	return out
}

// Flows are the jobs' flows, for sluice.Config.Flows: each job draws on a
// flow of its name.
func (c *Config) Flows() []governor.FlowConfig {
	if c == nil {
		return nil
	}
	out := make([]governor.FlowConfig, len(c.jobs))
	for i, j := range c.jobs {
		out[i] = governor.FlowConfig{Name: j.Name, Weight: j.flowWeight, Priority: j.flowPriority}
	}
	return out
}

// RefuseName returns why the job called name cannot be, placed at its
// name in the file (a name another part of the app has for its own flow).
func (c *Config) RefuseName(name string, why error) error {
	for _, j := range c.jobs {
		if j.Name == name {
			return c.fail(j.at+".name", fmt.Errorf("%q: %w", name, why))
		}
	}
	return fmt.Errorf("%s: job %q: %w", c.path, name, why)
}

// Path is the file the jobs come from.
func (c *Config) Path() string { return c.path }
