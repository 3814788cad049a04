package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"time"

	"github.com/sluice-dev/sluice/governor"
	"github.com/sluice-dev/sluice/internal/authlimit"
	"github.com/sluice-dev/sluice/internal/guard"
	"github.com/sluice-dev/sluice/internal/metrics"
	"github.com/sluice-dev/sluice/internal/redact"
	"github.com/sluice-dev/sluice/internal/route"
	"github.com/sluice-dev/sluice/internal/store"
	"github.com/sluice-dev/sluice/llm"
)

// DefaultFlow is the flow of a request that names none, or names one the
// configuration does not list.
const DefaultFlow = "default"

// FlowHeader names the flow a request draws on.
const FlowHeader = "X-Sluice-Flow"

// MaxWaitHeader sets one request's max wait for admission: a Go duration
// ("45s", "1m30s") or a number of seconds.
const MaxWaitHeader = "X-Sluice-Max-Wait"

// DefaultMaxFlowParked is Config.MaxFlowParked's default.
const DefaultMaxFlowParked = 64

// WaitingOnHeader, on a 429 for a request not admitted within its max
// wait, names what held it back: a limit ("tpm"), a day pacer ("tpd
// pacing"), "a provider pause" or "its turn".
const WaitingOnHeader = "X-Sluice-Waiting-On"

