package ui

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/sluice-dev/sluice/internal/health"
	"github.com/sluice-dev/sluice/internal/httperr"
	"github.com/sluice-dev/sluice/internal/progress"
	"github.com/sluice-dev/sluice/internal/store"
)

// The flow page's lists.
const (
	itemsPage       = 50 // items a page
	backfillRunsMax = 10 // latest backfill runs
)

type flowsView struct {
	Flows    []flowView
	HealthOn bool
	Retries  []clientRetryRow // the gateway's 429s by client key (retries.go)
}

// flowView is a flow's health with its progress, as progress.Of reads it
// at the app's clock.
type flowView struct {
	health.Flow
	Fig progress.Figures
}

func (h *Handler) flows(w http.ResponseWriter, r *http.Request) error {
	v := flowsView{HealthOn: h.cfg.Health != nil}
	now := h.cfg.AppNow()
	if h.cfg.Health != nil {
		for _, f := range h.cfg.Health.Flows() {
			v.Flows = append(v.Flows, flowView{Flow: f, Fig: progress.Of(f, now)})
		}
	}
	slices.SortFunc(v.Flows, func(a, b flowView) int { return strings.Compare(a.Name, b.Name) })
	if h.cfg.ClientRetries != nil {
		v.Retries = clientRetryRows(h.cfg.ClientRetries())
	}
	h.renderLiveAt(w, r, "flows", "Flows", "flows", v, now)
	return nil
}

type flowPage struct {
	Name     string
	Flow     flowView
	Known    bool // the health monitor judges it
	ItemsOn  bool // the dashboard reads items
	Backfill bool // it is a backfill: it has items
	Items    []itemView
	Paged    bool   // a page after the first
	Older    string // the next page's URL; "" on the last
	Runs     []backfillRunView
}

// itemView is one item of a backfill on the flow page.
type itemView struct {
	Key                                        string
	ActiveAt, EligibleAt, ProcessedAt, RetryAt time.Time
	Outcome                                    string // saved, rejected, parked, pending
	Reason                                     string
	Attempts                                   int
	RunID                                      string
}

type backfillRunView struct {
	store.BackfillRun
	Rejected      []reasonCount // by count, then reason
	RejectedTotal int
	Duration      time.Duration
}

type reasonCount struct {
	Reason string
	Count  int
}

// quoteName quotes a name for a message, cut to its first 48 bytes.
func quoteName(s string) string {
	if len(s) > 48 {
		return strconv.Quote(strings.ToValidUTF8(s[:48], "")) + "…"
	}
	return strconv.Quote(s)
}

func (h *Handler) flow(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	// A name no flow can have is refused here, as the store would refuse it.
	if len(name) > store.MaxKeyBytes || !utf8.ValidString(name) || strings.ContainsFunc(name, unicode.IsControl) {
		return httperr.BadRequest(fmt.Errorf("flow name %s is not a name: at most %d bytes of UTF-8 without control characters", quoteName(name), store.MaxKeyBytes))
	}
	p := flowPage{Name: name, ItemsOn: h.cfg.Items != nil}
	now := h.cfg.AppNow()
	if h.cfg.Health != nil {
		for _, f := range h.cfg.Health.Flows() {
			if f.Name == name {
				p.Flow, p.Known = flowView{Flow: f, Fig: progress.Of(f, now)}, true
				break
			}
		}
	}
	before, err := parseCursor(r.URL.Query())
	if err != nil {
		return err
	}
	if h.cfg.Items != nil {
		items, err := h.cfg.Items.RecentItems(r.Context(), name, itemsPage, before)
		switch {
		case errors.Is(err, store.ErrNoJob):
		case err != nil:
			return fmt.Errorf("read the recent items of %s: %w", name, err)
		default:
			p.Backfill = true
			p.Paged = !before.IsZero()
			for _, it := range items {
				p.Items = append(p.Items, itemViewOf(it))
			}
			if len(items) == itemsPage {
				c := items[len(items)-1].Before()
				p.Older = "/flows/" + url.PathEscape(name) + "?" + url.Values{"before_at": {c.At.UTC().Format(time.RFC3339Nano)}, "before_key": {c.Key}}.Encode()
			}
			runs, err := h.cfg.Items.BackfillRuns(r.Context(), name, backfillRunsMax)
			if err != nil {
				return fmt.Errorf("read the runs of %s: %w", name, err)
			}
			for _, br := range runs {
				p.Runs = append(p.Runs, backfillRunViewOf(br))
			}
		}
	}
	if !p.Known && !p.Backfill {
		return httperr.NotFound(fmt.Errorf("there is no flow named %q", name))
	}
	h.renderLiveAt(w, r, "flow", name, "flows", p, now)
	return nil
}

// parseCursor reads the flow page's place in the items: before_at (an
// RFC 3339 time) and before_key.
func parseCursor(q url.Values) (store.RecentCursor, error) {
	var c store.RecentCursor
	at, key := q.Get("before_at"), q.Get("before_key")
	if at == "" {
		if key != "" {
			return c, httperr.BadRequest(errors.New("before_key needs before_at, the time of the item it names"))
		}
		return c, nil
	}
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return c, httperr.BadRequest(fmt.Errorf("before_at %q is not an RFC 3339 time", shorten(at, 64)))
	}
	if len(key) > store.MaxKeyBytes || !utf8.ValidString(key) || strings.IndexByte(key, 0) >= 0 {
		return c, httperr.BadRequest(fmt.Errorf("before_key is not an item key (at most %d bytes of UTF-8 without NUL)", store.MaxKeyBytes))
	}
	return store.RecentCursor{At: t, Key: key}, nil
}

func itemViewOf(it store.RecentItem) itemView {
	v := itemView{Key: it.Key, ActiveAt: it.ActiveAt, EligibleAt: it.EligibleAt, ProcessedAt: it.ProcessedAt, Outcome: string(it.State),
		Attempts: it.Rejects, RunID: it.RunID}
	switch it.State {
	case store.ItemSaved:
		v.Attempts++ // the rejected outputs, and the one saved
	case store.ItemRejected:
		v.Reason, v.RetryAt = it.Reason, it.RetryAt
	case store.ItemParked:
		v.Reason = it.Reason
	}
	return v
}

func backfillRunViewOf(r store.BackfillRun) backfillRunView {
	v := backfillRunView{BackfillRun: r}
	if !r.StartedAt.IsZero() && r.EndedAt.After(r.StartedAt) {
		v.Duration = r.EndedAt.Sub(r.StartedAt)
	}
	for reason, n := range r.Rejected {
		v.Rejected = append(v.Rejected, reasonCount{Reason: reason, Count: n})
		v.RejectedTotal += n
	}
	slices.SortFunc(v.Rejected, func(a, b reasonCount) int {
		if a.Count != b.Count {
			return b.Count - a.Count
		}
		return strings.Compare(a.Reason, b.Reason)
	})
	return v
}
