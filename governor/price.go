package governor

import (
	"fmt"
	"math"
	"strings"
)

// Price is what a model's tokens cost, in money per million tokens: the
// unit of money is the configuration's (dollars, say); a budget (MPD, MPM)
// counts billionths of it.
type Price struct {
	Input float64
	// CachedInput prices the input tokens a provider read from its cache
	// (Cost.Cached); 0 prices them as Input.
	CachedInput float64
	Output      float64
}

// MaxPrice bounds each part of a Price: a million units of money per
// million tokens.
const MaxPrice = 1e6

// Nano is the number of a budget's units in one unit of money.
const Nano = 1e9

// IsZero reports whether p prices nothing: no budget can apply.
func (p Price) IsZero() bool { return p == Price{} }

func (p Price) validate() error {
	for _, f := range [...]struct {
		name string
		v    float64
	}{{"Input", p.Input}, {"CachedInput", p.CachedInput}, {"Output", p.Output}} {
		if !(f.v >= 0 && f.v <= MaxPrice) {
			return fmt.Errorf("Price.%s %v is not between 0 and %v (money per million tokens)", f.name, f.v, float64(MaxPrice))
		}
	}
	return nil
}

// Of is c's price in billionths of the unit of money, rounded up and at
// most MaxCost: its input at the input price, the part of it read from a
// cache at the cached price, its output at the output price.
func (p Price) Of(c Cost) int64 {
	cached := min(max(c.Cached, 0), max(c.Input, 0))
	ci := p.CachedInput
	if ci == 0 {
		ci = p.Input
	}
	// Per million tokens, in billionths: a token costs price × 1,000.
	v := (float64(max(c.Input, 0)-cached)*p.Input + float64(cached)*ci + float64(max(c.Output, 0))*p.Output) * 1e3
	return int64(min(math.Ceil(v), MaxCost))
}

// priced returns c with its Money set from the governor's price, or c as
// given when the governor has none.
func (g *Governor) priced(c Cost) Cost {
	if !g.cfg.Price.IsZero() {
		c.Money = g.cfg.Price.Of(c)
	}
	return c
}

// FormatMoney writes an amount of a budget's units (billionths) as money,
// with as many decimals as it needs, at least two: "5.00", "0.0123".
func FormatMoney(nano int64) string {
	v := float64(nano) / Nano
	s := fmt.Sprintf("%.9f", v)
	s = strings.TrimRight(s, "0")
	if i := strings.IndexByte(s, '.'); i >= 0 && len(s)-i-1 < 2 {
		s += strings.Repeat("0", 2-(len(s)-i-1))
	}
	return s
}

// budgets writes ls's budgets for a message: "mpd=5.00, mpm=100.00".
func (ls Limits) budgets() string {
	var parts []string
	for _, l := range [...]Limit{MPD, MPM} {
		if ls[l] > 0 {
			parts = append(parts, l.String()+"="+FormatMoney(ls[l]))
		}
	}
	return strings.Join(parts, ", ")
}