// Config configures a Gateway. Every field documents its default; Upstream
// is the only one required.
type Config struct {
	// Upstream is the provider's OpenAI-compatible API root, e.g.
	// "https://api.groq.com/openai/v1"; requests go to Upstream+"/chat/completions".
	Upstream string

	// Profile says how to read the provider's headers and error bodies, and
	// the format of the errors the gateway itself answers with. Default openai.
	Profile llm.Profile

	// APIKey is the provider key, sent upstream as a bearer token and
	// nowhere else: not in logs, errors, responses, /v1/flows or metrics.
	// Default: none (an upstream without authentication).
	APIKey string

	// Key names the provider key in /v1/flows, metrics and logs. Never the
	// secret. Default: the profile's name.
	Key string

	// Limits are the key's limits (0: the limit does not apply).
	Limits governor.Limits

	// Price is what the key's model charges, in money per million tokens;
	// Budget what its calls may cost per day and per month (it needs a
	// Price). Default: none.
	Price  governor.Price
	Budget governor.Budget

	// Stopping, when it closes, tells the gateway its server stops: a
	// request still waiting for admission is answered 503 with a
	// Retry-After at once (it was never sent, and another process may
	// take it), while calls already sent upstream go on to their answer.
	// Default nil: never.
	Stopping <-chan struct{}

	// FixedWindows and SettleOutput say how the provider counts, as
	// governor.Config's fields of the same names. Defaults: rolling windows;
	// the admission charge stands (settled for the anthropic profile, which
	// corrects output tokens at the end of a call).
	FixedWindows bool
	SettleOutput bool

	// Flows lists the flows with their weights, priorities and default
	// max_tokens. A request naming a flow not listed is counted in "default".
	Flows []Flow

	// ClientKeys, when not empty, authenticate callers: each request must
	// carry "Authorization: Bearer KEY" with one of them, or it gets 401. A
	// key with a Flow draws on that flow whatever X-Sluice-Flow says.
	// Default: none, every caller is accepted.
	ClientKeys []ClientKey

	// Throttle, when set, decides each client key: an address it
	// throttles gets 429 with retry-after, its key not compared, and a
	// wrong key counts toward throttling it. sluice serve --gateway gives
	// the app's, since the API's token is one of the keys: guesses here
	// count as the API's and the dashboard's do. Default nil: wrong keys
	// are answered 401 and not counted.
	Throttle Throttle

	// DefaultMaxTokens is given to a request without max_tokens whose flow
	// sets none, and counted as its output reservation. When it cannot fit
	// the limits with the request's prompt, the largest value that fits is
	// given instead. Default 1024.
	DefaultMaxTokens int

	// MaxWait is how long a request may wait for admission (and for retries
	// of transient upstream failures) before it gets 429 with a retry-after.
	// A request may set its own with X-Sluice-Max-Wait, up to MaxWaitCap.
	// Default 4m: longer than a minute window and the lag, so a request
	// that waits for a full window is admitted rather than refused; shorter
	// than the common client timeouts (aiohttp's 300 s, the openai SDKs'
	// 600 s), so the client hears the 429 instead of giving up first.
	MaxWait time.Duration

	// KeepPlace is how long a request answered 429 because its max wait
	// ended (or whose caller left) keeps its place in line after its
	// estimated admission: the same request sent again within that time
	// (same caller and flow, and the same body or Idempotency-Key) goes back
	// where it was instead of to the back of the line. Default 2m;
	// negative keeps no place.
	KeepPlace time.Duration

	// MaxFlowParked bounds the places in line kept for one caller in one
	// flow (see KeepPlace): a kept place counts ahead of the requests of
	// its flow that come after it, so a caller sending request after
	// request it does not wait for would otherwise push every other
	// caller's retry-after back, and take their places. A caller is a
	// client key (ClientKeys); without client keys every caller is one.
	// A request whose wait ends while its caller keeps this many places in
	// its flow, or while MaxWaiting places are kept in all, gets its 429
	// without a place kept, and no other place is given up for it. Default
	// 64, more than a batch client usually has in flight; at most
	// MaxWaiting.
	MaxFlowParked int

	// RetryWindow is how long after a 429 of its own (plus the retry-after
	// it gave, up to RetryWindow more) the gateway waits for the same
	// request to come back — the same caller and flow, the same body or
	// Idempotency-Key — before it counts the request as given up, per flow
	// and client key (/v1/flows, /metrics): a batch client whose tries run
	// out before the line does shows there. Default 10m, longer than the
	// pauses and backoffs batch clients take between tries.
	RetryWindow time.Duration

	// MaxFollowedRefusals bounds the 429s followed at once to see whether
	// their requests come back (see RetryWindow). A 429 past it is counted
	// as untracked, neither back nor given up, and no followed one is
	// dropped for it. Default 10,000 (about 1 MB).
	MaxFollowedRefusals int

	// ProgressWindow is how recently a flow must have had a call admitted
	// to be progressing in /v1/flows; after that it is waiting-for-quota
	// while calls of it wait, and idle otherwise. Default 5m: a minute
	// window frees room within a minute, so a flow that had nothing
	// admitted for five while calls wait is held back, not moving.
	ProgressWindow time.Duration

	// Speed is how many times as fast as the wall clock Now runs, for
	// simulations in compressed time (the simulator and demo): the gateway
	// and its governor divide what they sleep by it. Everything the gateway
	// says — retry-after, its headers, its messages — is in Now's time.
	// Default 1.
	Speed float64

	// MaxWaitCap bounds X-Sluice-Max-Wait. Default 10m (at least MaxWait).
	MaxWaitCap time.Duration

	// MaxBodyBytes bounds a request body; a larger one gets 413. Default 4 MiB.
	MaxBodyBytes int64

	// MaxWaiting bounds the requests waiting for admission on the key, of
	// every flow; one more gets 429 with retry-after 1s and a message that
	// names the bound. Default 1024.
	MaxWaiting int

	// MaxFlowWaiting bounds the requests of one flow waiting for
	// admission, so one flow cannot take every place in line. Default 512
	// (at most MaxWaiting).
	MaxFlowWaiting int

	// MaxWaitingBytes bounds the bodies of the requests waiting for
	// admission, added up: a waiting request holds its body and about as
	// much again in decoded form (docs/benchmarks.md). A request larger than
	// the bound on its own is still let in when nothing else waits.
	// Default 256 MiB.
	MaxWaitingBytes int64

	// Lag bounds how much later than its admission the provider counts a
	// call (the time it takes to send it): the governor holds every charge
	// this much longer than its window (governor.Config.Lag), so calls that
	// reach the provider later, or in another order than they were
	// admitted, do not take its window over a limit. Default 1s;
	// negative turns it off.
	Lag time.Duration

	// DayBurst is how far ahead of an even pace the day limits (RPD, TPD)
	// may be spent (governor.Config.DayBurst): an idle key answers at once
	// from it, and a backlog spends the day's budget evenly. Default 1h;
	// negative: no pacing. At most 24h. A Governor given in Config is paced
	// as its owner configured it.
	DayBurst time.Duration

	// RetryBase is the first backoff after a transient upstream failure
	// (5xx, overload, timeout, reset); it doubles each attempt, and a
	// provider's retry-after wins when longer. Retries happen only within
	// the request's max wait. Default 250ms.
	RetryBase time.Duration

	// HTTPClient sends upstream requests. Default: llm's, keeping up to
	// UpstreamIdleConns (64) idle connections to the upstream. Either way
	// each call gets 10s to connect and 10m for the answer's headers, and
	// no overall deadline, so streams can run.
	HTTPClient *http.Client

	// Logger receives one line per request and every upstream failure.
	// Default: discard.
	Logger *slog.Logger

	// Now is the clock. Default time.Now.
	Now func() time.Time

	// Metrics, if set, is where the gateway's series go (docs/metrics.md):
	// the Set a server shares among the parts it serves /metrics for, so
	// that one scrape answers for all of them. The key's governor is read
	// under Key, which must then be a name no other part of the Set uses
	// for a key. Nil gives the gateway a registry of its own, which its GET
	// /metrics serves either way.
	Metrics *metrics.Set

	// Governor, if set, is the key's governor the gateway admits against
	// instead of building one: that of an app in the same process, so that
	// the app's functions and the gateway's callers share the key as one
	// (docs/serve.md). Its owner configured it and keeps its charges, so
	// Limits, Window and Store must be left zero, and Accounting and Lag
	// are the governor's; Key is the governor's; every flow of Flows must be
	// one of the governor's with the same weight and priority. Nil: the
	// gateway builds its own.
	Governor *governor.Governor

	// ClusterFlows, on a process of a cluster, reads what every process of
	// it last said of its flows on the key, this one too (sluice.App's
	// ClusterFlows): GET /v1/flows then shows each flow on every process
	// and in total. Nil: this process's flows only.
	ClusterFlows func(context.Context) ([]NodeFlow, error)

	// Store, if set, keeps the key's charges (under Key) so a restarted
	// gateway remembers the day's usage instead of spending the day's
	// budget again: they are restored at New, written every second from
	// Start and on Stop. Nil keeps them in memory only.
	Store store.Store

	// Models, when not empty, are model names the gateway routes: a
	// request whose model is one of them is made on one of its targets —
	// each a provider key and model with a governor of its own — chosen
	// before admission by package route (docs/gateway.md, "Routes"). A
	// request naming another model goes to Upstream as before, or, on a
	// gateway without an Upstream, is answered 404 model_not_found.
	// Default: none.
	Models []Model

	// journal, when set (by tests), receives the governor's charges in the
	// order it makes them.
	journal func(governor.Charge)
}

