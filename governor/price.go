package governor

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
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
	}{{"input", p.Input}, {"cached_input", p.CachedInput}, {"output", p.Output}} {
		if !(f.v >= 0 && f.v <= MaxPrice) {
			return fmt.Errorf("price %s %v: want money per million tokens between 0 and %v", f.name, f.v, float64(MaxPrice))
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

// Price returns the key's price (Config.Price): the zero Price when it has
// none.
func (g *Governor) Price() Price {
	g.mustBeNew()
	return g.cfg.Price
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

// Budget is money a key's calls may cost, in the unit of its Price
// (dollars, say): Day in any 24 hours, Month in any 30 days; 0 is no
// budget. A budget is a limit like the key's tokens (MPD, MPM): a call is
// admitted on its worst-case price (the prompt's estimate and max_tokens
// at the model's prices) when that fits, settled with what the provider
// reports, shared fairly among flows and paced over its period; a call
// whose worst case can never fit is refused at once, naming the budget.
type Budget struct {
	Day, Month float64
}

// MaxBudget bounds a budget: a billion units of money.
const MaxBudget = 1e9

// IsZero reports whether b sets no budget.
func (b Budget) IsZero() bool { return b == Budget{} }

// Limits returns ls with b's budgets as MPD and MPM, in billionths.
func (b Budget) Limits(ls Limits) Limits {
	if b.Day > 0 {
		ls[MPD] = int64(math.Round(b.Day * Nano))
	}
	if b.Month > 0 {
		ls[MPM] = int64(math.Round(b.Month * Nano))
	}
	return ls
}

// Validate returns an error naming what is wrong with b for a key priced
// at price: a budget that is not a number between 0 and MaxBudget, below
// the billionth a budget counts in, or set without a price.
func (b Budget) Validate(price Price) error {
	for _, f := range [...]struct {
		name string
		v    float64
	}{{"day", b.Day}, {"month", b.Month}} {
		if !(f.v >= 0 && f.v <= MaxBudget) {
			return fmt.Errorf("budget %s %v: want an amount of money between 0 and %v (0: no budget)", f.name, f.v, float64(MaxBudget))
		}
		if f.v > 0 && f.v*Nano < 1 {
			return fmt.Errorf("budget %s %v: below a billionth, the smallest amount a budget counts", f.name, f.v)
		}
	}
	if !b.IsZero() && price.IsZero() {
		return errors.New("a budget needs the key's price, to know what a call costs")
	}
	return nil
}

// UnmarshalText reads "day=5.00,month=100", as flags write a budget; the
// empty string is no budget.
func (b *Budget) UnmarshalText(text []byte) error {
	var out Budget
	err := parseParts(string(text), "budget", map[string]*float64{"day": &out.Day, "month": &out.Month}, "day=5.00,month=100")
	if err != nil {
		return err
	}
	if err := out.Validate(Price{Input: 1}); err != nil {
		return err
	}
	*b = out
	return nil
}

// MarshalText writes b as UnmarshalText reads it, so a budget goes in
// JSON and YAML as the text flags take: "day=5,month=100".
func (b Budget) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

// String writes b as UnmarshalText reads it.
func (b Budget) String() string {
	return joinParts([]string{"day", "month"}, []float64{b.Day, b.Month})
}

// UnmarshalText reads "input=0.59,output=0.79,cached_input=0.30", money
// per million tokens, as flags write a price; the empty string is none.
func (p *Price) UnmarshalText(text []byte) error {
	var out Price
	err := parseParts(string(text), "price", map[string]*float64{"input": &out.Input, "cached_input": &out.CachedInput, "output": &out.Output},
		"input=0.59,output=0.79")
	if err != nil {
		return err
	}
	if err := out.validate(); err != nil {
		return err
	}
	*p = out
	return nil
}

// MarshalText writes p as UnmarshalText reads it.
func (p Price) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// String writes p as UnmarshalText reads it.
func (p Price) String() string {
	return joinParts([]string{"input", "cached_input", "output"}, []float64{p.Input, p.CachedInput, p.Output})
}

// parseParts reads "name=number,…" into the fields of parts; what names
// the thing read in errors, and example shows the form.
func parseParts(s, what string, parts map[string]*float64, example string) error {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		name = strings.ToLower(strings.TrimSpace(name))
		dst, known := parts[name]
		switch {
		case !ok:
			return fmt.Errorf("%s %q: want name=amount, e.g. %s", what, part, example)
		case !known:
			names := make([]string, 0, len(parts))
			for n := range parts {
				names = append(names, n)
			}
			slices.Sort(names)
			return fmt.Errorf("%s: unknown part %q (want %s)", what, name, strings.Join(names, ", "))
		case seen[name]:
			return fmt.Errorf("%s: %s given twice", what, name)
		}
		seen[name] = true
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("%s %s: %q is not a number", what, name, val)
		}
		*dst = v
	}
	return nil
}

// joinParts writes the parts that are not 0 as "name=number,…".
func joinParts(names []string, vals []float64) string {
	var parts []string
	for i, v := range vals {
		if v != 0 {
			parts = append(parts, names[i]+"="+strconv.FormatFloat(v, 'f', -1, 64))
		}
	}
	return strings.Join(parts, ",")
}