// Model is a model name the gateway routes over several targets.
type Model struct {
	// Name is the model name clients send ("fast").
	Name    string
	Targets []Target
	// Rule ranks the targets: route.Cheapest (the default) or route.Ordered.
	Rule route.Rule
	// MaxWait is how long a call may wait for a better-ranked target
	// before a later one is used (route.Config.MaxWait; default 30s;
	// negative: a later one as soon as a better one cannot admit at once).
	MaxWait time.Duration
	// Failures, Cooldown and MaxCooldown say when a failing target is
	// out and for how long (route.Config; defaults 3, 30s and 5m).
	Failures              int
	Cooldown, MaxCooldown time.Duration
}

// Target is one provider key and model a routed model name can be made
// on. Each target has a governor of its own, kept in Config.Store under
// Name; a target listed under several models (the same Name, configured
// the same way) has one governor for all of them.
type Target struct {
	// Name names the target in X-Sluice-Target, /v1/flows, metrics, logs
	// and the store: letters, digits, '.', '_' and '-', at most 64. Never
	// the secret.
	Name string
	// Upstream is the target's OpenAI-compatible API root.
	Upstream string
	// APIKey is the target's provider key, sent to its Upstream only.
	APIKey string
	// Profile says how to read the target's headers and errors (default
	// openai); the gateway's answers keep the shape of Config.Profile.
	Profile llm.Profile
	// Model is the upstream's name of the model: a request's model is
	// rewritten to it.
	Model string
	// Limits, Price, Budget, FixedWindows and SettleOutput are the
	// target's, as Config's fields of the same names are the key's.
	Limits       governor.Limits
	Price        governor.Price
	Budget       governor.Budget
	FixedWindows bool
	SettleOutput bool
}

// MaxModels bounds Config.Models.
const MaxModels = 256

// Flow is one flow of requests: an app, a job, a tenant.
type Flow struct {
	Name string
	// Weight is the flow's share among flows of equal priority. Default 1.
	Weight float64
	// Priority: each step up multiplies the flow's share by 4 — a larger
	// reserved share, never an absolute one. Default 0.
	Priority int
	// DefaultMaxTokens is given to this flow's requests without max_tokens.
	// Default: Config.DefaultMaxTokens.
	DefaultMaxTokens int
	// Budget is money the flow's requests may cost per day and month
	// (it needs Config.Price); a client key bound to the flow has it as
	// its own. Default: none.
	Budget governor.Budget
}

// Throttle refuses the client addresses that sent too many wrong keys, and
// counts the wrong ones (authlimit.Throttle, sluice.App).
type Throttle interface {
	// CheckBearer decides r's "Authorization: Bearer KEY": wait > 0 when
	// r's address is throttled, right not called; else ok reports
	// right(KEY), and a wrong key is counted. A request without a bearer
	// key gets (0, false).
	CheckBearer(r *http.Request, right func(key string) bool) (wait time.Duration, ok bool)
}

var _ Throttle = (*authlimit.Throttle)(nil)

// ClientKey is a key callers present to the gateway (not the provider key).
type ClientKey struct {
	Key string
	// Flow, if set, is the flow every request with this key draws on.
	Flow string
}

// String describes the configuration with every key redacted.
func (c Config) String() string {
	return fmt.Sprintf("gateway.Config{Upstream: %q, Profile: %q, Key: %q, Limits: %q, Flows: %d, ClientKeys: %d, Models: %d, APIKey: %s}",
		c.Upstream, c.Profile, c.Key, c.Limits.String(), len(c.Flows), len(c.ClientKeys), len(c.Models), redact.KeyMark)
}

// GoString redacts %#v as well.
func (c Config) GoString() string { return c.String() }

func (c Config) withDefaults() Config {
	if p, err := llm.ParseProfile(string(c.Profile)); err == nil {
		c.Profile = p
	}
	c.Key = cmp.Or(c.Key, string(c.Profile))
	if c.Profile == llm.Anthropic {
		c.SettleOutput = true
	}
	c.DefaultMaxTokens = cmp.Or(c.DefaultMaxTokens, 1024)
	c.MaxWait = cmp.Or(c.MaxWait, 4*time.Minute)
	c.KeepPlace = cmp.Or(c.KeepPlace, 2*time.Minute)
	c.RetryWindow = cmp.Or(c.RetryWindow, 10*time.Minute)
	c.MaxFollowedRefusals = cmp.Or(c.MaxFollowedRefusals, 10000)
	if c.ProgressWindow <= 0 {
		c.ProgressWindow = 5 * time.Minute
	}
	c.MaxWaitCap = max(cmp.Or(c.MaxWaitCap, 10*time.Minute), c.MaxWait)
	c.MaxBodyBytes = cmp.Or(c.MaxBodyBytes, 4<<20)
	c.MaxWaiting = cmp.Or(c.MaxWaiting, 1024)
	c.MaxFlowWaiting = min(cmp.Or(c.MaxFlowWaiting, 512), c.MaxWaiting)
	c.MaxFlowParked = min(cmp.Or(c.MaxFlowParked, DefaultMaxFlowParked), c.MaxWaiting)
	c.MaxWaitingBytes = cmp.Or(c.MaxWaitingBytes, 256<<20)
	c.Lag = cmp.Or(c.Lag, time.Second)
	c.RetryBase = cmp.Or(c.RetryBase, 250*time.Millisecond)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

func (c Config) validate() error {
	if _, err := llm.ParseProfile(string(c.Profile)); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	if c.Upstream != "" || len(c.Models) == 0 {
		if err := checkUpstream(c.Upstream); err != nil {
			return fmt.Errorf("gateway: %w", err)
		}
	}
	if c.DefaultMaxTokens < 0 {
		return fmt.Errorf("gateway: default max_tokens %d is negative", c.DefaultMaxTokens)
	}
	if err := c.Budget.Validate(c.Price); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	if err := c.validateModels(); err != nil {
		return err
	}
	if c.Speed < 0 || math.IsNaN(c.Speed) || math.IsInf(c.Speed, 0) {
		return fmt.Errorf("gateway: speed must be a finite number ≥ 0, got %v", c.Speed)
	}
	if c.MaxWait < 0 || c.MaxBodyBytes < 0 || c.RetryBase < 0 {
		return errors.New("gateway: max wait, max body size and retry base must not be negative")
	}
	if c.RetryWindow < 0 || c.MaxFollowedRefusals < 0 {
		return fmt.Errorf("gateway: retry window %v and max followed refusals %d must not be negative", c.RetryWindow, c.MaxFollowedRefusals)
	}
	if c.MaxWaiting < 0 || c.MaxFlowWaiting < 0 || c.MaxWaitingBytes < 0 || c.MaxFlowParked < 0 {
		return errors.New("gateway: max waiting, max flow waiting, max waiting bytes and max flow parked must not be negative")
	}
	seen := map[string]bool{}
	for _, f := range c.Flows {
		if f.Name == "" {
			return errors.New("gateway: a flow has no name")
		}
		if seen[f.Name] {
			return fmt.Errorf("gateway: flow %q listed twice", f.Name)
		}
		seen[f.Name] = true
		if f.DefaultMaxTokens < 0 {
			return fmt.Errorf("gateway: flow %q: default max_tokens %d is negative", f.Name, f.DefaultMaxTokens)
		}
	}
	keys := map[string]bool{}
	for i, k := range c.ClientKeys {
		if err := guard.CheckToken(fmt.Sprintf("client key %d", i+1), k.Key); err != nil {
			return fmt.Errorf("gateway: %w", err)
		}
		if keys[k.Key] {
			return fmt.Errorf("gateway: client key %d is listed twice", i+1)
		}
		keys[k.Key] = true
		if c.APIKey != "" && k.Key == c.APIKey {
			return fmt.Errorf("gateway: client key %d is the upstream key: give callers keys of their own", i+1)
		}
		for _, m := range c.Models {
			for _, t := range m.Targets {
				if t.APIKey != "" && k.Key == t.APIKey {
					return fmt.Errorf("gateway: client key %d is the key of target %q: give callers keys of their own", i+1, t.Name)
				}
			}
		}
	}
	return nil
}
